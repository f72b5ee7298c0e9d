// gnmr/core/math.hpp — the float arithmetic every decision goes through.
//
// The helpers below pin rounding so that the host and the device reach
// bit-identical decisions from the same norms: on the device they map to the
// _rn intrinsics (which nvcc never contracts into an FMA), on the host the
// gnmr::gnmr target compiles with -ffp-contract=off. The finiteness tests
// read the bits, so -ffast-math in a user's translation unit cannot fold
// them away.
#pragma once

#include <cstdint>
#include <cstring>

#include "gnmr/config.hpp"

namespace gnmr {
namespace detail {

// The bit casts every bit-level test below and the half codecs go through.
GNMR_HOST_DEVICE float bits_to_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
GNMR_HOST_DEVICE std::uint32_t float_to_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

}  // namespace detail

GNMR_HOST_DEVICE bool is_finite(float x) { return (detail::float_to_bits(x) & 0x7f800000u) != 0x7f800000u; }
GNMR_HOST_DEVICE bool is_nan(float x) {
  const std::uint32_t u = detail::float_to_bits(x);
  return (u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0u;
}

GNMR_HOST_DEVICE float inf_f() { return detail::bits_to_float(0x7f800000u); }
GNMR_HOST_DEVICE float nan_f() { return detail::bits_to_float(0x7fc00000u); }

// Correctly rounded fp32 arithmetic for everything that feeds a decision.
namespace math {
#if defined(__CUDA_ARCH__)
GNMR_HOST_DEVICE float add(float a, float b) { return __fadd_rn(a, b); }
GNMR_HOST_DEVICE float sub(float a, float b) { return __fsub_rn(a, b); }
GNMR_HOST_DEVICE float mul(float a, float b) { return __fmul_rn(a, b); }
GNMR_HOST_DEVICE float div(float a, float b) { return __fdiv_rn(a, b); }
GNMR_HOST_DEVICE float sqrt(float a) { return __fsqrt_rn(a); }
GNMR_HOST_DEVICE double dadd(double a, double b) { return __dadd_rn(a, b); }
GNMR_HOST_DEVICE double dmul(double a, double b) { return __dmul_rn(a, b); }
GNMR_HOST_DEVICE double ddiv(double a, double b) { return __ddiv_rn(a, b); }
#else
GNMR_HOST_DEVICE float add(float a, float b) { return a + b; }
GNMR_HOST_DEVICE float sub(float a, float b) { return a - b; }
GNMR_HOST_DEVICE float mul(float a, float b) { return a * b; }
GNMR_HOST_DEVICE float div(float a, float b) { return a / b; }
GNMR_HOST_DEVICE float sqrt(float a) { return __builtin_sqrtf(a); }
GNMR_HOST_DEVICE double dadd(double a, double b) { return a + b; }
GNMR_HOST_DEVICE double dmul(double a, double b) { return a * b; }
GNMR_HOST_DEVICE double ddiv(double a, double b) { return a / b; }
#endif
// max/min that propagate NaN (std::max would drop it depending on order).
GNMR_HOST_DEVICE float max_nan(float a, float b) {
  return is_nan(a) ? a : (is_nan(b) ? b : (a > b ? a : b));
}
GNMR_HOST_DEVICE float min(float a, float b) { return b < a ? b : a; }
GNMR_HOST_DEVICE float max(float a, float b) { return b > a ? b : a; }
}  // namespace math

}  // namespace gnmr
