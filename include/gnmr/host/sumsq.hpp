// gnmr/host/sumsq.hpp — the host's sum of squares of one segment in double,
// per dtype: the summation order that defines its bits, a portable build
// and, for bf16 and fp16, an AVX2 (+F16C) build chosen at run time with the
// same bits. host_unit_partials uses it for fp32 segments; since issue 32
// its bf16/fp16 segments follow the CUDA kernel's order instead
// (gnmr/host/chunk_sumsq.hpp), and the double bf16/fp16 sums here remain
// for code that wants them (and as the benchmarks' earlier contract).
//
// The order (defined once; every build follows it):
//   * lanes: element i of the segment goes to lane i mod 8;
//   * each lane sums the squares of its elements in double, in increasing i
//     (the square: of the element widened to double for fp32 and bf16; for
//     fp16, of the magnitude decoded to fp32, squared there, where it is
//     exact, then widened);
//   * the 8 lanes are folded by a fixed pairwise tree (tree8).
// This is the order the host has always used, so every dtype's partials are
// the bits they were before the vector builds came. A vector build keeps
// lane j in one element of one register and adds each block's squares to it
// in the same order, so for every finite or infinite input it gives the
// portable build's bits. A NaN input gives a NaN sum on every build; which
// NaN payload comes out is not part of the contract (the controller only
// asks whether a norm is NaN).
//
// 8 lanes are enough: the vector builds are bound by the widening to double
// (vcvtps2pd), not by the add chains; 16 and 32 lanes measured the same
// (docs/record/performance-host.md).
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

constexpr std::size_t kLanes = 8;

GNMR_HOST_DEVICE double tree8(const double* a) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

// The portable build: sq(element) -> its square in double; inlined, so each
// instantiation vectorises like a hand-written loop (SSE2 at least).
template <class T, class Sq>
inline double sumsq_lanes(const T* p, std::uint64_t n, Sq sq) {
  double a[kLanes] = {};
  std::uint64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::size_t j = 0; j < kLanes; ++j) a[j] += sq(p[i + j]);
  for (std::size_t j = 0; j < kLanes && i < n; ++i, ++j) a[j] += sq(p[i]);  // fewer than 8 left
  return tree8(a);
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

inline double sumsq_f32(const float* p, std::uint64_t n) { return sumsq_lanes(p, n, sq_f32); }
inline double sumsq_bf16(const std::uint16_t* p, std::uint64_t n) { return sumsq_lanes(p, n, sq_bf16); }
inline double sumsq_f16(const std::uint16_t* p, std::uint64_t n) { return sumsq_lanes(p, n, sq_f16); }

#if GNMR_HOST_X86_SIMD
// Lanes 0..7 as two registers of 4 doubles, stored back for the tail
// (fewer than 8 elements: the portable lane loop) and the tree.
template <class Sq>
__attribute__((target("avx2"))) inline double sumsq8_finish(__m256d a0, __m256d a1, const std::uint16_t* p,
                                                            std::uint64_t i, std::uint64_t n, Sq sq) {
  alignas(32) double a[kLanes];
  _mm256_store_pd(a, a0);
  _mm256_store_pd(a + 4, a1);
  for (std::size_t j = 0; j < kLanes && i < n; ++i, ++j) a[j] += sq(p[i]);
  return tree8(a);
}

// Every step stays inside 128-bit halves: on the CPUs measured, the
// cross-lane extracts of a 256-bit formulation cost more than they save.
__attribute__((target("avx2"))) inline double sumsq_bf16_avx2(const std::uint16_t* p, std::uint64_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = a0;
  const __m128i z = _mm_setzero_si128();
  std::uint64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    // bf16 -> fp32 puts the 16 bits above 16 zero bits (exact, NaN kept):
    // interleaving zeros below each element does it for 4 at a time.
    const __m256d d0 = _mm256_cvtps_pd(_mm_castsi128_ps(_mm_unpacklo_epi16(z, v)));
    const __m256d d1 = _mm256_cvtps_pd(_mm_castsi128_ps(_mm_unpackhi_epi16(z, v)));
    a0 = _mm256_add_pd(a0, _mm256_mul_pd(d0, d0));
    a1 = _mm256_add_pd(a1, _mm256_mul_pd(d1, d1));
  }
  return sumsq8_finish(a0, a1, p, i, n, sq_bf16);
}

__attribute__((target("avx2,f16c"))) inline double sumsq_f16_avx2(const std::uint16_t* p, std::uint64_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = a0;
  const __m128i mag = _mm_set1_epi16(0x7fff);
  std::uint64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    // The magnitude, decoded by F16C (exact for every fp16 value, subnormals
    // included whatever MXCSR's DAZ says), squared in fp32 (exact), widened.
    const __m128i v = _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i)), mag);
    const __m128 f0 = _mm_cvtph_ps(v), f1 = _mm_cvtph_ps(_mm_unpackhi_epi64(v, v));
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm_mul_ps(f0, f0)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm_mul_ps(f1, f1)));
  }
  return sumsq8_finish(a0, a1, p, i, n, sq_f16);
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
