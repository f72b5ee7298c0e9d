// GPU test: every preset by name on the device (gnmr::cuda::make_device)
// against the same preset on the host (gnmr::presets::make), on a spiky
// trace with NaN/Inf and contention: identical flags, scales and summaries
// on every step. Then the state blob crosses backends: saved on the device
// half-way, loaded into a fresh host controller, both go on and must stay
// identical; a blob of another preset is refused and changes nothing.
// Layered "outer+inner" controllers go through the same checks.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gnmr/cuda/presets.cuh"
#include "gnmr/presets/make.hpp"
#include "harness.cuh"
#include "../support/trace_gen.hpp"

namespace gpu_test {
namespace {

// Differences between the host and device decisions of one step.
std::size_t diff_step(const gnmr::DynController& h, const gnmr::cuda::DynDeviceController& d) {
  const std::vector<gnmr::UnitDecision> dd = d.copy_decisions();
  const gnmr::StepSummary ds = d.copy_summary();
  const gnmr::StepSummary& hs = h.summary();
  std::size_t bad = 0;
  for (std::size_t i = 0; i < dd.size(); ++i)
    bad += dd[i].flags != h.decisions()[i].flags || !same_bits(dd[i].scale, h.decisions()[i].scale);
  bad += ds.step != hs.step || ds.triggered != hs.triggered || ds.granted != hs.granted ||
         ds.in_recovery != hs.in_recovery || ds.denied != hs.denied || ds.nonfinite != hs.nonfinite ||
         ds.skip_step != hs.skip_step || !same_bits(ds.max_ratio, hs.max_ratio);
  return bad;
}

// units/steps 0: the defaults (1 unit for a global preset, else 257; 130 or
// 160 steps).
void run_preset(const std::string& name, std::size_t units = 0, int steps_ = 0) {
  const bool global = gnmr::presets::is_global(name);
  const std::size_t n = units ? units : global ? 1 : 257;
  // More steps than AdaGC's 100-step warm-up even in quick mode, or it
  // never acts and the "acted" check below fails.
  const int steps = steps_ ? steps_ : quick() ? 130 : 160, half = steps / 2;
  auto host = gnmr::presets::make(name, n);
  auto dev = gnmr::cuda::make_device(name, n);
  EXPECT(dev->name() == name && dev->num_units() == n && dev->max_in_recovery() == host->max_in_recovery(),
         "%s: identity", name.c_str());
  std::unique_ptr<gnmr::DynController> resumed;
  std::vector<float> in(n);
  Dev<float> d_in(n);
  std::size_t bad = 0, bad_resumed = 0, acted = 0;
  for (int s = 1; s <= steps; ++s) {
    tracegen::preset_partials(s, in);  // spikes every preset acts on (see trace_gen.hpp)
    d_in.upload(in);
    CK(dev->step(d_in.p, 0));
    host->step(in.data(), n);
    CK(cudaDeviceSynchronize());
    bad += diff_step(*host, *dev);
    acted += host->summary().triggered + host->summary().skip_step;
    if (resumed) {
      resumed->step(in.data(), n);
      bad_resumed += diff_step(*resumed, *dev);
    }
    if (s == half) {
      resumed = gnmr::presets::make(name, n);
      resumed->load(dev->save());
      EXPECT(resumed->steps_done() == half, "%s: resumed step count", name.c_str());
    }
  }
  EXPECT(bad == 0, "%s: %zu host/device differences over %d steps", name.c_str(), bad, steps);
  EXPECT(bad_resumed == 0, "%s: %zu differences after resuming from the device blob", name.c_str(), bad_resumed);
  EXPECT(dev->steps_done() == steps, "%s: device step counter", name.c_str());
  if (name != "none") EXPECT(acted > 0, "%s: the trace never made the preset act", name.c_str());
  std::printf("  %-11s %3zu unit(s), %d steps: %zu triggers/skips, host==device\n", name.c_str(), n, steps, acted);
}

}  // namespace

void test_presets_on_device() {
  std::printf("[presets: make_device vs presets::make]\n");
  for (const std::string& name : gnmr::presets::names()) run_preset(name);
  // Layered controllers (gnmr/cuda/layered.cuh): per-unit and global outer
  // rules (257 units: the global norm's tree has two blocks), the state
  // container crossing backends as above.
  for (const char* name : {"stabilizer+gnmr", "stabilizer+gnmr-promote", "adagc+gnmr-clip", "clip+gnmr",
                           "skip-step+gnmr", "zclip+gnmr-promote"})
    run_preset(name);
  // A global outer over 70,000 units: 274 leaf blocks, so the global norm's
  // upper levels take two passes (the launch of one block per leaf block,
  // then the fold in one block).
  run_preset("clip+gnmr", 70000);

  // A blob of another preset is refused, and the device state is unchanged.
  auto a = gnmr::cuda::make_device("gnmr", 16);
  auto b = gnmr::presets::make("spam", 16);
  std::vector<float> in(16, 1.0f);
  b->step(in.data(), in.size());
  const std::vector<std::uint8_t> before = a->save();
  bool threw = false;
  try {
    a->load(b->save());
  } catch (const gnmr::StateError&) {
    threw = true;
  }
  EXPECT(threw, "loading a spam blob into a gnmr device controller must throw");
  EXPECT(a->save() == before, "a refused blob changed the device state");
  bool bad_name = false;
  try {
    gnmr::cuda::make_device("no-such-preset", 4);
  } catch (const std::invalid_argument&) {
    bad_name = true;
  }
  EXPECT(bad_name, "an unknown preset name must throw std::invalid_argument");
}

}  // namespace gpu_test
