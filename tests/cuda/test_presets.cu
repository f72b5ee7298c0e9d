// GPU test: every preset by name on the device (gnmr::cuda::make_device)
// against the same preset on the host (gnmr::presets::make), on a spiky
// trace with NaN/Inf and contention: identical flags, scales and summaries
// on every step. Then the state blob crosses backends: saved on the device
// half-way, loaded into a fresh host controller, both go on and must stay
// identical; a blob of another preset is refused and changes nothing.
// Layered "outer+inner" controllers go through the same checks.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "gnmr/cuda/presets.cuh"
#include "gnmr/host/layered.hpp"
#include "gnmr/presets/make.hpp"
#include "harness.cuh"
#include "../support/aux_steps.hpp"
#include "../support/guard_probes.hpp"
#include "../support/summary_eq.hpp"
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
  std::vector<float> in(n), aux;
  Dev<float> d_in(n), d_aux(n);
  EXPECT(dev->needs_aux() == host->needs_aux(), "%s: needs_aux", name.c_str());
  std::size_t bad = 0, bad_resumed = 0, acted = 0;
  for (int s = 1; s <= steps; ++s) {
    tracegen::preset_partials(s, in);  // spikes every preset acts on (see trace_gen.hpp)
    d_in.upload(in);
    if (dev->needs_aux()) {  // gnmr-noise-floor: each unit's noise too (aux_steps.hpp)
      auxsteps::aux_partials(in.data(), n, aux);
      d_aux.upload(aux);
      CK(dev->step_with_aux(d_in.p, d_aux.p, 0));
    } else {
      CK(dev->step(d_in.p, 0));
    }
    auxsteps::step(*host, in.data(), n);
    CK(cudaDeviceSynchronize());
    bad += diff_step(*host, *dev);
    if (dev->needs_aux()) {  // the finished aux norms an aux trace records: the host's bits
      std::vector<float> dax(n);
      CK(cudaMemcpy(dax.data(), dev->aux_norms(), n * sizeof(float), cudaMemcpyDeviceToHost));
      for (std::size_t i = 0; i < n; ++i) bad += !same_bits(dax[i], host->aux_norms()[i]);
      const std::vector<float> copied = dev->copy_aux_norms();  // the blocking copy: the same bits
      EXPECT(copied.size() == n, "%s: copy_aux_norms() size %zu", name.c_str(), copied.size());
      for (std::size_t i = 0; i < n && i < copied.size(); ++i) bad += !same_bits(copied[i], dax[i]);
    } else {
      EXPECT(dev->aux_norms() == nullptr, "%s: aux_norms() of a controller that reads no aux", name.c_str());
      EXPECT(dev->copy_aux_norms().empty(), "%s: copy_aux_norms() of a controller that reads no aux", name.c_str());
    }
    acted += host->summary().triggered + host->summary().skip_step;
    if (resumed) {
      auxsteps::step(*resumed, in.data(), n);
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
  EXPECT(dev->save() == host->save(), "%s: the device and host blobs of the same state differ", name.c_str());
  if (name != "none") EXPECT(acted > 0, "%s: the trace never made the preset act", name.c_str());
  std::printf("  %-11s %3zu unit(s), %d steps: %zu triggers/skips, host==device\n", name.c_str(), n, steps, acted);
}

// The fused layered step (gnmr/cuda/layered_fused.cuh) against the generic
// one (LayeredDeviceController over the same two presets), both on the
// device: every field of every decision and report, the summary, and the
// state blob at the end, bit for bit; from partials (step) and from norms
// (step_norms). make_device must have chosen the fused class, or the test
// would compare the generic path with itself.
void fused_vs_generic(const std::string& outer, const std::string& inner, std::size_t n, int steps) {
  const std::string name = outer + "+" + inner;
  auto fused = gnmr::cuda::make_device(name, n);
  const bool is_fused = fused->name() == name && dynamic_cast<gnmr::cuda::LayeredDeviceController*>(fused.get()) == nullptr;
  EXPECT(is_fused, "%s: make_device did not fuse the pair", name.c_str());
  for (int from_norms = 0; from_norms < 2; ++from_norms) {
    auto a = gnmr::cuda::make_device(name, n);
    gnmr::cuda::LayeredDeviceController b(gnmr::cuda::make_device(outer, n), gnmr::cuda::make_device(inner, n));
    std::vector<float> in(n);
    Dev<float> d_in(n);
    std::size_t bad = 0;
    for (int s = 1; s <= steps; ++s) {
      tracegen::preset_partials(s, in);
      if (from_norms)
        for (float& x : in) x = std::sqrt(x);
      d_in.upload(in);
      CK(from_norms ? a->step_norms(d_in.p, 0) : a->step(d_in.p, 0));
      CK(from_norms ? b.step_norms(d_in.p, 0) : b.step(d_in.p, 0));
      CK(cudaDeviceSynchronize());
      const auto da = a->copy_decisions(), db = b.copy_decisions();
      const auto ra = a->copy_reports(), rb = b.copy_reports();
      const auto sa = a->copy_summary(), sb = b.copy_summary();
      bad += std::memcmp(da.data(), db.data(), n * sizeof(gnmr::UnitDecision)) != 0;
      bad += std::memcmp(ra.data(), rb.data(), n * sizeof(gnmr::UnitReport)) != 0;
      bad += !testsupport::same_summary(sa, sb);
    }
    EXPECT(bad == 0, "%s (%s): %zu differences between fused and generic over %d steps", name.c_str(),
           from_norms ? "norms" : "partials", bad, steps);
    EXPECT(a->steps_done() == steps, "%s: fused step counter", name.c_str());
    // The blobs: the same bytes (states are written canonically,
    // gnmr/detail/canonical.hpp: padding and empty policy states as zero),
    // and host controllers loaded from them decide alike.
    const std::vector<std::uint8_t> ba = a->save(), bb = b.save();
    std::size_t raw = ba.size() == bb.size() ? 0 : 1;
    for (std::size_t k = 0; k < ba.size() && ba.size() == bb.size(); ++k) raw += ba[k] != bb[k];
    EXPECT(raw == 0, "%s (%s): fused and generic blobs differ in %zu bytes", name.c_str(),
           from_norms ? "norms" : "partials", raw);
    auto ha = gnmr::presets::make(name, n), hb = gnmr::presets::make(name, n);
    ha->load(ba);
    hb->load(bb);
    std::size_t bad_after = 0;
    for (int s = steps + 1; s <= steps + 30; ++s) {
      tracegen::preset_partials(s, in);
      ha->step(in.data(), n);
      hb->step(in.data(), n);
      for (std::size_t u = 0; u < n; ++u)
        bad_after += ha->decisions()[u].flags != hb->decisions()[u].flags ||
                     !same_bits(ha->decisions()[u].scale, hb->decisions()[u].scale);
      bad_after += !testsupport::same_summary(ha->summary(), hb->summary());
    }
    EXPECT(bad_after == 0, "%s: host controllers loaded from the fused and generic blobs differ (%zu)",
           name.c_str(), bad_after);
  }
  std::printf("  %s fused, %zu units, %d steps: == LayeredDeviceController (decisions, reports, summary, state)\n",
              name.c_str(), n, steps);
}

// The calibrated trigger's ceiling on the device (docs/algorithm.md,
// "Calibrated trigger"): steady units, one x1000 spike at step `at`, for
// every `at` from 2 through the end of calibration; the device decides as
// the host, bit for bit, and the spike is triggered and granted on both.
void early_spike(const std::string& name) {
  const std::size_t n = 300;  // two select blocks
  std::size_t bad = 0, missed = 0;
  for (int at = 2; at <= 26; ++at) {
    auto host = gnmr::presets::make(name, n);
    auto dev = gnmr::cuda::make_device(name, n);
    std::vector<float> in(n);
    Dev<float> d_in(n);
    for (int t = 1; t <= at + 2; ++t) {
      for (std::size_t u = 0; u < n; ++u) {
        const float w = 1.0f + 0.01f * static_cast<float>((u * 7919u + static_cast<unsigned>(t) * 104729u) % 13u);
        in[u] = w * w;  // squares: partials
      }
      if (t == at) in[137] *= 1e6f;  // x1000 in norm
      d_in.upload(in);
      CK(dev->step(d_in.p, 0));
      host->step(in.data(), n);
      CK(cudaDeviceSynchronize());
      bad += diff_step(*host, *dev);
      if (t == at) {
        const std::uint32_t f = dev->copy_decisions()[137].flags;
        missed += !((f & gnmr::kTriggered) && (f & gnmr::kGranted));
      }
    }
  }
  EXPECT(bad == 0, "%s: %zu host/device differences around early spikes", name.c_str(), bad);
  EXPECT(missed == 0, "%s: %zu early spikes (steps 2-26) not triggered and granted on the device", name.c_str(),
         missed);
  std::printf("  %s: a x1000 spike at every step 2..26 triggered and granted, host == device\n", name.c_str());
}

// The probes of tests/support/guard_probes.hpp (a unit the one-grant cap
// denies, a held step, two units spiking for 60 steps, a spike at step 1
// then at step 10): host and device decide alike, and on the device every
// triggered unit leaves each step bounded (the host test checks the same
// rows: tests/unit/test_guard_bounds.cpp).
void guard_probes(const std::string& name) {
  std::size_t bad = 0, unbounded = 0;
  for (const probes::Kind k : {probes::Kind::kCapDenied, probes::Kind::kHeld, probes::Kind::kSpikingPair,
                               probes::Kind::kFirstStep}) {
    const probes::Shape sh = probes::shape(k);
    auto host = gnmr::presets::make(name, sh.units);
    auto dev = gnmr::cuda::make_device(name, sh.units);
    Dev<float> d_in(sh.units);
    for (int s = 1; s <= sh.steps; ++s) {
      std::vector<float> in = probes::row(k, s);
      d_in.upload(in);
      CK(dev->step_norms(d_in.p));  // the default stream, omitted
      host->step_norms(in.data(), in.size());
      CK(cudaDeviceSynchronize());
      bad += diff_step(*host, *dev);
      const std::vector<gnmr::UnitReport> rep = dev->copy_reports();
      unbounded += probes::unbounded(rep.data(), rep.size());
    }
    if (k == probes::Kind::kFirstStep) {  // the second spike, caught and clipped to the calm scale
      const gnmr::UnitDecision d = dev->copy_decisions()[0];
      EXPECT((d.flags & gnmr::kTriggered) && (d.flags & gnmr::kGranted) && d.scale * 1000.0f < 1.2f,
             "%s: the step-10 spike after a step-1 spike: flags %#x scale %g", name.c_str(), d.flags, d.scale);
    }
  }
  EXPECT(bad == 0, "%s: %zu host/device differences on the guard probes", name.c_str(), bad);
  EXPECT(unbounded == 0, "%s: %zu triggered unit-steps left unbounded on the device", name.c_str(), unbounded);
  std::printf("  %s: guard probes bounded on the device, host == device\n", name.c_str());
}

}  // namespace

