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
// Precision: sums of squares are accumulated in double within a segment
// (in lanes, in the order gnmr/host/sumsq.hpp defines, whichever instruction
// set runs it) and combined per unit in double, in segment order, then
// rounded to float once. The result is therefore deterministic for a given layout,
// within about one fp32 ulp of the exact value, but not bit-identical to a
// GPU reduction (different summation tree). A unit whose exact sum of squares
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
#include <vector>

#include "gnmr/core/dtype.hpp"
#include "gnmr/core/half.hpp"
#include "gnmr/core/math.hpp"
#include "gnmr/core/numeric.hpp"
#include "gnmr/core/parallel.hpp"
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

inline double sumsq_segment(const Segment& s) {
  switch (s.dtype) {
    case DType::kF32: return sumsq_f32(static_cast<const float*>(s.data), s.numel);
    case DType::kBF16: return sumsq_bf16_any(static_cast<const std::uint16_t*>(s.data), s.numel);
    case DType::kF16: return sumsq_f16_any(static_cast<const std::uint16_t*>(s.data), s.numel);
  }
  return static_cast<double>(nan_f());
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

}  // namespace detail

// Whether every unit must own a segment. A whole model's layout must (a unit
// without gradient has no meaningful norm); one rank's shard of a sharded
// model need not: a rank that holds none of a unit contributes the partial's
// identity (0), and the Reducer combines the ranks.
enum class Coverage { kEveryUnit, kShard };

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
                        std::size_t num_units, Coverage coverage = Coverage::kEveryUnit,
                        ParallelFor&& pfor = ParallelFor{}) {
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
  } else {
    // Every unit holds 0, the identity of the other partials. Each segment's
    // value: its sum (double) or its max |x| (a float, exact in double).
    std::vector<double>& seg = detail::segment_scratch(n_segs);
    pfor(n_segs, [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) {
        const Segment& s = segs[i];
        if (kernel == detail::HostKernel::kSumSquares) {
          seg[i] = detail::sumsq_segment(s);
        } else if (kernel == detail::HostKernel::kMaxAbs) {
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
