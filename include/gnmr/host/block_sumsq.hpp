// gnmr/host/block_sumsq.hpp — the host's fast order for bf16/fp16 sums of
// squares (issue 32, part 1): what host_unit_partials uses by default
// (HostOrder::kFast, gnmr/host/unit_norms.hpp).
//
// Why a second order: the CUDA kernel's order (gnmr/host/chunk_sumsq.hpp)
// spreads a chunk over 2,048 fp32 accumulators, so a CPU adds every row of
// 2,048 squares into memory and back: 0.72-0.86 x of one core's read
// roofline on the machines measured (docs/performance.md), against a goal
// of 0.9 x. Here the accumulators stay in registers: 64 of them, one per
// lane, over contiguous elements.
//
// The order, for a segment of n 16-bit elements (bf16 or fp16), counted from
// the segment's first element (the address does not matter):
//   * blocks of kFastBlock = 4,096 elements (the last one shorter);
//   * in a block, element j goes to lane j mod 64: each of the 64 fp32 lanes
//     sums its squares in increasing j, the square rounded (x*x) then added
//     (never fused): at most 64 terms a lane;
//   * the block's value: the 64 lanes widened to double and folded by the
//     fixed halving tree d[l] += d[l + w], w = 32, 16, ..., 1;
//   * the segment's value: the blocks' values summed in double, in order.
// host_unit_partials then sums a unit's segments in double, in segment
// order, and rounds once to float.
// Every build (portable C++, AVX2+F16C, AVX-512 F/BW) does these additions
// on these operands: separate multiply and add instructions, lane l of a
// build's register group is lane l of the order, the tail and the fold are
// the same scalar code. So every build gives the same bits for every input
// (NaN and Inf included; which NaN payload is not part of the contract),
// whatever the alignment. Subnormal squares follow IEEE gradual underflow;
// a thread running with FTZ/DAZ set can differ there.
//
// Accuracy (docs/algorithm.md, "Norms on the host"; tested against a double
// reference in tests/unit/test_host_block_sumsq.cpp): with u = 2^-24 and
// e = 2^-53, a segment of b blocks is within
//   gamma_64 + (6 + b) e / (1 - (6 + b) e)   (about 64 u)
// of its exact sum of squares, relative (gamma_k = k u / (1 - k u): a lane's
// 63 additions and its squares' rounding; the tree's 6 levels and the
// blocks' b additions in double); the unit's double sum and the final
// rounding add (segments) e and u / 2. A lane whose 64-term sum exceeds
// FLT_MAX is +Inf, as is the unit then.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gnmr/config.hpp"
#include "gnmr/core/cpu.hpp"
#include "gnmr/core/half.hpp"
#include "gnmr/host/widen16.hpp"

#if GNMR_HOST_X86_SIMD
#include <immintrin.h>
#endif