// The default preset is fused (layered_fused.cuh): against the host at 274
// blocks, and against the generic layered step on the device.
void test_fused_layered() {
  std::printf("[fused layered step]\n");
  run_preset("default", quick() ? 3000 : 70000);
  fused_vs_generic("stabilizer", "gnmr-calibrated", quick() ? 3000 : 70000, quick() ? 130 : 160);
  fused_vs_generic("stabilizer", "gnmr-promote", 1000, 130);
  // The recommended controller by its one name: cuda::make_default is
  // make_device("default") (the same fused type), and the host's
  // gnmr::make_default decides alike.
  {
    const std::size_t n = 1000;
    auto typed = gnmr::cuda::make_default(n);
    auto named = gnmr::cuda::make_device("default", n);
    auto host = gnmr::make_default(n);
    EXPECT(dynamic_cast<gnmr::cuda::DefaultDeviceController*>(named.get()) != nullptr,
           "make_device(\"default\") is not DefaultDeviceController");
    std::vector<float> in(n);
    Dev<float> d_in(n);
    std::size_t bad = 0;
    for (int s = 1; s <= 130; ++s) {
      tracegen::preset_partials(s, in);
      d_in.upload(in);
      CK(typed->step(d_in.p, 0));
      CK(named->step(d_in.p, 0));
      host->step(in.data(), n);
      CK(cudaDeviceSynchronize());
      bad += diff_step(*host, *typed);
      const auto da = typed->copy_decisions(), db = named->copy_decisions();
      bad += std::memcmp(da.data(), db.data(), n * sizeof(gnmr::UnitDecision)) != 0;
    }
    EXPECT(bad == 0, "cuda::make_default: %zu differences with make_device(\"default\") or the host", bad);
    std::printf("  cuda::make_default == make_device(\"default\") == gnmr::make_default on the host\n");
  }
}

