// gnmr/plan/norm_plan.hpp — the chunk plan and the exact reduction order
// of the CUDA per-unit norm kernel (gnmr/cuda/unit_norms.cuh), as plain C++.
//
// Why chunks: one block per *segment* (cub::DeviceSegmentedReduce) leaves a
// LLaMA layout waiting on the one embedding-sized segment (330 GB/s on an
// H100, docs/algorithm.md). The plan, built once on the host, cuts every segment into
// chunks of at most chunk_elems elements and lists them grouped by unit; the
// kernel runs one block per chunk and the last block of a unit to finish
// folds that unit's chunk partials in chunk order.
//
// Why here and not in the .cuh: the order of every floating-point operation
// of that kernel is defined by the functions below, which the kernel calls
// and which the host replay calls too (tests/reference/unit_partials.hpp,
// what the CPU tests check). The device result
// is therefore a fixed function of the data and of each segment's address
// modulo 16 — same bits on every run, no float atomics — and a machine
// without a GPU can check the arithmetic against a double reference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "gnmr/core/dtype.hpp"
#include "gnmr/core/half.hpp"
#include "gnmr/core/math.hpp"
#include "gnmr/core/numeric.hpp"
#include "gnmr/policy/norm.hpp"

// Loops over register arrays must unroll on the device (a run-time index
// would put the array in local memory); host compilers do not know the pragma.
#if defined(__CUDA_ARCH__)
#define GNMR_UNROLL _Pragma("unroll")
#else
#define GNMR_UNROLL
#endif

namespace gnmr {
namespace detail {

// The kernel's block size and load depth. Part of the reduction order: the
// emulation below and the kernel must agree, so they are constants, not
// launch parameters.
constexpr std::uint32_t kNormThreads = 256;
constexpr std::uint32_t kNormUnroll = 4;  // 16-byte loads in flight per thread
constexpr std::uint64_t kDefaultNormChunk = 65536;

// One chunk of one segment. 24 bytes; the kernel reads one per block.
struct NormChunk {
  const void* data;     // first element of the chunk
  std::uint32_t numel;  // 1 .. chunk_elems
  std::uint32_t unit;
  std::uint32_t dtype;  // DType
  std::uint32_t pad;
};

// Host side of a plan: chunks grouped by unit (units ascending; within a
// unit, segments in the caller's order, then position), plus a CSR index.
struct NormLayout {
  std::vector<NormChunk> chunks;
  std::vector<std::uint32_t> unit_begin;  // num_units + 1 entries
  std::uint64_t bytes = 0;                // bytes one pass reads
  std::uint64_t elements = 0;
  std::size_t num_units() const { return unit_begin.empty() ? 0 : unit_begin.size() - 1; }
};

// DType as a template/kernel argument (the chunk table stores it as uint32).
constexpr std::uint32_t kDF32 = static_cast<std::uint32_t>(DType::kF32);
constexpr std::uint32_t kDBF16 = static_cast<std::uint32_t>(DType::kBF16);
constexpr std::uint32_t kDF16 = static_cast<std::uint32_t>(DType::kF16);

GNMR_HOST_DEVICE std::uint32_t dtype_size(std::uint32_t d) {
  return d == static_cast<std::uint32_t>(DType::kF32) ? 4u : 2u;
}

// The chunk size of a chunk plan (this one and adamw_plan.hpp's): a
// multiple of 8, so that every chunk of a 16-byte-aligned tensor starts
// 16-byte aligned, and at most 2^30 (a chunk's numel is 32-bit). f: the
// message prefix ("gnmr: NormPlan: ").
inline void check_chunk_elems(const std::string& f, std::uint64_t chunk_elems) {
  if (chunk_elems < 8 || chunk_elems % 8 != 0 || chunk_elems > (1ull << 30))
    throw std::invalid_argument(f + "chunk_elems must be a multiple of 8 in [8, 2^30], got " +
                                std::to_string(chunk_elems));
}

// Validates like host_unit_partials (empty segment, null data, bad dtype,
// unit out of range, uncovered unit) plus element alignment and the chunk
// size (check_chunk_elems), then cuts.
inline NormLayout build_norm_layout(const Segment* segs, std::size_t n_segs,
                                    std::size_t num_units,
                                    std::uint64_t chunk_elems = kDefaultNormChunk,
                                    const char* fn = "NormPlan") {
  const std::string f = std::string("gnmr: ") + fn + ": ";
  check_chunk_elems(f, chunk_elems);
  if (num_units > 0x7fffffffu)
    throw std::invalid_argument(f + "at most 2^31-1 units, got " + std::to_string(num_units));
  std::vector<std::uint64_t> per_unit(num_units, 0);
  validate_segments(segs, n_segs, num_units, true, fn, [](std::uint32_t) {});
  for (std::size_t i = 0; i < n_segs; ++i) {
    const Segment& s = segs[i];
    const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(s.data);
    if (a % dtype_size(static_cast<std::uint32_t>(s.dtype)) != 0)
      throw std::invalid_argument(f + "segment " + std::to_string(i) +
                                  " is not aligned to its element size");
    per_unit[s.unit] += (s.numel + chunk_elems - 1) / chunk_elems;
  }
  NormLayout L;
  L.unit_begin.assign(num_units + 1, 0);
  std::uint64_t total = 0;
  for (std::size_t u = 0; u < num_units; ++u) {
    if (per_unit[u] == 0) throw_uncovered(fn, u);
    L.unit_begin[u] = static_cast<std::uint32_t>(total);
    total += per_unit[u];
    if (total > 0x7fffffffu)
      throw std::invalid_argument(f + "more than 2^31-1 chunks: raise chunk_elems");
  }
  L.unit_begin[num_units] = static_cast<std::uint32_t>(total);
  L.chunks.resize(static_cast<std::size_t>(total));
  std::vector<std::uint32_t> fill(L.unit_begin.begin(), L.unit_begin.end() - 1);
  for (std::size_t i = 0; i < n_segs; ++i) {
    const Segment& s = segs[i];
    const std::uint32_t es = dtype_size(static_cast<std::uint32_t>(s.dtype));
    for (std::uint64_t off = 0; off < s.numel; off += chunk_elems) {
      const std::uint64_t n = s.numel - off < chunk_elems ? s.numel - off : chunk_elems;
      NormChunk c{};
      c.data = static_cast<const unsigned char*>(s.data) + off * es;
      c.numel = static_cast<std::uint32_t>(n);
      c.unit = s.unit;
      c.dtype = static_cast<std::uint32_t>(s.dtype);
      L.chunks[fill[s.unit]++] = c;
    }
    L.bytes += s.numel * es;
    L.elements += s.numel;
  }
  return L;
}

// ---- Element decoding -----------------------------------------------------
struct alignas(16) Vec16 {
  std::uint32_t w[4];
};

GNMR_HOST_DEVICE float f16_bits_to_float(std::uint16_t h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));  // exact, like the integer decode
  return f;
#else
  return fp16_to_float(h);
#endif
}

