// How fast can a bf16 sum of squares in double go on this CPU, whatever the
// conversion costs? (docs/record/performance-host.md, the ceiling study;
// "Host partial norms" of docs/performance.md). The precision contract of
// gnmr/host/sumsq.hpp (each of 8 lanes
// sums, in double and in order, the squares of its elements) fixes one
// double multiply and one double add per element. The "no conversion"
// loops below do exactly that arithmetic on the raw 16-bit patterns
// zero-extended to 64 bits, skipping the bf16 -> double widening: their
// results are meaningless, their speed is a ceiling that no correct build
// of the contract can pass. Beside them: the library's AVX2 build, the same
// loop with 16 lanes (another summation order), and a plain read.
//
//   ./build/bench/bench_sumsq_ceiling --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
//
// One buffer of 63.5 M bf16 values (the llama layout's element count of
// bench_host_norms), uniform in +-1e-3, single thread.
#include <gnmr/core/cpu.hpp>
#include <gnmr/host/sumsq.hpp>

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace {

const std::vector<std::uint16_t>& data() {
  static const std::vector<std::uint16_t> v = [] {
    std::vector<std::uint16_t> d(63521664);
    std::uint64_t s = 1;
    for (auto& x : d) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      const float f = (static_cast<float>(s >> 40) / 16777216.0f - 0.5f) * 2e-3f;
      std::uint32_t b;
      std::memcpy(&b, &f, 4);
      x = static_cast<std::uint16_t>(b >> 16);
    }
    return d;
  }();
  return v;
}

template <class F>
void run(benchmark::State& st, F f) {
  const auto& d = data();
  for (auto _ : st) benchmark::DoNotOptimize(f(d.data(), d.size()));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations()) * static_cast<std::int64_t>(d.size() * 2));
}

#if GNMR_HOST_X86_SIMD
// Every lane into the result, so that no lane's work can be optimised away.
__attribute__((target("avx2"))) double fold(__m256d a) {
  alignas(32) double v[4];
  _mm256_store_pd(v, a);
  return (v[0] + v[1]) + (v[2] + v[3]);
}

__attribute__((target("avx2"))) double read_only(const std::uint16_t* p, std::uint64_t n) {
  __m256i a = _mm256_setzero_si256();
  for (std::uint64_t i = 0; i + 16 <= n; i += 16)
    a = _mm256_add_epi64(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
  return static_cast<double>(_mm256_extract_epi64(a, 0) ^ _mm256_extract_epi64(a, 1) ^ _mm256_extract_epi64(a, 2) ^
                             _mm256_extract_epi64(a, 3));
}

// 8 lanes (the contract's), no widening: two chains of 4 doubles.
__attribute__((target("avx2"))) double no_conversion8(const std::uint16_t* p, std::uint64_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = a0;
  for (std::uint64_t i = 0; i + 8 <= n; i += 8) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    const __m256d d0 = _mm256_castsi256_pd(_mm256_cvtepu16_epi64(v));
    const __m256d d1 = _mm256_castsi256_pd(_mm256_cvtepu16_epi64(_mm_unpackhi_epi64(v, v)));
    a0 = _mm256_add_pd(a0, _mm256_mul_pd(d0, d0));
    a1 = _mm256_add_pd(a1, _mm256_mul_pd(d1, d1));
  }
  return fold(_mm256_add_pd(a0, a1));
}

// 16 lanes, no widening: four chains (the add latency hidden twice over).
__attribute__((target("avx2"))) double no_conversion16(const std::uint16_t* p, std::uint64_t n) {
  __m256d a[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  for (std::uint64_t i = 0; i + 16 <= n; i += 16) {
    const __m128i v[2] = {_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i)),
                          _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + 8))};
    for (int k = 0; k < 4; ++k) {
      const __m128i w = k % 2 ? _mm_unpackhi_epi64(v[k / 2], v[k / 2]) : v[k / 2];
      const __m256d d = _mm256_castsi256_pd(_mm256_cvtepu16_epi64(w));
      a[k] = _mm256_add_pd(a[k], _mm256_mul_pd(d, d));
    }
  }
  return fold(_mm256_add_pd(_mm256_add_pd(a[0], a[1]), _mm256_add_pd(a[2], a[3])));
}

// 16 lanes with the library's widening (unpack + vcvtps2pd).
__attribute__((target("avx2"))) double widened16(const std::uint16_t* p, std::uint64_t n) {
  __m256d a[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  const __m128i z = _mm_setzero_si128();
  for (std::uint64_t i = 0; i + 16 <= n; i += 16) {
    const __m128i v[2] = {_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i)),
                          _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + 8))};
    for (int k = 0; k < 4; ++k) {
      const __m128i w = k % 2 ? _mm_unpackhi_epi16(z, v[k / 2]) : _mm_unpacklo_epi16(z, v[k / 2]);
      const __m256d d = _mm256_cvtps_pd(_mm_castsi128_ps(w));
      a[k] = _mm256_add_pd(a[k], _mm256_mul_pd(d, d));
    }
  }
  return fold(_mm256_add_pd(_mm256_add_pd(a[0], a[1]), _mm256_add_pd(a[2], a[3])));
}

void BM_Read(benchmark::State& st) { run(st, read_only); }
void BM_NoConversion8(benchmark::State& st) { run(st, no_conversion8); }
void BM_NoConversion16(benchmark::State& st) { run(st, no_conversion16); }
void BM_Library8(benchmark::State& st) { run(st, gnmr::detail::sumsq_bf16_avx2); }
void BM_Widened16(benchmark::State& st) { run(st, widened16); }

bool register_all() {
  if (!gnmr::detail::host_has_avx2()) return false;
  benchmark::RegisterBenchmark("bf16/read", BM_Read)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("bf16/sumsq_library_8_lanes", BM_Library8)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("bf16/sumsq_widened_16_lanes", BM_Widened16)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("bf16/no_conversion_8_lanes", BM_NoConversion8)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("bf16/no_conversion_16_lanes", BM_NoConversion16)->Unit(benchmark::kMillisecond);
  return true;
}
const bool registered = register_all();
#endif

}  // namespace

BENCHMARK_MAIN();
