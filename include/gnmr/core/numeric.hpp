// gnmr/core/numeric.hpp — the small numeric helpers that several layers
// share (the statistics, the host and device norm folds, the reducers), each
// defined once here so that every copy of the logic is the same copy.
//
// A leaf: it depends on gnmr/core/math.hpp alone. Every function is
// GNMR_HOST_DEVICE because the CUDA kernels run the same code as the host;
// the results are bit-identical on both sides (integer or bit arithmetic,
// and one IEEE double -> float rounding).
#pragma once

#include <cstdint>
#include <cstring>

#include "gnmr/core/math.hpp"

namespace gnmr {
namespace detail {

// A sample count that stops at 2^32 - 1 instead of wrapping to 0: a wrap
// would put a unit back in warm-up after ~4e9 accepted steps.
GNMR_HOST_DEVICE std::uint32_t saturating_inc(std::uint32_t k) {
  return k == 0xffffffffu ? k : k + 1u;
}

// Slot of the j-th oldest (j = 0 first) of the newest n samples in a ring of
// w slots whose next write goes to `head` (n <= w, head < w). Reading in
// this order makes a fold over the window a function of the samples alone,
// not of where the ring happens to start.
GNMR_HOST_DEVICE std::uint32_t ring_oldest_first(std::uint32_t head, std::uint32_t w,
                                                 std::uint32_t n, std::uint32_t j) {
  return (head + w - n + j) % w;
}

// Mean of the newest min(n, w) floats of a ring (oldest first, fp32, 0 when
// empty): the Delta-GNMR history of GnmrTrigger and CalibratedTrigger.
GNMR_HOST_DEVICE float ring_mean(const float* ring, std::uint32_t head, std::uint32_t w, std::uint32_t n) {
  if (n > w) n = w;
  float acc = 0.0f;
  for (std::uint32_t j = 0; j < n; ++j) acc = math::add(acc, ring[ring_oldest_first(head, w, n, j)]);
  return n ? math::div(acc, static_cast<float>(n)) : 0.0f;
}

// Writes x into the ring's next slot and advances head (mod w); `head % w`
// keeps the write inside the ring even for a head that is not below w.
template <class T>
GNMR_HOST_DEVICE void ring_push(T* ring, std::uint32_t& head, std::uint32_t w, T x) {
  ring[head % w] = x;
  head = (head + 1u) % w;
}

// double -> float, round to nearest even, +-Inf past the float range. A
// plain cast of an out-of-range double is undefined behaviour in C++, and
// the cut-off is where round-to-nearest would overflow: 2^128 - 2^103, the
// midpoint between FLT_MAX and 2^128 (ties go to the even side, +Inf).
GNMR_HOST_DEVICE float to_float_rn(double x) {
  const double kOverflow = 340282356779733661637539395458142568448.0;  // 2^128 - 2^103
  if (x >= kOverflow) return inf_f();
  if (x <= -kOverflow) return -inf_f();
  return static_cast<float>(x);
}

// Bits-based like gnmr::is_nan(float), so -ffast-math cannot fold it away.
GNMR_HOST_DEVICE bool is_nan_d(double x) {
  std::uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return (u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull &&
         (u & 0x000fffffffffffffull) != 0ull;
}

}  // namespace detail
}  // namespace gnmr
