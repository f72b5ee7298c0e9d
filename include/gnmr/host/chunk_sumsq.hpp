// gnmr/host/chunk_sumsq.hpp — the host's bf16/fp16 sums of squares in the
// CUDA kernel's order (issue 32): a chunk's partial is exactly what
// gnmr::cuda::NormPlan's block computes for it, and a unit of bf16/fp16
// segments gets the kernel's per-unit fold, so a host replay of a GPU's
// gradients gives the GPU's L2 partials bit for bit.
//
// The order (gnmr/plan/norm_plan.hpp, chunk_thread_partial_ex, written out
// for one chunk of n <= chunk_elems 16-bit elements at address a):
//   * h = min(n, ((16 - a mod 16) mod 16) / 2) head elements: element t
//     goes to thread t's accumulator 0;
//   * the aligned body, element e (from 0): thread (e / 8) mod 256,
//     accumulator e mod 8, i.e. flat accumulator e mod 2048, each one
//     summing in increasing e;
//   * the r < 8 tail elements: element t to thread t's accumulator 0;
//   * every sum is in fp32: the square rounded (x*x), then added (never
//     fused); thread values fold their 8 accumulators pairwise (4, 2, 1),
//     then the block tree (gnmr/cuda/block.cuh: within each warp offsets
//     16..1, then the 8 warp values the same way) gives the chunk's float;
//   * a unit's chunk partials (NormPlan's order: the unit's segments in
//     order, each cut into chunk_elems pieces) fold in double: thread t
//     sums chunks t, t+256, ... then the block tree, rounded to float once.
// The portable build and the AVX2/AVX-512 builds below keep flat
// accumulator j in one lane of one register-sized group and add each row's
// squares in the same order, with separate multiply and add instructions
// (no FMA: the targets below do not enable it), so every build gives the
// same bits for every input, NaN and Inf included (which NaN payload is not
// part of the contract). Subnormal bf16 squares follow IEEE gradual
// underflow on both sides; a host thread running with FTZ/DAZ set (some
// -ffast-math programs set them at start-up) can differ there.
//
// Accuracy (derived in docs/algorithm.md, "Norms on the host"; tested
// against a double reference in tests/unit/test_host_chunk_sumsq.cpp): a
// chunk's partial is within (m + 11) u of the exact sum of squares, u =
// 2^-24, m = ceil(n / 2048) + 1 the additions into one accumulator; the
// unit's fold adds about 2^-53 per chunk and one final rounding (u/2).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gnmr/config.hpp"
#include "gnmr/core/cpu.hpp"
#include "gnmr/core/half.hpp"
#include "gnmr/plan/norm_plan.hpp"

#if GNMR_HOST_X86_SIMD
#include <immintrin.h>
#endif

namespace gnmr {
namespace detail {

constexpr std::uint32_t kChunkAccs = kNormThreads * 8;  // 2048 flat accumulators (16-bit dtypes)

// One element's square in fp32, decoded as the kernel decodes it.
inline float sq16(std::uint16_t b, bool is_bf16) {
  const float x = is_bf16 ? bf16_to_float(b) : f16_bits_to_float(b);
  return x * x;
}

// The block tree over 256 thread values (gnmr/cuda/block.cuh), for any T.
template <class T>
inline T host_block_tree(T* v) {
  for (std::uint32_t w = 0; w < kNormThreads / 32; ++w)
    for (std::uint32_t off = 16; off >= 1; off /= 2)
      for (std::uint32_t l = 0; l < off; ++l) v[w * 32 + l] = v[w * 32 + l] + v[w * 32 + l + off];
  T s[32];
  for (std::uint32_t l = 0; l < 32; ++l) s[l] = l < kNormThreads / 32 ? v[l * 32] : T(0);
  for (std::uint32_t off = 16; off >= 1; off /= 2)
    for (std::uint32_t l = 0; l < off; ++l) s[l] = s[l] + s[l + off];
  return s[0];
}

// Thread values from the 2048 accumulators (8 per thread, pairwise 4, 2, 1),
// then the block tree.
inline float fold_chunk_accs(const float* acc) {
  float t[kNormThreads];
  for (std::uint32_t tid = 0; tid < kNormThreads; ++tid) {
    float a[8];
    for (std::uint32_t j = 0; j < 8; ++j) a[j] = acc[tid * 8 + j];
    for (std::uint32_t w = 4; w >= 1; w /= 2)
      for (std::uint32_t j = 0; j < w; ++j) a[j] = a[j] + a[j + w];
    t[tid] = a[0];
  }
  return host_block_tree(t);
}

// The body rows: acc[e mod 2048] += sq(body[e]) for e < len (len a multiple
// of 8), in increasing e. Portable build.
inline void chunk_rows_portable(float* acc, const std::uint16_t* body, std::uint64_t len, bool is_bf16) {
  for (std::uint64_t r = 0; r < len; r += kChunkAccs) {
    const std::uint64_t cnt = len - r < kChunkAccs ? len - r : kChunkAccs;
    const std::uint16_t* q = body + r;
    for (std::uint64_t e = 0; e < cnt; ++e) acc[e] = acc[e] + sq16(q[e], is_bf16);
  }
}

#if GNMR_HOST_X86_SIMD
// bf16 -> fp32: the 16 bits above 16 zero bits (exact, NaN kept); fp16 by
// F16C (exact for every value, subnormals included whatever DAZ says).
__attribute__((target("avx2,f16c"))) inline void chunk_rows_avx2(float* acc, const std::uint16_t* body,
                                                                 std::uint64_t len, bool is_bf16) {
  for (std::uint64_t r = 0; r < len; r += kChunkAccs) {
    const std::uint64_t cnt = len - r < kChunkAccs ? len - r : kChunkAccs;
    const std::uint16_t* q = body + r;
    if (is_bf16) {
      for (std::uint64_t e = 0; e < cnt; e += 8) {
        const __m128i v = _mm_load_si128(reinterpret_cast<const __m128i*>(q + e));  // 16-byte aligned
        const __m256 x = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
        _mm256_store_ps(acc + e, _mm256_add_ps(_mm256_load_ps(acc + e), _mm256_mul_ps(x, x)));
      }
    } else {
      for (std::uint64_t e = 0; e < cnt; e += 8) {
        const __m256 x = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(q + e)));
        _mm256_store_ps(acc + e, _mm256_add_ps(_mm256_load_ps(acc + e), _mm256_mul_ps(x, x)));
      }
    }
  }
}

