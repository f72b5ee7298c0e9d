// gnmr/host/unit_norms.hpp — per-unit partial norms of gradients in host memory.
//
// Step (a) of docs/algorithm.md for the host backend: a unit is one or more segments
// (pointer, element count, dtype); host_unit_partials() reduces every unit's
// segments to the NormPolicy's *partial* (sum of squares for L2/RMS, max |x|
// for Linf), the number GnmrController::step() takes and the number ranks
// all-reduce. Typical use:
//
//   std::vector<gnmr::Segment> segs = {{q.data(), q.size(), gnmr::DType::kBF16, 0}, ...};
//   gnmr::host_unit_partials(segs, partials);   // partials.size() == num_units
//   controller.step(partials);
//
// Precision (L2, RMS): fp32 segments are summed in double (in lanes, in
// the order gnmr/host/sumsq.hpp defines); bf16 and fp16 segments in one of
// two fixed orders (HostOrder below). kFast, the default
// (gnmr/host/block_sumsq.hpp): fp32 lanes over blocks of 4,096 elements,
// double across blocks; a unit's segments summed in double, in segment
// order, then rounded once. kKernel (gnmr/host/chunk_sumsq.hpp): the CUDA
// kernel's order (fp32 within each 65,536-element chunk, double across
// chunks): a unit whose segments are all bf16/fp16 gets exactly the partial
// gnmr::cuda::NormPlan computes for the same layout (default chunk size, the
// same addresses modulo 16), so a host replay of a GPU's gradients gives its
// norms bit for bit; a unit with an fp32 segment combines its segments in
// double, in segment order (a 16-bit segment's value: its chunk partials
// summed in double, in order), then rounds once. Every build (portable,
// AVX2, AVX-512) gives the same bits in either order; docs/algorithm.md
// ("Norms on the host") states the error bounds. A unit whose exact sum of squares
// exceeds FLT_MAX (|g|_2 > ~1.8e19) rounds to +Inf: the controller then sees
// a non-finite norm and gives that unit the safety action (skip), which is
// the right call for a gradient that large. NaN/Inf elements propagate to
// their unit's partial for every norm (Linf uses math::max_nan).
//
// A call allocates nothing once a thread has seen the largest num_units and
// segment count (the per-unit accumulators and per-segment values live in
// thread_local buffers of the calling thread). An executor may spread the
// segments over threads (host_unit_partials' pfor): same bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gnmr/core/dtype.hpp"
#include "gnmr/core/half.hpp"
#include "gnmr/core/math.hpp"
#include "gnmr/core/numeric.hpp"
#include "gnmr/core/parallel.hpp"
#include "gnmr/host/block_sumsq.hpp"
#include "gnmr/host/chunk_sumsq.hpp"
#include "gnmr/host/sumsq.hpp"
#include "gnmr/policy/norm.hpp"

