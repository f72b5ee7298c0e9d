// gnmr/host/sumsq.hpp — the host's sum of squares of one segment, per dtype:
// the summation order that defines its bits, a portable build and, for bf16
// and fp16, an AVX2 (+F16C) build chosen at run time with the same bits.
//
// The order (defined once; every build follows it):
//   * lanes: element i of the segment goes to lane i mod L, where L = 8 for
//     fp32 and L = 16 for bf16 and fp16;
//   * each lane sums the squares of its elements in double, in increasing i
//     (the square: of the element widened to double for fp32 and bf16; for
//     fp16, of the magnitude decoded to fp32, squared there, where it is
//     exact, then widened);
//   * the lanes are folded by a fixed pairwise tree: tree8 for 8 lanes,
//     tree8(lanes 0..7) + tree8(lanes 8..15) for 16.
// A vector build keeps lane j in one element of one register and adds each
// block's squares to it in the same order, so for every finite or infinite
// input it gives the portable build's bits. A NaN input gives a NaN sum on
// every build; which NaN payload comes out is not part of the contract (the
// controller only asks whether a norm is NaN).
//
// Why 16 lanes for the 2-byte types: each lane is a dependent chain of
// double adds (about 4 cycles each), so the lanes in flight bound the
// throughput; fp32 is bound by memory already at 8 (docs/performance.md),
// and keeping 8 there keeps its bits as they have always been. bf16 and
// fp16 used 8 lanes until 2026-11-25: their partials changed in the last
// bits then.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gnmr/config.hpp"
#include "gnmr/core/cpu.hpp"
#include "gnmr/core/half.hpp"

#if GNMR_HOST_X86_SIMD
#include <immintrin.h>
#endif

namespace gnmr {
namespace detail {

constexpr std::size_t kLanes = 8;      // fp32
constexpr std::size_t kLanes16 = 16;   // bf16, fp16

GNMR_HOST_DEVICE double tree8(const double* a) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

template <std::size_t L>
GNMR_HOST_DEVICE double tree_lanes(const double* a) {
  static_assert(L == 8 || L == 16, "gnmr: tree_lanes: 8 or 16 lanes");
  return L == 8 ? tree8(a) : tree8(a) + tree8(a + 8);
}

// The portable build: sq(element) -> its square in double; inlined, so each
// instantiation vectorises like a hand-written loop (SSE2 at least).
template <std::size_t L, class T, class Sq>
inline double sumsq_lanes(const T* p, std::uint64_t n, Sq sq) {
  double a[L] = {};
  std::uint64_t i = 0;
  for (; i + L <= n; i += L)
    for (std::size_t j = 0; j < L; ++j) a[j] += sq(p[i + j]);
  for (std::size_t j = 0; j < L && i < n; ++i, ++j) a[j] += sq(p[i]);  // fewer than L left
  return tree_lanes<L>(a);
}

inline double sq_f32(float v) {
  const double x = static_cast<double>(v);
  return x * x;
}
inline double sq_bf16(std::uint16_t b) {
  const double x = static_cast<double>(bf16_to_float(b));
  return x * x;
}
// The sign does not matter for a square: decode the magnitude only. The
// square of an fp16 value is exact in fp32 (11-bit significands, 2^-48 ..
// 2^32), so it is formed there and only summed in double.
inline double sq_f16(std::uint16_t b) {
  const float x = bits_to_float(fp16_mag_to_f32_bits(b));
  return static_cast<double>(x * x);
}

inline double sumsq_f32(const float* p, std::uint64_t n) { return sumsq_lanes<kLanes>(p, n, sq_f32); }
inline double sumsq_bf16(const std::uint16_t* p, std::uint64_t n) {
  return sumsq_lanes<kLanes16>(p, n, sq_bf16);
}
inline double sumsq_f16(const std::uint16_t* p, std::uint64_t n) {
  return sumsq_lanes<kLanes16>(p, n, sq_f16);
}

#if GNMR_HOST_X86_SIMD
// Lanes 0..15 of one 16-element block as four registers of 4 doubles: the
// block's squares, added to the accumulators in the portable order. The
// tail (fewer than 16 elements) runs the portable lane loop on the stored
// accumulators.
template <class Sq>
__attribute__((target("avx2"))) inline double sumsq16_finish(__m256d a0, __m256d a1, __m256d a2,
                                                             __m256d a3, const std::uint16_t* p,
                                                             std::uint64_t i, std::uint64_t n, Sq sq) {
  alignas(32) double a[16];
  _mm256_store_pd(a, a0);
  _mm256_store_pd(a + 4, a1);
  _mm256_store_pd(a + 8, a2);
  _mm256_store_pd(a + 12, a3);
  for (std::size_t j = 0; j < 16 && i < n; ++i, ++j) a[j] += sq(p[i]);  // fewer than 16 left
  return tree_lanes<kLanes16>(a);
}

// Every step stays inside 128-bit halves: on the CPUs measured, the
// cross-lane extracts of a 256-bit formulation cost more than they save.
__attribute__((target("avx2"))) inline double sumsq_bf16_avx2(const std::uint16_t* p, std::uint64_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
  const __m128i z = _mm_setzero_si128();
  std::uint64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i v0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    const __m128i v1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + 8));
    // bf16 -> fp32 puts the 16 bits above 16 zero bits (exact, NaN kept):
    // interleaving zeros below each element does it for 4 at a time.
    const __m256d d0 = _mm256_cvtps_pd(_mm_castsi128_ps(_mm_unpacklo_epi16(z, v0)));
    const __m256d d1 = _mm256_cvtps_pd(_mm_castsi128_ps(_mm_unpackhi_epi16(z, v0)));
    const __m256d d2 = _mm256_cvtps_pd(_mm_castsi128_ps(_mm_unpacklo_epi16(z, v1)));
    const __m256d d3 = _mm256_cvtps_pd(_mm_castsi128_ps(_mm_unpackhi_epi16(z, v1)));
    a0 = _mm256_add_pd(a0, _mm256_mul_pd(d0, d0));
    a1 = _mm256_add_pd(a1, _mm256_mul_pd(d1, d1));
    a2 = _mm256_add_pd(a2, _mm256_mul_pd(d2, d2));
    a3 = _mm256_add_pd(a3, _mm256_mul_pd(d3, d3));
  }
  return sumsq16_finish(a0, a1, a2, a3, p, i, n, sq_bf16);
}

