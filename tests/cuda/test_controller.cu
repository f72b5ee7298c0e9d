// GPU test: DeviceController against the host GnmrController on long
// random traces (spikes, bursts far beyond the slots, NaN/Inf, exact ties),
// at N = 1000 and N = 1,000,000 with small maxO, through both selection
// paths (per-block pre-filter and full radix select), from norms and from
// partials. Decisions, flags, grants and lock counters must be identical;
// ratios equal or within 1 ulp (they are expected to be equal).
#include <cstdio>
#include <cstring>
#include <vector>

#include "gnmr/controller.hpp"
#include "gnmr/cuda/controller.cuh"
#include "gnmr/policy/mean.hpp"
#include "harness.cuh"
#include "trace_gen.hpp"

namespace gpu_test {
namespace {

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
  std::size_t denied_steps = 0, grants = 0;
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
    const bool sum_ok = ds.step == hs.step && ds.triggered == hs.triggered && ds.granted == hs.granted &&
                        ds.in_recovery == hs.in_recovery && ds.denied == hs.denied &&
                        ds.nonfinite == hs.nonfinite && ds.released == hs.released &&
                        ds.max_ratio_unit == hs.max_ratio_unit && same_bits(ds.max_ratio, hs.max_ratio) &&
                        ds.skip_step == hs.skip_step;
    if (!sum_ok) {
      if (mm.summary == 0)
        std::printf("    step %d summary: dev trig %u gr %u den %u rec %u | host trig %u gr %u den %u rec %u\n", s,
                    ds.triggered, ds.granted, ds.denied, ds.in_recovery, hs.triggered, hs.granted, hs.denied,
                    hs.in_recovery);
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
  EXPECT((!expect_denials || denied_steps >= 3) && grants > 0,
         "%s: trace did not contend (denied steps %zu, grants %zu)", name, denied_steps, grants);
  std::printf("    ratios bit-identical except %zu; %zu contended steps, %zu grants\n", mm.ratio_exact,
              denied_steps, grants);
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
    std::printf("  phase 3 as a programmatic dependent launch: %s\n", dev.programmatic_launch() ? "yes" : "no");
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
}

}  // namespace gpu_test
