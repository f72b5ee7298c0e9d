// Host GnmrController::step() (default policies: L2, EMA, GNMR trigger,
// clip to mean, MaxO{4, 8}) at N = 100, 10,000 and 1,000,000 units.
//
// The trace is prepared outside the timed loop: 64 steps of per-unit
// partials (squared L2 norms), cycled so the state keeps evolving. Each
// unit has its own base norm (log-uniform over 1e-3 .. 10, the spread of
// real per-tensor gradient norms) with ~10% log-normal jitter per step; each
// step about 0.2% of the units (at least one) spike by 4x .. 40x, and one
// step in the cycle carries a NaN unit (an fp16 overflow). One full cycle
// runs before timing, so the measured steps are past the 10-step warm-up and
// exercise triggers, grants, denials and releases.
//
// BM_PresetStep: the same trace through presets by name (presets::make):
// "gnmr" (GNMR's rule), "gnmr-calibrated" and "default" (the stabilizer with
// the calibrated promotion inside it), at 10,000 and 1,000,000 units: the
// recommended controller's host step against GNMR's.
//
// items/s = units stepped per second. bytes/s counts, per unit and step,
// 4 B of partial read + the UnitState read and written back
// (2 * sizeof(UnitState)) + the UnitDecision and UnitReport written; it
// leaves out the controller's 4 B per-unit norm scratch and the candidate
// list (a few entries), so it is a lower bound on the memory traffic.
#include <gnmr/host/controller.hpp>
#include <gnmr/presets/make.hpp>

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr std::size_t kTraceSteps = 64;

std::vector<float> make_trace(std::size_t n) {
  std::mt19937_64 rng(0x5eed + n);
  std::uniform_real_distribution<float> log_base(std::log(1e-3f), std::log(10.0f));
  std::normal_distribution<float> normal(0.0f, 0.1f);
  std::uniform_real_distribution<float> spike(4.0f, 40.0f);
  // exp(N(0, 0.1)) squared, tabulated: 64M draws of exp() would dominate
  // the program's run time at N = 1e6.
  std::vector<float> jitter2(4096);
  for (float& j : jitter2) j = std::exp(2.0f * normal(rng));
  std::vector<float> base2(n);  // squared base norms
  for (float& b : base2) b = std::exp(2.0f * log_base(rng));
  std::vector<float> trace(kTraceSteps * n);
  const std::size_t spikes = n / 500 > 0 ? n / 500 : 1;
  for (std::size_t t = 0; t < kTraceSteps; ++t) {
    float* row = trace.data() + t * n;
    for (std::size_t i = 0; i < n; ++i) row[i] = base2[i] * jitter2[rng() & 4095u];
    for (std::size_t k = 0; k < spikes; ++k) {
      const float s = spike(rng);
      row[rng() % n] *= s * s;
    }
    if (t == kTraceSteps / 2) row[rng() % n] = std::numeric_limits<float>::quiet_NaN();
  }
  return trace;
}

void BM_ControllerStep(benchmark::State& state) {
  using Controller = gnmr::GnmrController<>;
  const std::size_t n = static_cast<std::size_t>(state.range(0));
  const std::vector<float> trace = make_trace(n);
  Controller c(n);
  for (std::size_t t = 0; t < kTraceSteps; ++t) c.step(trace.data() + t * n, n);  // past warm-up

  std::size_t t = 0;
  std::uint64_t triggered = 0, granted = 0;
  for (auto _ : state) {
    const gnmr::StepSummary& s = c.step(trace.data() + t * n, n);
    triggered += s.triggered;
    granted += s.granted;
    benchmark::DoNotOptimize(&s);
    t = t + 1 == kTraceSteps ? 0 : t + 1;
  }
  const std::int64_t units = static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(n);
  constexpr std::int64_t kBytesPerUnit =
      static_cast<std::int64_t>(sizeof(float) + 2 * sizeof(Controller::UnitState) +
                                sizeof(gnmr::UnitDecision) + sizeof(gnmr::UnitReport));
  state.SetItemsProcessed(units);
  state.SetBytesProcessed(units * kBytesPerUnit);
  const double steps = static_cast<double>(state.iterations());
  state.counters["trig/step"] = static_cast<double>(triggered) / steps;
  state.counters["grant/step"] = static_cast<double>(granted) / steps;
  state.counters["ns/unit"] = benchmark::Counter(
      static_cast<double>(units), benchmark::Counter::kIsRate | benchmark::Counter::kInvert,
      benchmark::Counter::kIs1000);
}

BENCHMARK(BM_ControllerStep)
    ->Arg(100)
    ->Arg(10000)
    ->Arg(1000000)
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.3);

const char* const kPresets[] = {"gnmr", "gnmr-calibrated", "default"};

void BM_PresetStep(benchmark::State& state) {
  const std::string name = kPresets[state.range(0)];
  const std::size_t n = static_cast<std::size_t>(state.range(1));
  const std::vector<float> trace = make_trace(n);
  auto c = gnmr::presets::make(name, n);
  for (std::size_t t = 0; t < kTraceSteps; ++t) c->step(trace.data() + t * n, n);  // past warm-up
  std::size_t t = 0;
  for (auto _ : state) {
    const gnmr::StepSummary& s = c->step(trace.data() + t * n, n);
    benchmark::DoNotOptimize(&s);
    t = t + 1 == kTraceSteps ? 0 : t + 1;
  }
  state.SetLabel(name);
  state.counters["ns/unit"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * static_cast<double>(n),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert, benchmark::Counter::kIs1000);
}

BENCHMARK(BM_PresetStep)
    ->ArgsProduct({{0, 1, 2}, {10000, 1000000}})
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.3);

}  // namespace

BENCHMARK_MAIN();