__attribute__((target("avx2,f16c"))) inline double sumsq_f16_avx2(const std::uint16_t* p, std::uint64_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
  const __m128i mag = _mm_set1_epi16(0x7fff);
  std::uint64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    // The magnitude, decoded by F16C (exact for every fp16 value, subnormals
    // included whatever MXCSR's DAZ says), squared in fp32 (exact), widened.
    const __m128i v0 = _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i)), mag);
    const __m128i v1 = _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + 8)), mag);
    const __m128 f0 = _mm_cvtph_ps(v0), f1 = _mm_cvtph_ps(_mm_unpackhi_epi64(v0, v0));
    const __m128 f2 = _mm_cvtph_ps(v1), f3 = _mm_cvtph_ps(_mm_unpackhi_epi64(v1, v1));
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm_mul_ps(f0, f0)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm_mul_ps(f1, f1)));
    a2 = _mm256_add_pd(a2, _mm256_cvtps_pd(_mm_mul_ps(f2, f2)));
    a3 = _mm256_add_pd(a3, _mm256_cvtps_pd(_mm_mul_ps(f3, f3)));
  }
  return sumsq16_finish(a0, a1, a2, a3, p, i, n, sq_f16);
}
#endif

// The build the CPU can run (gnmr/core/cpu.hpp); simd = false forces the
// portable one (tests compare the two).
inline double sumsq_bf16_any(const std::uint16_t* p, std::uint64_t n, bool simd = host_has_avx2()) {
#if GNMR_HOST_X86_SIMD
  if (simd) return sumsq_bf16_avx2(p, n);
#endif
  (void)simd;
  return sumsq_bf16(p, n);
}
inline double sumsq_f16_any(const std::uint16_t* p, std::uint64_t n, bool simd = host_has_avx2_f16c()) {
#if GNMR_HOST_X86_SIMD
  if (simd) return sumsq_f16_avx2(p, n);
#endif
  (void)simd;
  return sumsq_f16(p, n);
}

}  // namespace detail
}  // namespace gnmr