namespace gnmr {

namespace detail {

// Sums of squares per dtype: gnmr/host/sumsq.hpp.

// max |x| on the bit patterns: with the sign cleared, IEEE magnitudes order
// like integers and every NaN sorts above Inf, so an integer max (which
// vectorises) yields max |x|, or a NaN if there is one. The masked values
// are non-negative as *signed* integers, and signed max/compare is what
// baseline SSE2 has (pmaxsw; pcmpgtd + select for 32 bits). 128 bytes of
// lanes = 8 independent vector chains, enough to hide the select latency.
template <class S, class U>
inline S maxabs_bits(const U* p, std::uint64_t n, S mag_mask) {
  constexpr std::size_t kMaxLanes = 128 / sizeof(S);
  S a[kMaxLanes] = {};
  std::uint64_t i = 0;
  for (; i + kMaxLanes <= n; i += kMaxLanes)
    for (std::size_t j = 0; j < kMaxLanes; ++j) {
      const S v = static_cast<S>(p[i + j] & static_cast<U>(mag_mask));
      a[j] = v > a[j] ? v : a[j];
    }
  for (std::size_t j = 0; i < n; ++i, ++j) {
    const S v = static_cast<S>(p[i] & static_cast<U>(mag_mask));
    a[j] = v > a[j] ? v : a[j];
  }
  S m = 0;
  for (std::size_t j = 0; j < kMaxLanes; ++j) m = a[j] > m ? a[j] : m;
  return m;
}

inline float maxabs_segment(const Segment& s) {
  switch (s.dtype) {
    case DType::kF32:
      return bits_to_float(static_cast<std::uint32_t>(maxabs_bits(
          static_cast<const std::uint32_t*>(s.data), s.numel, std::int32_t{0x7fffffff})));
    case DType::kBF16:
      return bf16_to_float(static_cast<std::uint16_t>(maxabs_bits(
          static_cast<const std::uint16_t*>(s.data), s.numel, std::int16_t{0x7fff})));
    case DType::kF16:
      return fp16_to_float(static_cast<std::uint16_t>(maxabs_bits(
          static_cast<const std::uint16_t*>(s.data), s.numel, std::int16_t{0x7fff})));
  }
  return nan_f();
}

inline float load_element(const Segment& s, std::uint64_t i) {
  switch (s.dtype) {
    case DType::kF32: return static_cast<const float*>(s.data)[i];
    case DType::kBF16: return bf16_to_float(static_cast<const std::uint16_t*>(s.data)[i]);
    case DType::kF16: return fp16_to_float(static_cast<const std::uint16_t*>(s.data)[i]);
  }
  return nan_f();
}

// What host_unit_partials does for a NormPolicy: the built-in ones get the
// fast kernels above; any other policy is folded element by element with its
// own element()/combine() (in double for kSum, in float for kMax).
enum class HostKernel { kSumSquares, kMaxAbs, kGenericSum, kGenericMax };
template <class Norm>
constexpr HostKernel host_kernel() {
  if (std::is_same<Norm, L2Norm>::value || std::is_same<Norm, RmsNorm>::value)
    return HostKernel::kSumSquares;
  if (std::is_same<Norm, LinfNorm>::value) return HostKernel::kMaxAbs;
  return Norm::kCombine == Combine::kSum ? HostKernel::kGenericSum : HostKernel::kGenericMax;
}

// Per-unit accumulator. Negative = "no segment seen": sums of squares and
// maxima of |x| are >= 0 or NaN, so the sentinel cannot collide with data.
inline std::vector<double>& unit_scratch(std::size_t num_units) {
  thread_local std::vector<double> acc;
  acc.assign(num_units, -1.0);
  return acc;
}

// One value per segment (host_unit_partials' first pass), reused the same way.
inline std::vector<double>& segment_scratch(std::size_t n_segs) {
  thread_local std::vector<double> seg;
  if (seg.size() < n_segs) seg.resize(n_segs);
  return seg;
}

inline bool is_16bit(DType t) { return t == DType::kBF16 || t == DType::kF16; }

// Where the kernel-order pass keeps its chunk partials: per unit a run of
// the unit's 16-bit chunks in NormPlan's order (segments in order, each cut
// into kDefaultNormChunk pieces). Grown once per thread, reused after.
struct ChunkScratch {
  std::vector<float> cp;                  // chunk partials
  std::vector<std::uint64_t> unit_off;    // first chunk of each unit (num_units + 1)
  std::vector<std::uint64_t> seg_off;     // first chunk of each 16-bit segment
  std::vector<std::uint8_t> mixed;        // the unit has an fp32 segment
};
inline ChunkScratch& chunk_scratch(const Segment* segs, std::size_t n_segs, std::size_t num_units) {
  thread_local ChunkScratch c;
  c.unit_off.assign(num_units + 1, 0);
  c.mixed.assign(num_units, 0);
  if (c.seg_off.size() < n_segs) c.seg_off.resize(n_segs);
  for (std::size_t i = 0; i < n_segs; ++i) {
    if (is_16bit(segs[i].dtype))
      c.unit_off[segs[i].unit + 1] += (segs[i].numel + kDefaultNormChunk - 1) / kDefaultNormChunk;
    else
      c.mixed[segs[i].unit] = 1;
  }
  for (std::size_t u = 0; u < num_units; ++u) c.unit_off[u + 1] += c.unit_off[u];
  std::vector<std::uint64_t>& fill = c.seg_off;  // reused below as per-segment offsets
  thread_local std::vector<std::uint64_t> next;
  next.assign(c.unit_off.begin(), c.unit_off.end() - 1);
  for (std::size_t i = 0; i < n_segs; ++i)
    if (is_16bit(segs[i].dtype)) {
      fill[i] = next[segs[i].unit];
      next[segs[i].unit] += (segs[i].numel + kDefaultNormChunk - 1) / kDefaultNormChunk;
    }
  if (c.cp.size() < c.unit_off[num_units]) c.cp.resize(c.unit_off[num_units]);
  return c;
}

// The kernel's chunk partials of one 16-bit segment, into cp.
inline void segment_chunks16(const Segment& s, float* cp) {
  const std::uint16_t* p = static_cast<const std::uint16_t*>(s.data);
  const bool bf = s.dtype == DType::kBF16;
  for (std::uint64_t off = 0, k = 0; off < s.numel; off += kDefaultNormChunk, ++k) {
    const std::uint64_t n = s.numel - off < kDefaultNormChunk ? s.numel - off : kDefaultNormChunk;
    cp[k] = chunk_sumsq16(p + off, n, bf);
  }
}

}  // namespace detail

// Whether every unit must own a segment. A whole model's layout must (a unit
// without gradient has no meaningful norm); one rank's shard of a sharded
// model need not: a rank that holds none of a unit contributes the partial's
// identity (0), and the Reducer combines the ranks.
enum class Coverage { kEveryUnit, kShard };

// The order of the bf16/fp16 sums of squares (L2, RMS; fp32 segments and
// the other norms are the same under both).
//   kFast:   gnmr/host/block_sumsq.hpp: 64 fp32 lanes over blocks of 4,096
//            contiguous elements, double across blocks and segments; the
//            fastest on a CPU, independent of addresses. The default.
//   kKernel: gnmr/host/chunk_sumsq.hpp: the CUDA kernel's order, so that a
//            unit of bf16/fp16 segments gets gnmr::cuda::NormPlan's partial
//            bit for bit (a host replay of a GPU's gradients). Slower: about
//            0.85 x of kFast on the CPU measured (docs/performance.md).
// Both are deterministic and the same on every ISA build; their error
// bounds are in docs/algorithm.md ("Norms on the host").
enum class HostOrder { kFast, kKernel };

struct HostNormOptions {
  Coverage coverage = Coverage::kEveryUnit;
  HostOrder order = HostOrder::kFast;
};

// Partials of every unit: partials[u] for u < num_units. Throws
// std::invalid_argument (naming the segment) on an empty segment, null data,
// an unknown dtype, unit >= num_units, num_units == 0, or (kEveryUnit) a unit
// with no segment; nothing is read and partials is untouched when it throws.
//
// With an executor (gnmr/core/parallel.hpp), the work items are the
// segments: each segment's reduction is computed alone, with its own fixed
// order, into its own slot; the slots are then folded into their units in
// segment order on the calling thread.
// Determinism: the result is bit-identical to the serial call's whatever the
// executor, the thread count or the ranges (a max-combined custom policy,
// whose fold is element by element, runs serially).
template <class Norm = L2Norm, class ParallelFor = SerialFor>
void host_unit_partials(const Segment* segs, std::size_t n_segs, float* partials,
                        std::size_t num_units, HostNormOptions opt, ParallelFor&& pfor = ParallelFor{}) {
  const Coverage coverage = opt.coverage;
  constexpr detail::HostKernel kernel = detail::host_kernel<Norm>();
  const char* fn = "host_unit_partials";
  if (partials == nullptr) throw std::invalid_argument("gnmr: host_unit_partials: null partials");
  std::vector<double>& acc = detail::unit_scratch(num_units);
  detail::validate_segments(segs, n_segs, num_units, true, fn,
                            [&acc](std::uint32_t u) { acc[u] = 0.0; });
  for (std::size_t u = 0; u < num_units; ++u) {
    if (acc[u] >= 0.0) continue;
    if (coverage == Coverage::kEveryUnit)
      detail::throw_uncovered(fn, u, "; a rank that holds a shard of the model passes "
                                     "gnmr::Coverage::kShard");
    acc[u] = 0.0;
  }
  if (kernel == detail::HostKernel::kGenericMax) {
    // A custom max-combined policy starts from its own identity and folds
    // element by element, in segment order.
    for (std::size_t u = 0; u < num_units; ++u) acc[u] = static_cast<double>(Norm::identity());
    for (std::size_t i = 0; i < n_segs; ++i) {
      const Segment& s = segs[i];
      float m = static_cast<float>(acc[s.unit]);
      for (std::uint64_t j = 0; j < s.numel; ++j)
        m = Norm::combine(m, Norm::element(detail::load_element(s, j)));
      acc[s.unit] = static_cast<double>(m);
    }
  } else if (kernel == detail::HostKernel::kSumSquares && opt.order == HostOrder::kFast) {
    // Every segment's sum in double (fp32: gnmr/host/sumsq.hpp; bf16/fp16:
    // gnmr/host/block_sumsq.hpp), each into its own slot; then each unit's
    // in segment order, rounded once below.
    std::vector<double>& seg = detail::segment_scratch(n_segs);
    pfor(n_segs, [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) {
        const Segment& s = segs[i];
        seg[i] = detail::is_16bit(s.dtype)
                     ? detail::sumsq16_fast(static_cast<const std::uint16_t*>(s.data), s.numel,
                                            s.dtype == DType::kBF16)
                     : detail::sumsq_f32(static_cast<const float*>(s.data), s.numel);
      }
    });
    for (std::size_t i = 0; i < n_segs; ++i) acc[segs[i].unit] += seg[i];
  } else if (kernel == detail::HostKernel::kSumSquares) {
    // fp32 segments: their double sums; bf16/fp16 segments: the kernel's
    // chunk partials (gnmr/host/chunk_sumsq.hpp), each into its own slot.
    std::vector<double>& seg = detail::segment_scratch(n_segs);
    detail::ChunkScratch& cs = detail::chunk_scratch(segs, n_segs, num_units);
    pfor(n_segs, [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) {
        const Segment& s = segs[i];
        if (detail::is_16bit(s.dtype))
          detail::segment_chunks16(s, cs.cp.data() + cs.seg_off[i]);
        else
          seg[i] = detail::sumsq_f32(static_cast<const float*>(s.data), s.numel);
      }
    });
    for (std::size_t u = 0; u < num_units; ++u)
      if (!cs.mixed[u] && cs.unit_off[u + 1] > cs.unit_off[u])
        partials[u] = detail::unit_fold_chunks(cs.cp.data() + cs.unit_off[u], cs.unit_off[u + 1] - cs.unit_off[u]);
    for (std::size_t i = 0; i < n_segs; ++i) {
      const Segment& s = segs[i];
      if (!cs.mixed[s.unit]) continue;
      if (detail::is_16bit(s.dtype)) {
        const std::uint64_t k = (s.numel + detail::kDefaultNormChunk - 1) / detail::kDefaultNormChunk;
        for (std::uint64_t c = 0; c < k; ++c) acc[s.unit] += static_cast<double>(cs.cp[cs.seg_off[i] + c]);
      } else {
        acc[s.unit] += seg[i];
      }
    }
    for (std::size_t u = 0; u < num_units; ++u)
      if (cs.mixed[u] || cs.unit_off[u + 1] == cs.unit_off[u]) partials[u] = detail::to_float_rn(acc[u]);
    return;
  } else {
    // Every unit holds 0, the identity of the other partials. Each segment's
    // value: its sum (double) or its max |x| (a float, exact in double).
    std::vector<double>& seg = detail::segment_scratch(n_segs);
    pfor(n_segs, [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) {
        const Segment& s = segs[i];
        if (kernel == detail::HostKernel::kMaxAbs) {
          seg[i] = static_cast<double>(detail::maxabs_segment(s));
        } else {
          double sum = 0.0;
          for (std::uint64_t j = 0; j < s.numel; ++j)
            sum += static_cast<double>(Norm::element(detail::load_element(s, j)));
          seg[i] = sum;
        }
      }
    });
    for (std::size_t i = 0; i < n_segs; ++i) {
      double& a = acc[segs[i].unit];
      if (kernel == detail::HostKernel::kMaxAbs)
        a = static_cast<double>(math::max_nan(static_cast<float>(a), static_cast<float>(seg[i])));
      else
        a += seg[i];
    }
  }
  for (std::size_t u = 0; u < num_units; ++u) partials[u] = detail::to_float_rn(acc[u]);
}