// 16 at a time; a row's length is a multiple of 8, so an odd group of 8 is
// left to the 256-bit step (same lanes, same order). The zero-masked forms
// with an all-ones mask are the plain instructions; GCC 12's plain
// intrinsics pass an "undefined" register that -Wmaybe-uninitialized
// reports in the user's build.
__attribute__((target("avx512f,avx512bw,avx2,f16c"))) inline void chunk_rows_avx512(float* acc,
                                                                                   const std::uint16_t* body,
                                                                                   std::uint64_t len, bool is_bf16) {
  const __mmask16 kAll = 0xffff;
  for (std::uint64_t r = 0; r < len; r += kChunkAccs) {
    const std::uint64_t cnt = len - r < kChunkAccs ? len - r : kChunkAccs;
    const std::uint16_t* q = body + r;
    std::uint64_t e = 0;
    if (is_bf16) {
      for (; e + 16 <= cnt; e += 16) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + e));
        const __m512 x = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, v), 16));
        _mm512_store_ps(acc + e, _mm512_add_ps(_mm512_load_ps(acc + e), _mm512_mul_ps(x, x)));
      }
      if (e < cnt) {
        const __m128i v = _mm_load_si128(reinterpret_cast<const __m128i*>(q + e));
        const __m256 x = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
        _mm256_store_ps(acc + e, _mm256_add_ps(_mm256_load_ps(acc + e), _mm256_mul_ps(x, x)));
      }
    } else {
      for (; e + 16 <= cnt; e += 16) {
        const __m512 x = _mm512_maskz_cvtph_ps(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + e)));
        _mm512_store_ps(acc + e, _mm512_add_ps(_mm512_load_ps(acc + e), _mm512_mul_ps(x, x)));
      }
      if (e < cnt) {
        const __m256 x = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(q + e)));
        _mm256_store_ps(acc + e, _mm256_add_ps(_mm256_load_ps(acc + e), _mm256_mul_ps(x, x)));
      }
    }
  }
}
#endif

// Which build runs the rows: 0 portable, 1 AVX2+F16C, 2 AVX-512 (F, BW).
enum class ChunkIsa : int { kPortable = 0, kAvx2 = 1, kAvx512 = 2 };

inline bool host_has_avx512bw() {
#if GNMR_HOST_X86_SIMD
  static const bool yes = __builtin_cpu_supports("avx512f") != 0 && __builtin_cpu_supports("avx512bw") != 0 &&
                          host_has_avx2_f16c();
  return yes;
#else
  return false;
#endif
}

inline ChunkIsa best_chunk_isa() {
  if (host_has_avx512bw()) return ChunkIsa::kAvx512;
  if (host_has_avx2_f16c()) return ChunkIsa::kAvx2;
  return ChunkIsa::kPortable;
}

// The kernel's partial of one chunk of 16-bit elements (bf16 or fp16), n in
// [1, 2^32), any element-aligned address. isa: the build to run (tests
// compare them; a request the CPU cannot run falls back to one it can).
inline float chunk_sumsq16(const std::uint16_t* p, std::uint64_t n, bool is_bf16,
                           ChunkIsa isa = best_chunk_isa()) {
  alignas(64) float acc[kChunkAccs];
  std::memset(acc, 0, sizeof acc);
  const std::uint32_t mis = static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(p) & 15u);
  std::uint64_t h = ((16u - mis) & 15u) / 2u;
  if (h > n) h = n;
  for (std::uint64_t t = 0; t < h; ++t) acc[t * 8] = acc[t * 8] + sq16(p[t], is_bf16);
  const std::uint64_t len = (n - h) / 8 * 8;
  const std::uint16_t* body = p + h;
#if GNMR_HOST_X86_SIMD
  if (isa == ChunkIsa::kAvx512 && host_has_avx512bw())
    chunk_rows_avx512(acc, body, len, is_bf16);
  else if (isa != ChunkIsa::kPortable && host_has_avx2_f16c())
    chunk_rows_avx2(acc, body, len, is_bf16);
  else
    chunk_rows_portable(acc, body, len, is_bf16);
#else
  (void)isa;
  chunk_rows_portable(acc, body, len, is_bf16);
#endif
  const std::uint64_t r = (n - h) - len;
  for (std::uint64_t t = 0; t < r; ++t) acc[t * 8] = acc[t * 8] + sq16(body[len + t], is_bf16);
  return fold_chunk_accs(acc);
}

// A unit's fold of its chunk partials cp[0..count) (NormPlan's order), as
// the kernel's last block does it: thread t sums chunks t, t+256, ... in
// double, then the block tree in double, then one rounding to float.
inline float unit_fold_chunks(const float* cp, std::uint64_t count) {
  double t[kNormThreads] = {};
  for (std::uint64_t c = 0; c < count; ++c) t[c % kNormThreads] = t[c % kNormThreads] + static_cast<double>(cp[c]);
  return to_float_rn(host_block_tree(t));
}

}  // namespace detail
}  // namespace gnmr