template <std::uint32_t D>
struct ElemOps;
template <>
struct ElemOps<kDF32> {
  using Bits = std::uint32_t;
  static constexpr std::uint32_t kVec = 4;
  GNMR_HOST_DEVICE static float decode(Bits b) { return bits_to_float(b); }
  GNMR_HOST_DEVICE static float lane(const Vec16& v, std::uint32_t j) { return bits_to_float(v.w[j]); }
};
template <>
struct ElemOps<kDBF16> {
  using Bits = std::uint16_t;
  static constexpr std::uint32_t kVec = 8;
  GNMR_HOST_DEVICE static float decode(Bits b) { return bf16_to_float(b); }
  GNMR_HOST_DEVICE static float lane(const Vec16& v, std::uint32_t j) {  // little-endian pairs
    return bits_to_float((j & 1u) ? (v.w[j >> 1] & 0xffff0000u) : (v.w[j >> 1] << 16));
  }
};
template <>
struct ElemOps<kDF16> {
  using Bits = std::uint16_t;
  static constexpr std::uint32_t kVec = 8;
  GNMR_HOST_DEVICE static float decode(Bits b) { return f16_bits_to_float(b); }
  GNMR_HOST_DEVICE static float lane(const Vec16& v, std::uint32_t j) {
    return f16_bits_to_float(static_cast<std::uint16_t>(v.w[j >> 1] >> ((j & 1u) * 16u)));
  }
};

// ---- Stage 1: one thread's share of one chunk ------------------------------
// Head elements up to the first 16-byte boundary go to threads 0..h-1, the
// aligned body is read as 16-byte vectors k = tid, tid+B, ... (kNormUnroll
// of them loaded before any is used; the fold order is still k ascending),
// each vector lane j into accumulator j, the tail to threads 0..r-1. The
// accumulators then fold in a fixed pairwise tree.
//
// Xform: what a framework's own pass does to each value before it is
// summed (gnmr/cuda/fused_partials.cuh): xf.vec<D>(v, where) may change the
// 16-byte vector v loaded from `where` (and store it back), xf.elem<D>(b,
// where) the same for one head or tail element; D is the chunk's dtype
// (kDF32, kDBF16, kDF16). The sum is over the values after xf, in exactly
// the order above, so a chunk's partial equals NormPlan's over the
// transformed data, bit for bit. NoXform reads only.
struct NoXform {
  template <std::uint32_t D>
  GNMR_HOST_DEVICE void vec(Vec16&, const Vec16*) const {}
  template <std::uint32_t D, class Bits>
  GNMR_HOST_DEVICE void elem(Bits&, const Bits*) const {}
};

