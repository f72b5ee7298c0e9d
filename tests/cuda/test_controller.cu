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
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "gnmr/cuda/controller.cuh"
#include "gnmr/host/controller.hpp"
#include "gnmr/io/state.hpp"
#include "gnmr/policy/mean.hpp"
#include "harness.cuh"
#include "../support/controller_cases.hpp"
#include "../support/trace_gen.hpp"

namespace gpu_test {
namespace {

using ctlcases::systemic_opt;

// The device controller of a host controller's policy set.
template <class PS>
using DevOf = gnmr::cuda::DeviceController<typename PS::NormT, typename PS::MeanT, typename PS::TriggerT,
                                           typename PS::RecoveryT, typename PS::BudgetT>;

struct Mismatch {
  std::size_t flags = 0, scale = 0, lock = 0, ratio_ulp = 0, ratio_exact = 0, norm = 0, risk = 0, summary = 0;
  std::size_t total() const { return flags + scale + lock + ratio_ulp + norm + risk + summary; }
};

template <class HostCtl, class DevCtl>
void compare(const ctlcases::Case& c, HostCtl& host, DevCtl& dev) {
  const char* name = c.name.c_str();
  const std::size_t n = c.n;
  const int steps = c.steps;
  const bool from_partials = c.from_partials;
  std::printf("  %s: %zu units, %d steps\n", name, n, steps);
  std::vector<float> in(n);
  Dev<float> d_in(n);
  Mismatch mm;
  ctlcases::Stats st;
  for (int s = 1; s <= steps; ++s) {
    ctlcases::fill(c, s, in);
    d_in.upload(in);
    cudaError_t e = from_partials ? dev.step(d_in.p, 0) : dev.step_norms(d_in.p, 0);
    CK(e);
    const gnmr::StepSummary& hs = from_partials ? host.step(in) : host.step_norms(in);
    CK(cudaDeviceSynchronize());
    const std::vector<gnmr::UnitDecision> dd = dev.copy_decisions();
    const std::vector<gnmr::UnitReport> dr = dev.copy_reports();
    const gnmr::StepSummary ds = dev.copy_summary();
    st.add(hs, host.policies().opt.systemic.max_grants);
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
  // The trace must exercise what is compared, or the test proves little
  // (the CPU suite checks the same on every run:
  // tests/unit/test_gpu_case_preconditions.cpp).
  const std::string why = ctlcases::unmet(c, host.policies(), st);
  EXPECT(why.empty(), "%s", why.c_str());
  EXPECT(dev.copy_global_state().total.k == host.global_state().total.k, "%s: tracker sample counts differ", name);
  std::printf("    ratios bit-identical except %zu; %zu contended steps, %zu systemic, %zu grants\n", mm.ratio_exact,
              st.denied_steps, st.systemic_steps, st.grants);
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
  bool first = true;
  ctlcases::visit_cases(quick(), [&first](const ctlcases::Case& c, auto&& host) {
    using Dev = DevOf<typename std::decay_t<decltype(host)>::Policies>;
    const auto& p = host.policies();
    if (!c.numel.empty()) host.set_unit_numel(c.numel.data(), c.numel.size());
    if (c.caller_workspace) {
      const std::size_t bytes = Dev::workspace_bytes(c.n, p.budget);
      gpu_test::Dev<unsigned char> ws(bytes);
      Dev dev(ws.p, bytes, c.n, p.norm, p.mean, p.trigger, p.recovery, p.budget, p.opt);
      compare(c, host, dev);
      // Large enough, misaligned: refused for the alignment alone.
      gpu_test::Dev<unsigned char> ws2(bytes + 256);
      bool threw = false;
      try {
        Dev bad(ws2.p + 16, bytes, c.n, p.norm, p.mean, p.trigger, p.recovery, p.budget, p.opt);
      } catch (const std::invalid_argument& e) {
        threw = std::strstr(e.what(), "256-byte aligned") != nullptr;
      }
      EXPECT(threw, "a workspace that is not 256-byte aligned was accepted");
      return;
    }
    Dev dev(c.n, p);
    if (!c.numel.empty()) dev.set_unit_numel(c.numel);
    if (first)
      std::printf("  commit kernel as a programmatic dependent launch: %s\n", dev.programmatic_launch() ? "yes" : "no");
    first = false;
    compare(c, host, dev);
  });
  state_blob_across_backends();
}

}  // namespace gpu_test