void test_presets_on_device() {
  std::printf("[presets: make_device vs presets::make]\n");
  for (const std::string& name : gnmr::presets::names()) run_preset(name);
  early_spike("gnmr-calibrated");
  early_spike("default");
  guard_probes("gnmr-calibrated");
  guard_probes("default");
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

  // gnmr-noise-floor refuses a step without each unit's noise, on the host
  // before anything is enqueued (the step counter does not move).
  auto nf = gnmr::cuda::make_device("gnmr-noise-floor", 4);
  Dev<float> d4(4);
  d4.upload(std::vector<float>(4, 1.0f));
  bool refused = false;
  try {
    nf->step(d4.p, 0);
  } catch (const std::logic_error&) {
    refused = true;
  }
  EXPECT(refused && nf->steps_done() == 0, "gnmr-noise-floor stepped without its aux signal");
  auto lay = gnmr::cuda::make_device("default", 4);
  bool no_aux = false;
  try {
    lay->step_with_aux(d4.p, d4.p, 0);
  } catch (const std::logic_error&) {
    no_aux = true;
  }
  EXPECT(no_aux, "a layered device controller must refuse step_with_aux");
}

std::unique_ptr<gnmr::DynController> make_host(const std::string& name, std::size_t n) {
  return gnmr::presets::make(name, n);
}
std::unique_ptr<gnmr::cuda::DynDeviceController> make_dev(const std::string& name, std::size_t n) {
  return gnmr::cuda::make_device(name, n);
}

}  // namespace gpu_test