namespace gnmr {
namespace detail {

constexpr std::uint32_t kFastLanes = 64;
constexpr std::uint64_t kFastBlock = 4096;

// A block's value from its 64 lanes (the fixed halving tree, in double).
inline double fold_lanes64(const float* acc) {
  double d[kFastLanes];
  for (std::uint32_t l = 0; l < kFastLanes; ++l) d[l] = static_cast<double>(acc[l]);
  for (std::uint32_t w = kFastLanes / 2; w >= 1; w /= 2)
    for (std::uint32_t l = 0; l < w; ++l) d[l] = d[l] + d[l + w];
  return d[0];
}

// acc[j] += sq(q[j]) for j < cnt <= 64, lane j: a block's tail (and the
// whole of the portable build).
template <bool kBf16>
inline void lanes_scalar(float* acc, const std::uint16_t* q, std::uint64_t cnt) {
  for (std::uint64_t j = 0; j < cnt; ++j) {
    const float x = widen1<kBf16>(q[j]);
    acc[j] = acc[j] + x * x;
  }
}

// A block's end in every build: the tail (fewer than 64 elements, lanes
// 0..) added to the lanes, then the fold.
template <bool kBf16>
inline double finish_block(float* acc, const std::uint16_t* q, std::uint64_t cnt) {
  lanes_scalar<kBf16>(acc, q, cnt);
  return fold_lanes64(acc);
}

template <bool kBf16>
inline double block_portable(const std::uint16_t* q, std::uint64_t len) {
  float acc[kFastLanes] = {};
  std::uint64_t j = 0;
  for (; j + kFastLanes <= len; j += kFastLanes) lanes_scalar<kBf16>(acc, q + j, kFastLanes);
  return finish_block<kBf16>(acc, q + j, len - j);
}

#if GNMR_HOST_X86_SIMD
// Lanes 8k..8k+7 in register a[k]: 64 elements an iteration.
template <bool kBf16>
__attribute__((target("avx2,f16c"))) inline double block_avx2(const std::uint16_t* q, std::uint64_t len) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  std::uint64_t j = 0;
  for (; j + kFastLanes <= len; j += kFastLanes) {
    const __m256 x0 = widen8<kBf16>(q + j), x1 = widen8<kBf16>(q + j + 8);
    const __m256 x2 = widen8<kBf16>(q + j + 16), x3 = widen8<kBf16>(q + j + 24);
    const __m256 x4 = widen8<kBf16>(q + j + 32), x5 = widen8<kBf16>(q + j + 40);
    const __m256 x6 = widen8<kBf16>(q + j + 48), x7 = widen8<kBf16>(q + j + 56);
    a0 = _mm256_add_ps(a0, _mm256_mul_ps(x0, x0));
    a1 = _mm256_add_ps(a1, _mm256_mul_ps(x1, x1));
    a2 = _mm256_add_ps(a2, _mm256_mul_ps(x2, x2));
    a3 = _mm256_add_ps(a3, _mm256_mul_ps(x3, x3));
    a4 = _mm256_add_ps(a4, _mm256_mul_ps(x4, x4));
    a5 = _mm256_add_ps(a5, _mm256_mul_ps(x5, x5));
    a6 = _mm256_add_ps(a6, _mm256_mul_ps(x6, x6));
    a7 = _mm256_add_ps(a7, _mm256_mul_ps(x7, x7));
  }
  alignas(32) float acc[kFastLanes];
  _mm256_store_ps(acc, a0);
  _mm256_store_ps(acc + 8, a1);
  _mm256_store_ps(acc + 16, a2);
  _mm256_store_ps(acc + 24, a3);
  _mm256_store_ps(acc + 32, a4);
  _mm256_store_ps(acc + 40, a5);
  _mm256_store_ps(acc + 48, a6);
  _mm256_store_ps(acc + 56, a7);
  return finish_block<kBf16>(acc, q + j, len - j);
}

// Lanes 16k..16k+15 in register a[k].
template <bool kBf16>
__attribute__((target("avx512f,avx512bw,avx2,f16c"))) inline double block_avx512(const std::uint16_t* q,
                                                                                std::uint64_t len) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  std::uint64_t j = 0;
  for (; j + kFastLanes <= len; j += kFastLanes) {
    const __m512 x0 = widen16<kBf16>(q + j), x1 = widen16<kBf16>(q + j + 16);
    const __m512 x2 = widen16<kBf16>(q + j + 32), x3 = widen16<kBf16>(q + j + 48);
    a0 = _mm512_add_ps(a0, _mm512_mul_ps(x0, x0));
    a1 = _mm512_add_ps(a1, _mm512_mul_ps(x1, x1));
    a2 = _mm512_add_ps(a2, _mm512_mul_ps(x2, x2));
    a3 = _mm512_add_ps(a3, _mm512_mul_ps(x3, x3));
  }
  alignas(64) float acc[kFastLanes];
  _mm512_store_ps(acc, a0);
  _mm512_store_ps(acc + 16, a1);
  _mm512_store_ps(acc + 32, a2);
  _mm512_store_ps(acc + 48, a3);
  return finish_block<kBf16>(acc, q + j, len - j);
}
#endif

// Which build sums the blocks. All give the same bits.
enum class BlockIsa : int { kPortable = 0, kAvx2 = 1, kAvx512 = 2 };

// AVX2 wherever it runs: on the CPU measured (docs/performance.md) the
// 512-bit build was no faster; both are memory-bound there.
inline BlockIsa best_block_isa() { return host_has_avx2_f16c() ? BlockIsa::kAvx2 : BlockIsa::kPortable; }

// The fast order's sum of squares of one segment of n 16-bit elements, in
// double (not rounded). isa: the build to run (tests compare them; one the
// CPU cannot run falls back to one it can).
inline double sumsq16_fast(const std::uint16_t* p, std::uint64_t n, bool is_bf16,
                           BlockIsa isa = best_block_isa()) {
  using BlockFn = double (*)(const std::uint16_t*, std::uint64_t);
  BlockFn fn = is_bf16 ? &block_portable<true> : &block_portable<false>;
#if GNMR_HOST_X86_SIMD
  if (isa == BlockIsa::kAvx512 && host_has_avx512bw())
    fn = is_bf16 ? &block_avx512<true> : &block_avx512<false>;
  else if (isa != BlockIsa::kPortable && host_has_avx2_f16c())
    fn = is_bf16 ? &block_avx2<true> : &block_avx2<false>;
#else
  (void)isa;
#endif
  double total = 0.0;
  for (std::uint64_t b = 0; b < n; b += kFastBlock) total += fn(p + b, n - b < kFastBlock ? n - b : kFastBlock);
  return total;
}

}  // namespace detail
}  // namespace gnmr