// The same with a coverage and the default order (HostOrder::kFast).
template <class Norm = L2Norm, class ParallelFor = SerialFor>
void host_unit_partials(const Segment* segs, std::size_t n_segs, float* partials,
                        std::size_t num_units, Coverage coverage = Coverage::kEveryUnit,
                        ParallelFor&& pfor = ParallelFor{}) {
  HostNormOptions opt;
  opt.coverage = coverage;
  host_unit_partials<Norm>(segs, n_segs, partials, num_units, opt, std::forward<ParallelFor>(pfor));
}

template <class Norm = L2Norm>
void host_unit_partials(const std::vector<Segment>& segs, std::vector<float>& partials,
                        HostNormOptions opt) {
  host_unit_partials<Norm>(segs.data(), segs.size(), partials.data(), partials.size(), opt);
}

template <class Norm = L2Norm>
void host_unit_partials(const std::vector<Segment>& segs, std::vector<float>& partials,
                        Coverage coverage = Coverage::kEveryUnit) {
  host_unit_partials<Norm>(segs.data(), segs.size(), partials.data(), partials.size(), coverage);
}

template <class Norm = L2Norm>
std::vector<float> host_unit_partials(const std::vector<Segment>& segs, std::size_t num_units,
                                      Coverage coverage = Coverage::kEveryUnit) {
  std::vector<float> partials(num_units);
  host_unit_partials<Norm>(segs.data(), segs.size(), partials.data(), num_units, coverage);
  return partials;
}

// Elements per unit, for GnmrController::set_unit_numel (RmsNorm needs it).
// Validates the layout like host_unit_partials except for null data, so the
// sizes can be set up before the gradient buffers exist. The Norm parameter
// is accepted for symmetry with host_unit_partials and not used.
template <class Norm = L2Norm>
std::vector<std::uint64_t> unit_numel(const Segment* segs, std::size_t n_segs,
                                      std::size_t num_units) {
  const char* fn = "unit_numel";
  detail::validate_segments(segs, n_segs, num_units, false, fn, [](std::uint32_t) {});
  std::vector<std::uint64_t> numel(num_units, 0);
  for (std::size_t i = 0; i < n_segs; ++i) numel[segs[i].unit] += segs[i].numel;
  for (std::size_t u = 0; u < num_units; ++u)
    if (numel[u] == 0) detail::throw_uncovered(fn, u);
  return numel;
}

template <class Norm = L2Norm>
std::vector<std::uint64_t> unit_numel(const std::vector<Segment>& segs, std::size_t num_units) {
  return unit_numel<Norm>(segs.data(), segs.size(), num_units);
}

}  // namespace gnmr
