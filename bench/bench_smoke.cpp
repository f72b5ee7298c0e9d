// Placeholder benchmark: classifies a gradient-sized buffer with
// gnmr::is_finite, the check every unit's norm goes through. Proves the
// benchmark harness builds; real benchmarks go next to it in bench/.
#include <gnmr/core/math.hpp>

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace {

void BM_IsFinite(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * 0.5f - 3.0f;
  if (n > 0) v[n / 2] = gnmr::nan_f();  // one spike, so the answer is not constant

  for (auto _ : state) {
    std::size_t finite = 0;
    for (float x : v) finite += gnmr::is_finite(x) ? 1u : 0u;
    benchmark::DoNotOptimize(finite);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(n * sizeof(float)));
}
BENCHMARK(BM_IsFinite)->RangeMultiplier(16)->Range(1 << 10, 1 << 22);

}  // namespace

BENCHMARK_MAIN();
