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
// chunk's partial is within gamma_k = k u / (1 - k u) of the exact sum of
// squares, u = 2^-24, k = ceil(n / 2048) + 13 (the terms of one accumulator,
// 3 additions of a thread's fold, 8 of the block tree, the square's
// rounding): 45 u for a full chunk; the unit's double fold adds about
// 2^-53 per chunk and the final rounding u / 2.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gnmr/config.hpp"
#include "gnmr/core/cpu.hpp"
#include "gnmr/core/half.hpp"
#include "gnmr/host/widen16.hpp"
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
// then the block tree. The SSE2 form does the same additions on the same
// operands, four threads at a time after a 4x4 transpose, and the block
// tree's levels as vector adds of neighbouring halves: the same bits, at a
// third of the scalar form's cost (which was 7% of a full chunk's time).
#if GNMR_HOST_X86_SIMD
inline float fold_chunk_accs(const float* acc) {
  alignas(16) float t[kNormThreads];
  for (std::uint32_t tid = 0; tid < kNormThreads; tid += 4) {
    const float* a = acc + tid * 8;
    __m128 s0 = _mm_add_ps(_mm_load_ps(a), _mm_load_ps(a + 4));  // thread tid: a[j] + a[j+4]
    __m128 s1 = _mm_add_ps(_mm_load_ps(a + 8), _mm_load_ps(a + 12));
    __m128 s2 = _mm_add_ps(_mm_load_ps(a + 16), _mm_load_ps(a + 20));
    __m128 s3 = _mm_add_ps(_mm_load_ps(a + 24), _mm_load_ps(a + 28));
    _MM_TRANSPOSE4_PS(s0, s1, s2, s3);  // s_j = lane j of the four threads
    const __m128 u0 = _mm_add_ps(s0, s2), u1 = _mm_add_ps(s1, s3);  // a[j] + a[j+2], j = 0, 1
    _mm_store_ps(t + tid, _mm_add_ps(u0, u1));                       // a[0] + a[1]
  }
  // Each warp: offsets 16, 8, 4 as vector adds, 2 and 1 inside a register.
  __m128 w[8];
  for (std::uint32_t k = 0; k < 8; ++k) {
    float* v = t + 32 * k;
    __m128 a0 = _mm_add_ps(_mm_load_ps(v), _mm_load_ps(v + 16)), a1 = _mm_add_ps(_mm_load_ps(v + 4), _mm_load_ps(v + 20));
    __m128 a2 = _mm_add_ps(_mm_load_ps(v + 8), _mm_load_ps(v + 24)), a3 = _mm_add_ps(_mm_load_ps(v + 12), _mm_load_ps(v + 28));
    a0 = _mm_add_ps(a0, a2);
    a1 = _mm_add_ps(a1, a3);
    a0 = _mm_add_ps(a0, a1);                       // offset 4
    a0 = _mm_add_ps(a0, _mm_movehl_ps(a0, a0));     // offset 2
    w[k] = _mm_add_ss(a0, _mm_shuffle_ps(a0, a0, 1));  // offset 1: lane 0 is the warp's value
  }
  // The warp values padded with zeros to 32: offsets 16 and 8 add zeros
  // (x + 0 = x for these non-negative sums), then 4, 2, 1 over the eight.
  float s[8];
  for (std::uint32_t k = 0; k < 8; ++k) s[k] = _mm_cvtss_f32(w[k]) + 0.0f;
  for (std::uint32_t off = 4; off >= 1; off /= 2)
    for (std::uint32_t l = 0; l < off; ++l) s[l] = s[l] + s[l + off];
  return s[0];
}
#else
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
#endif

// The body rows: acc[e mod 2048] += sq(body[e]) for e < len (len a multiple
// of 8), in increasing e: row_fn(acc, row, cnt) adds one row of cnt <= 2048
// elements into acc[0, cnt). Every build below supplies only its row_fn.
template <class RowFn>
inline void for_each_row(float* acc, const std::uint16_t* body, std::uint64_t len, RowFn row_fn) {
  for (std::uint64_t r = 0; r < len; r += kChunkAccs) row_fn(acc, body + r, len - r < kChunkAccs ? len - r : kChunkAccs);
}

// Portable build: one loop per dtype, so that the compiler vectorises the
// bf16 one (a shift) at least with SSE2.
template <bool kBf16>
inline void row_portable(float* acc, const std::uint16_t* q, std::uint64_t cnt) {
  for (std::uint64_t e = 0; e < cnt; ++e) {
    const float x = widen1<kBf16>(q[e]);
    acc[e] = acc[e] + x * x;
  }
}

