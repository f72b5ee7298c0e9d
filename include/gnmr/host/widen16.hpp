// gnmr/host/widen16.hpp — bf16/fp16 to fp32, one value or a register of
// them, for the host's sums of squares in either order (block_sumsq.hpp,
// the default; chunk_sumsq.hpp, the CUDA kernel's).
//
// Every form is exact for every input: bf16 is the 16 bits above 16 zero
// bits (NaN kept); fp16 by the library's integer decode (gnmr/core/half.hpp)
// or by F16C, exact whatever DAZ says. So a portable loop and a vector one
// square the same floats.
#pragma once

#include <cstdint>

#include "gnmr/core/cpu.hpp"
#include "gnmr/core/half.hpp"

#if GNMR_HOST_X86_SIMD
#include <immintrin.h>
#endif

namespace gnmr {
namespace detail {

template <bool kBf16>
inline float widen1(std::uint16_t b) {
  return kBf16 ? bits_to_float(static_cast<std::uint32_t>(b) << 16) : fp16_to_float(b);
}

#if GNMR_HOST_X86_SIMD
// Eight values at any address (an aligned address costs the same).
template <bool kBf16>
__attribute__((target("avx2,f16c"))) inline __m256 widen8(const std::uint16_t* q) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  if (kBf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
  return _mm256_cvtph_ps(v);
}

// Sixteen values at any address. The zero-masked forms with an all-ones
// mask are the plain instructions; GCC 12's plain intrinsics pass an
// "undefined" register that -Wmaybe-uninitialized reports in the user's build.
template <bool kBf16>
__attribute__((target("avx512f,avx512bw,avx2,f16c"))) inline __m512 widen16(const std::uint16_t* q) {
  const __mmask16 all = 0xffff;
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  if (kBf16) return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all, _mm512_maskz_cvtepu16_epi32(all, v), 16));
  return _mm512_maskz_cvtph_ps(all, v);
}
#endif

}  // namespace detail
}  // namespace gnmr
