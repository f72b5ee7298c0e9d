// GPU test: DeviceController against the host GnmrController on long
// random traces (spikes, bursts far beyond the slots, NaN/Inf, exact ties),
// at N = 1000 and N = 1,000,000 with small maxO, through both selection
// paths (per-block pre-filter and full radix select), from norms and from
// partials, with the systemic rule off and under each action (the bursts
// are systemic; global-clip's tree of squares spans three levels at 1M
// units), with the denied-unit clip, and with a trigger that reads
// UnitView::unit. Decisions, flags, grants, lock counters and the summary
// (systemic fields included) must be identical; ratios equal or within
// 1 ulp (they are expected to be equal). Then the typed state blob:
// save_state / load_state on the DeviceController, across the backends.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gnmr/cuda/controller.cuh"
#include "gnmr/host/controller.hpp"
#include "gnmr/io/state.hpp"
#include "gnmr/policy/mean.hpp"
#include "harness.cuh"
#include "../support/trace_gen.hpp"

namespace gpu_test {
namespace {

// GNMR's trigger with a per-unit tau: tau + (unit % 4) / 2 (a policy can
// read its unit's index: UnitView::unit).
struct PerUnitTau {
  static constexpr const char* kName = "per_unit_tau";
  gnmr::GnmrTrigger base;
  using State = gnmr::GnmrTrigger::State;
  GNMR_HOST_DEVICE static State init() { return gnmr::GnmrTrigger::init(); }
  GNMR_HOST_DEVICE gnmr::GnmrTrigger at(std::uint32_t unit) const {
    gnmr::GnmrTrigger t = base;
    t.tau = gnmr::math::add(base.tau, 0.5f * static_cast<float>(unit % 4u));
    return t;
  }
  GNMR_HOST_DEVICE void evaluate(const State& s, gnmr::UnitView& v) const { at(v.unit).evaluate(s, v); }
  GNMR_HOST_DEVICE float feed(const gnmr::UnitView& v) const { return at(v.unit).feed(v); }
  GNMR_HOST_DEVICE void update(State& s, const gnmr::UnitView& v) const { base.update(s, v); }
  std::string check() const { return base.check(); }
};

gnmr::ControllerOptions systemic_opt(gnmr::SystemicAction a, double share, double maxo_multiple = 0.0) {
  gnmr::ControllerOptions o;
  o.systemic.action = a;
  o.systemic.share = share;
  o.systemic.maxo_multiple = maxo_multiple;
  return o;
}

struct Mismatch {
  std::size_t flags = 0, scale = 0, lock = 0, ratio_ulp = 0, ratio_exact = 0, norm = 0, risk = 0, summary = 0;
  std::size_t total() const { return flags + scale + lock + ratio_ulp + norm + risk + summary; }
};

template <class HostCtl, class DevCtl>
void compare(const char* name, HostCtl& host, DevCtl& dev, std::size_t n, int steps, std::uint64_t seed,
             bool from_partials, bool expect_denials = true) {
  std::printf("  %s: %zu units, %d steps\n", name, n, steps);
  std::vector<float> in(n);
  Dev<float> d_in(n);
  Mismatch mm;
  std::size_t denied_steps = 0, grants = 0, systemic_steps = 0;
  for (int s = 1; s <= steps; ++s) {
    tracegen::fill(seed, s, in);
    if (from_partials)
      for (float& x : in) x = x * x;  // a sum of squares; NaN/Inf stay non-finite
    d_in.upload(in);
    cudaError_t e = from_partials ? dev.step(d_in.p, 0) : dev.step_norms(d_in.p, 0);
    CK(e);
    const gnmr::StepSummary& hs = from_partials ? host.step(in) : host.step_norms(in);
    CK(cudaDeviceSynchronize());
    const std::vector<gnmr::UnitDecision> dd = dev.copy_decisions();
    const std::vector<gnmr::UnitReport> dr = dev.copy_reports();
    const gnmr::StepSummary ds = dev.copy_summary();
    denied_steps += hs.denied > 0;
    grants += hs.granted;
    systemic_steps += hs.systemic != 0u;
    const bool sum_ok = ds.step == hs.step && ds.triggered == hs.triggered && ds.granted == hs.granted &&
                        ds.in_recovery == hs.in_recovery && ds.denied == hs.denied &&
                        ds.nonfinite == hs.nonfinite && ds.released == hs.released &&
                        ds.max_ratio_unit == hs.max_ratio_unit && same_bits(ds.max_ratio, hs.max_ratio) &&
                        ds.skip_step == hs.skip_step && ds.systemic == hs.systemic &&
                        same_bits(ds.systemic_scale, hs.systemic_scale) && same_bits(ds.total_norm, hs.total_norm) &&
                        same_bits(ds.total_mean, hs.total_mean);
    if (!sum_ok) {
      if (mm.summary == 0)
        std::printf("    step %d summary: dev trig %u gr %u den %u rec %u sys %u G %.9g M %.9g s %.9g | host trig %u "
                    "gr %u den %u rec %u sys %u G %.9g M %.9g s %.9g\n",
                    s, ds.triggered, ds.granted, ds.denied, ds.in_recovery, ds.systemic, ds.total_norm, ds.total_mean,
                    ds.systemic_scale, hs.triggered, hs.granted, hs.denied, hs.in_recovery, hs.systemic,
                    hs.total_norm, hs.total_mean, hs.systemic_scale);
      ++mm.summary;
    }
    for (std::size_t i = 0; i < n; ++i) {
      const gnmr::UnitDecision& hd = host.decisions()[i];
      const gnmr::UnitReport& hr = host.reports()[i];
      if (dd[i].flags != hd.flags) {
        if (mm.flags < 5)
          std::printf("    step %d unit %zu flags dev %#x host %#x\n", s, i, dd[i].flags, hd.flags);
        ++mm.flags;
      }
      mm.scale += !same_bits(dd[i].scale, hd.scale);
      mm.lock += dr[i].lock_left != hr.lock_left;
      mm.ratio_exact += !same_bits(dr[i].ratio, hr.ratio);
      mm.ratio_ulp += !within_ulp(dr[i].ratio, hr.ratio);
      mm.norm += !same_bits(dr[i].norm, hr.norm) && !(dr[i].norm != dr[i].norm && hr.norm != hr.norm);
      mm.risk += !same_bits(dr[i].risk, hr.risk);
    }
  }
  EXPECT(mm.total() == 0, "%s: mismatches flags %zu scale %zu lock %zu ratio(>1ulp) %zu norm %zu risk %zu summary %zu",
         name, mm.flags, mm.scale, mm.lock, mm.ratio_ulp, mm.norm, mm.risk, mm.summary);
  EXPECT(dev.steps_done() == steps, "%s: device step counter", name);
  // The trace must exercise what is compared, or the test proves little.
  // Systemic steps replace the denials: a systemic run contends through them.
  const bool systemic_on = host.policies().opt.systemic.action != gnmr::SystemicAction::kOff;
  EXPECT((!expect_denials || denied_steps + systemic_steps >= 3) && grants > 0,
         "%s: trace did not contend (denied steps %zu, systemic %zu, grants %zu)", name, denied_steps,
         systemic_steps, grants);
  EXPECT(!systemic_on || (systemic_steps >= 1 && systemic_steps + 2 <= static_cast<std::size_t>(steps)),
         "%s: the trace should have systemic and ordinary steps (%zu systemic of %d)", name, systemic_steps, steps);
  EXPECT(dev.copy_global_state().total.k == host.global_state().total.k, "%s: tracker sample counts differ", name);
  std::printf("    ratios bit-identical except %zu; %zu contended steps, %zu systemic, %zu grants\n", mm.ratio_exact,
              denied_steps, systemic_steps, grants);
}

// The typed blob: a device checkpoint resumes on the host and a host one on
// the device, bit for bit; a refused blob leaves the device state alone.
void state_blob_across_backends() {
  const std::size_t n = 3000;
  const gnmr::ControllerOptions o = systemic_opt(gnmr::SystemicAction::kGlobalClip, 0.1);
  gnmr::MaxO b;
  b.max_o = 3;
  gnmr::GnmrController<> host(n, {}, {}, {}, {}, b, o), host2(n, {}, {}, {}, {}, b, o);
  gnmr::cuda::DeviceController<> dev(n, {}, {}, {}, {}, b, o), dev2(n, {}, {}, {}, {}, b, o);
  std::vector<float> in(n);
  Dev<float> d_in(n);
  for (int s = 1; s <= 40; ++s) {
    tracegen::fill(211, s, in);
    d_in.upload(in);
    CK(dev.step_norms(d_in.p, 0));
    host.step_norms(in);
  }
  const std::vector<std::uint8_t> from_dev = gnmr::save_state(dev);
  const gnmr::StateInfo info = gnmr::read_state_info(from_dev.data(), from_dev.size());
  EXPECT(info.version == gnmr::kStateFormatVersion && info.steps_done == 40 && info.num_units == n,
         "device blob header: version %u steps %lld units %llu", info.version, static_cast<long long>(info.steps_done),
         static_cast<unsigned long long>(info.num_units));
  gnmr::load_state(host2, from_dev);    // device -> host
  gnmr::load_state(dev2, gnmr::save_state(host));  // host -> device
  std::size_t diff = 0;
  for (int s = 41; s <= 80; ++s) {
    tracegen::fill(211, s, in);
    d_in.upload(in);
    CK(dev2.step_norms(d_in.p, 0));
    host.step_norms(in);
    host2.step_norms(in);
    const auto dd = dev2.copy_decisions();
    diff += std::memcmp(dd.data(), host.decisions().data(), n * sizeof(gnmr::UnitDecision)) != 0;
    diff += std::memcmp(host2.decisions().data(), host.decisions().data(), n * sizeof(gnmr::UnitDecision)) != 0;
  }
  EXPECT(diff == 0, "resumed controllers differ from the uninterrupted host on %zu step-comparisons", diff);
  // A blob of other policies: refused, the device state untouched.
  gnmr::GnmrController<gnmr::L2Norm, gnmr::CumulativeMean> other(n);
  const auto before = dev2.copy_unit_states();
  bool threw = false;
  try {
    gnmr::load_state(dev2, gnmr::save_state(other));
  } catch (const gnmr::StateError& e) {
    threw = std::strstr(e.what(), "saved by l2/cumulative/") != nullptr;
  }
  const auto after = dev2.copy_unit_states();
  EXPECT(threw, "a blob of other policies was not refused with both names");
  EXPECT(std::memcmp(before.data(), after.data(), before.size() * sizeof(before[0])) == 0,
         "a refused blob changed the device state");
  std::printf("  state blob: device -> host and host -> device resume bit for bit\n");
}

}  // namespace

void test_controller_vs_host() {
  std::printf("[controller vs host]\n");
  const bool q = quick();
  {
    gnmr::MaxO b;
    b.max_o = 3;
    b.lock = 4;
    gnmr::GnmrController<> host(1000, {}, {}, {}, {}, b);
    gnmr::cuda::DeviceController<> dev(1000, {}, {}, {}, {}, b);
    std::printf("  commit kernel as a programmatic dependent launch: %s\n", dev.programmatic_launch() ? "yes" : "no");
    compare("default, maxO 3", host, dev, 1000, q ? 30 : 60, 101, false);
  }
  {
    const std::size_t n = q ? 100000 : 1000000;
    gnmr::MaxO b;
    b.max_o = 2;
    b.lock = 3;
    gnmr::GnmrController<> host(n, {}, {}, {}, {}, b);
    gnmr::cuda::DeviceController<> dev(n, {}, {}, {}, {}, b);
    compare("default, maxO 2, large N", host, dev, n, q ? 16 : 25, 102, false);
  }
  {
    // 40 slots > kTopKCap: the full radix select over all units, with a
    // cool-down, in a caller-owned workspace (two-phase form).
    gnmr::MaxO b;
    b.max_o = 40;
    b.lock = 3;
    b.cooldown = 2;
    const std::size_t n = 5000;
    const std::size_t bytes = gnmr::cuda::DeviceController<>::workspace_bytes(n, b);
    Dev<unsigned char> ws(bytes);
    gnmr::GnmrController<> host(n, {}, {}, {}, {}, b);
    gnmr::cuda::DeviceController<> dev(ws.p, bytes, n, {}, {}, {}, {}, b);
    compare("default, maxO 40, caller workspace", host, dev, n, 40, 103, false);
    // Large enough, misaligned: refused for the alignment alone.
    Dev<unsigned char> ws2(bytes + 256);
    bool threw = false;
    try {
      gnmr::cuda::DeviceController<> bad(ws2.p + 16, bytes, n, {}, {}, {}, {}, b);
    } catch (const std::invalid_argument& e) {
      threw = std::strstr(e.what(), "256-byte aligned") != nullptr;
    }
    EXPECT(threw, "a workspace that is not 256-byte aligned was accepted");
  }
  {
    // From partials, RMS norm (unit sizes), window mean, reset on grant,
    // unlimited budget.
    using Rec = gnmr::Compose<gnmr::ClipToMean, gnmr::ResetMoments>;
    using Host = gnmr::GnmrController<gnmr::RmsNorm, gnmr::WindowMean<16>, gnmr::GnmrTrigger, Rec, gnmr::Unlimited>;
    using DevC = gnmr::cuda::DeviceController<gnmr::RmsNorm, gnmr::WindowMean<16>, gnmr::GnmrTrigger, Rec,
                                              gnmr::Unlimited>;
    const std::size_t n = 3000;
    gnmr::Unlimited b;
    b.lock = 2;
    Host host(n, {}, {}, {}, {}, b);
    DevC dev(n, {}, {}, {}, {}, b);
    std::vector<std::uint64_t> numel(n);
    for (std::size_t i = 0; i < n; ++i) numel[i] = 1 + (i * 7919) % 100000;
    host.set_unit_numel(numel.data(), n);
    dev.set_unit_numel(numel);
    compare("rms/window/reset/unlimited from partials", host, dev, n, 40, 104, true, false);  // never denies
  }
  // The systemic rule: the trace's bursts (every 7th step from 14, a quarter
  // of the tie groups) are systemic at share 0.1.
  {
    gnmr::MaxO b;
    b.max_o = 3;
    b.lock = 4;
    // C = min(floor(0.5 * 1000), floor(5 * 3)) = 15: the bursts, not the ordinary spikes.
    const auto o = systemic_opt(gnmr::SystemicAction::kClipTriggered, 0.5, 5.0);
    gnmr::GnmrController<> host(1000, {}, {}, {}, {}, b, o);
    gnmr::cuda::DeviceController<> dev(1000, {}, {}, {}, {}, b, o);
    compare("systemic clip-triggered, maxO 3", host, dev, 1000, q ? 30 : 60, 105, false);
  }
  {
    const std::size_t n = q ? 100000 : 1000000;  // 3907 block sums: a three-level tree
    gnmr::MaxO b;
    b.max_o = 2;
    b.lock = 3;
    const auto o = systemic_opt(gnmr::SystemicAction::kGlobalClip, 0.1);
    gnmr::GnmrController<> host(n, {}, {}, {}, {}, b, o);
    gnmr::cuda::DeviceController<> dev(n, {}, {}, {}, {}, b, o);
    compare("systemic global-clip, large N, from partials", host, dev, n, q ? 16 : 30, 106, true);
  }
  {
    gnmr::MaxO b;
    b.max_o = 40;
    b.lock = 3;
    b.cooldown = 2;
    const auto o = systemic_opt(gnmr::SystemicAction::kSkip, 0.1);
    gnmr::GnmrController<> host(5000, {}, {}, {}, {}, b, o);
    gnmr::cuda::DeviceController<> dev(5000, {}, {}, {}, {}, b, o);
    compare("systemic skip, maxO 40", host, dev, 5000, 40, 107, false);
  }
  {
    // The per-step cap (max_grants 2 of maxO 6) under clip-triggered: every
    // step with three or more candidates and free slots selects two of them,
    // on the top-k path (slots <= its cap) and on the full select (maxO 64).
    for (const std::int32_t max_o : {6, 64}) {
      gnmr::MaxO b;
      b.max_o = max_o;
      b.lock = 3;
      auto o = systemic_opt(gnmr::SystemicAction::kClipTriggered, 0.5);
      o.systemic.max_grants = 2;
      gnmr::GnmrController<> host(3000, {}, {}, {}, {}, b, o);
      gnmr::cuda::DeviceController<> dev(3000, {}, {}, {}, {}, b, o);
      compare(max_o == 6 ? "max_grants 2, maxO 6" : "max_grants 2, maxO 64", host, dev, 3000, q ? 30 : 60,
              109, false, true);
    }
  }
  {
    // The denied-unit clip (systemic off), and a trigger that reads the unit index.
    gnmr::MaxO b;
    b.max_o = 3;
    b.lock = 4;
    gnmr::ControllerOptions o;
    o.denied.action = gnmr::DeniedAction::kClip;
    o.denied.kappa = 1.5f;
    using Host = gnmr::GnmrController<gnmr::L2Norm, gnmr::EmaMean, PerUnitTau>;
    using DevC = gnmr::cuda::DeviceController<gnmr::L2Norm, gnmr::EmaMean, PerUnitTau>;
    Host host(2000, {}, {}, {}, {}, b, o);
    DevC dev(2000, {}, {}, {}, {}, b, o);
    compare("denied clip, per-unit tau", host, dev, 2000, q ? 30 : 60, 108, false);
  }
  state_blob_across_backends();
}

}  // namespace gpu_test
