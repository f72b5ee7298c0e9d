// gnmr/core/log2.hpp — log2 and exp2 built from correctly rounded float
// operations, so that a decision taken in the log domain has the same bits
// on the host and on the device.
//
// Why not log2f/exp2f: their results are not correctly rounded and differ
// between glibc, CUDA's libdevice and fast-math builds by an ulp or more,
// which is enough to flip a threshold comparison (docs/algorithm.md,
// "Determinism"). These two use only bit manipulation and the math::
// helpers (fp32 add/mul/div, round to nearest, never contracted), so every
// backend evaluates the same sequence of IEEE operations.
//
// Accuracy (tests/unit/test_calibrated.cpp checks it against the C
// library's double log2/exp2 on random and edge inputs): log2 within 3e-7
// absolute on [FLT_MIN, FLT_MAX]; exp2 within 6e-7 relative on [-126, 127].
// Determinism: pure functions of their argument's bits.
#pragma once

#include <cstdint>

#include "gnmr/core/math.hpp"

namespace gnmr {
namespace math {

// log2(x) for x > 0; x below FLT_MIN (subnormals, 0, NaN) is read as
// FLT_MIN (-126), x above FLT_MAX (+inf) as FLT_MAX (128). x = 2^e * m with
// m in [sqrt(1/2), sqrt(2)); log2(m) = (2/ln 2) atanh(t), t = (m-1)/(m+1),
// |t| <= 0.1716, from the odd series to t^11 (truncation < 2e-10).
GNMR_HOST_DEVICE float log2(float x) {
  if (!(x >= 1.17549435e-38f)) x = 1.17549435e-38f;
  if (!(x <= 3.40282347e+38f)) x = 3.40282347e+38f;
  const std::uint32_t u = detail::float_to_bits(x);
  int e = static_cast<int>((u >> 23) & 0xffu) - 127;
  float m = detail::bits_to_float((u & 0x007fffffu) | 0x3f800000u);  // [1, 2)
  if (m > 1.41421356f) {
    m = mul(m, 0.5f);  // exact
    e += 1;
  }
  const float t = div(sub(m, 1.0f), add(m, 1.0f));
  const float t2 = mul(t, t);
  float p = add(mul(t2, 1.0f / 11.0f), 1.0f / 9.0f);
  p = add(mul(p, t2), 1.0f / 7.0f);
  p = add(mul(p, t2), 1.0f / 5.0f);
  p = add(mul(p, t2), 1.0f / 3.0f);
  p = add(mul(p, t2), 1.0f);
  return add(static_cast<float>(e), mul(2.88539008f, mul(t, p)));  // 2/ln 2
}

// 2^y, y clamped to [-126, 127.99] (so the result is a normal float; NaN is
// read as -126). 2^y = 2^n * exp(f ln 2), n = floor(y), f in [0, 1), the
// exponential from its Taylor series to degree 9 (truncation < 3e-9).
GNMR_HOST_DEVICE float exp2(float y) {
  if (!(y >= -126.0f)) y = -126.0f;
  if (y > 127.99f) y = 127.99f;
  int n = static_cast<int>(y);  // toward zero, exact for |y| < 2^31
  if (static_cast<float>(n) > y) n -= 1;
  const float g = mul(sub(y, static_cast<float>(n)), 0.693147181f);
  float p = add(mul(g, 1.0f / 362880.0f), 1.0f / 40320.0f);
  p = add(mul(p, g), 1.0f / 5040.0f);
  p = add(mul(p, g), 1.0f / 720.0f);
  p = add(mul(p, g), 1.0f / 120.0f);
  p = add(mul(p, g), 1.0f / 24.0f);
  p = add(mul(p, g), 1.0f / 6.0f);
  p = add(mul(p, g), 0.5f);
  p = add(mul(p, g), 1.0f);
  p = add(mul(p, g), 1.0f);  // in [1, 2]
  // 2^n as a float (n in [-126, 127]: a normal power of two); p * 2^n is exact.
  return mul(p, detail::bits_to_float(static_cast<std::uint32_t>(n + 127) << 23));
}

}  // namespace math
}  // namespace gnmr