#if GNMR_HOST_X86_SIMD
// The vector builds: a row at a time, each group of 4, 8 or 16 accumulators
// loaded, given the row's squares and stored back, as the portable loop
// does element by element (the accumulators, 8 KB, stay in L1). Two
// variants that move fewer accumulators measured slower on this CPU
// (docs/record/performance-host.md): several rows per load and store (the rows are
// 4 KB apart: 0.6x of the read roofline against 0.85x), and blocks of
// accumulators held in registers down the rows (0.4-0.5x).
// widen8 / widen16: gnmr/host/widen16.hpp.
template <bool kBf16>
__attribute__((target("avx2,f16c"))) inline void row_avx2(float* acc, const std::uint16_t* q, std::uint64_t cnt) {
  for (std::uint64_t e = 0; e < cnt; e += 8) {
    const __m256 x = widen8<kBf16>(q + e);
    _mm256_store_ps(acc + e, _mm256_add_ps(_mm256_load_ps(acc + e), _mm256_mul_ps(x, x)));
  }
}

// The 128-bit build (SSE2; F16C for fp16), 32 elements an iteration. The
// fastest build on the CPU measured (docs/record/performance-host.md): the 256- and
// 512-bit ones, bit for bit the same, ran slower in the same runs, so
// best_chunk_isa() picks this one wherever F16C exists.
template <bool kBf16>
__attribute__((target("sse2,f16c"))) inline void sse_step8(float* acc, const std::uint16_t* q) {
  const __m128i v = _mm_load_si128(reinterpret_cast<const __m128i*>(q));  // 16-byte aligned
  __m128 lo, hi;
  if (kBf16) {
    const __m128i z = _mm_setzero_si128();
    lo = _mm_castsi128_ps(_mm_unpacklo_epi16(z, v));
    hi = _mm_castsi128_ps(_mm_unpackhi_epi16(z, v));
  } else {
    lo = _mm_cvtph_ps(v);
    hi = _mm_cvtph_ps(_mm_unpackhi_epi64(v, v));
  }
  _mm_store_ps(acc, _mm_add_ps(_mm_load_ps(acc), _mm_mul_ps(lo, lo)));
  _mm_store_ps(acc + 4, _mm_add_ps(_mm_load_ps(acc + 4), _mm_mul_ps(hi, hi)));
}

template <bool kBf16>
__attribute__((target("sse2,f16c"))) inline void row_sse(float* acc, const std::uint16_t* q, std::uint64_t cnt) {
  std::uint64_t e = 0;
  for (; e + 32 <= cnt; e += 32) {
    sse_step8<kBf16>(acc + e, q + e);
    sse_step8<kBf16>(acc + e + 8, q + e + 8);
    sse_step8<kBf16>(acc + e + 16, q + e + 16);
    sse_step8<kBf16>(acc + e + 24, q + e + 24);
  }
  for (; e < cnt; e += 8) sse_step8<kBf16>(acc + e, q + e);
}

// 16 at a time.
template <bool kBf16>
__attribute__((target("avx512f,avx512bw,avx2,f16c"))) inline void row_avx512(float* acc, const std::uint16_t* q,
                                                                            std::uint64_t cnt) {
  std::uint64_t e = 0;
  for (; e + 16 <= cnt; e += 16) {
    const __m512 x = widen16<kBf16>(q + e);
    _mm512_store_ps(acc + e, _mm512_add_ps(_mm512_load_ps(acc + e), _mm512_mul_ps(x, x)));
  }
  if (e < cnt) {  // a row's length is a multiple of 8: an odd group of 8 by the 256-bit step
    const __m256 x = widen8<kBf16>(q + e);
    _mm256_store_ps(acc + e, _mm256_add_ps(_mm256_load_ps(acc + e), _mm256_mul_ps(x, x)));
  }
}
#endif

// Which build runs the rows: portable C++, SSE2 (+F16C), AVX2+F16C,
// AVX-512 (F, BW). All give the same bits.
enum class ChunkIsa : int { kPortable = 0, kAvx2 = 1, kAvx512 = 2, kSse = 3 };

inline ChunkIsa best_chunk_isa() {
  if (host_has_avx2_f16c()) return ChunkIsa::kSse;  // F16C present: the fastest build measured (above)
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
  using RowFn = void (*)(float*, const std::uint16_t*, std::uint64_t);
  RowFn row_fn = is_bf16 ? &row_portable<true> : &row_portable<false>;
#if GNMR_HOST_X86_SIMD
  if (isa == ChunkIsa::kSse && host_has_avx2_f16c())
    row_fn = is_bf16 ? &row_sse<true> : &row_sse<false>;
  else if (isa == ChunkIsa::kAvx512 && host_has_avx512bw())
    row_fn = is_bf16 ? &row_avx512<true> : &row_avx512<false>;
  else if (isa != ChunkIsa::kPortable && host_has_avx2_f16c())
    row_fn = is_bf16 ? &row_avx2<true> : &row_avx2<false>;
#else
  (void)isa;
#endif
  for_each_row(acc, body, len, row_fn);
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