template <class Norm, std::uint32_t D, class LoadVec, class Xform>
GNMR_HOST_DEVICE float chunk_thread_partial_ex(const void* data, std::uint32_t n, std::uint32_t tid,
                                               const LoadVec& load, const Xform& xf) {
  using E = ElemOps<D>;
  using Bits = typename E::Bits;
  constexpr std::uint32_t V = E::kVec;
  constexpr std::uint32_t B = kNormThreads;
  constexpr std::uint32_t U = kNormUnroll;
  const Bits* p = static_cast<const Bits*>(data);
  const std::uint32_t mis = static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(data) & 15u);
  std::uint32_t h = ((16u - mis) & 15u) / static_cast<std::uint32_t>(sizeof(Bits));
  if (h > n) h = n;
  float acc[V];
  // The unroll pragmas stay in column 0, which clang-format cannot keep.
  // clang-format off
GNMR_UNROLL
  for (std::uint32_t j = 0; j < V; ++j) acc[j] = Norm::identity();
  if (tid < h) {
    Bits b = p[tid];
    xf.template elem<D>(b, p + tid);
    acc[0] = Norm::combine(acc[0], Norm::element(E::decode(b)));
  }
  const std::uint32_t nv = (n - h) / V;
  const Vec16* body = reinterpret_cast<const Vec16*>(p + h);
  std::uint32_t k = tid;
  for (; k + (U - 1) * B < nv; k += U * B) {
    Vec16 v[U];
GNMR_UNROLL
    for (std::uint32_t u = 0; u < U; ++u) v[u] = load(body + k + u * B);
GNMR_UNROLL
    for (std::uint32_t u = 0; u < U; ++u) {
      xf.template vec<D>(v[u], body + k + u * B);
GNMR_UNROLL
      for (std::uint32_t j = 0; j < V; ++j)
        acc[j] = Norm::combine(acc[j], Norm::element(E::lane(v[u], j)));
    }
  }
  for (; k < nv; k += B) {
    Vec16 v = load(body + k);
    xf.template vec<D>(v, body + k);
GNMR_UNROLL
    for (std::uint32_t j = 0; j < V; ++j) acc[j] = Norm::combine(acc[j], Norm::element(E::lane(v, j)));
  }
  const std::uint32_t tail = (n - h) - nv * V;
  if (tid < tail) {
    Bits b = p[h + nv * V + tid];
    xf.template elem<D>(b, p + h + nv * V + tid);
    acc[0] = Norm::combine(acc[0], Norm::element(E::decode(b)));
  }
GNMR_UNROLL
  for (std::uint32_t w = V / 2; w >= 1; w /= 2)
GNMR_UNROLL
    for (std::uint32_t j = 0; j < w; ++j) acc[j] = Norm::combine(acc[j], acc[j + w]);
  // clang-format on
  return acc[0];
}

template <class Norm, std::uint32_t D, class LoadVec>
GNMR_HOST_DEVICE float chunk_thread_partial(const void* data, std::uint32_t n, std::uint32_t tid,
                                            const LoadVec& load) {
  return chunk_thread_partial_ex<Norm, D>(data, n, tid, load, NoXform{});
}

// ---- Stage 3: a unit's chunk partials --------------------------------------
// Sums fold in double (a unit may have thousands of chunks) and round once;
// max-combined norms fold with the policy's own combine.
template <class Norm, bool kSum = (Norm::kCombine == Combine::kSum)>
struct UnitFold {
  using T = double;
  GNMR_HOST_DEVICE static T identity() { return static_cast<double>(Norm::identity()); }
  GNMR_HOST_DEVICE static T add(T a, float x) { return math::dadd(a, static_cast<double>(x)); }
  GNMR_HOST_DEVICE static T merge(T a, T b) { return math::dadd(a, b); }
  GNMR_HOST_DEVICE static float finish(T a) { return to_float_rn(a); }
};
template <class Norm>
struct UnitFold<Norm, false> {
  using T = float;
  GNMR_HOST_DEVICE static T identity() { return Norm::identity(); }
  GNMR_HOST_DEVICE static T add(T a, float x) { return Norm::combine(a, x); }
  GNMR_HOST_DEVICE static T merge(T a, T b) { return Norm::combine(a, b); }
  GNMR_HOST_DEVICE static float finish(T a) { return a; }
};

// Thread tid of the unit's last block: chunks begin+tid, begin+tid+B, ...
// load(c) returns chunk c's partial (the kernel reads through L2).
template <class Norm, class Load>
GNMR_HOST_DEVICE typename UnitFold<Norm>::T unit_thread_fold(const Load& load, std::uint32_t begin,
                                                             std::uint32_t end, std::uint32_t tid) {
  using F = UnitFold<Norm>;
  typename F::T a = F::identity();
  for (std::uint32_t c = begin + tid; c < end; c += kNormThreads) a = F::add(a, load(c));
  return a;
}

}  // namespace detail
}  // namespace gnmr
