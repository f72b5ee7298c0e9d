// examples/fake_quant.hpp — FP8 E4M3 and FP4 E2M1 quantize-dequantize with a
// per-tensor scale, and the output of a linear layer that uses them unless
// its gnmr unit is promoted. Shared by the host example
// (promote_fake_quant.cpp), the CUDA kernel (promote_fake_quant_cuda.cu) and
// the unit tests (tests/unit/test_examples_logic.cpp): every function is
// GNMR_HOST_DEVICE and the arithmetic is exact or goes through gnmr::math, so
// the kernel and its CPU reference give the same bits.
//
// The formats, as the OCP 8-bit / MX element types define them:
//   E4M3  3 mantissa bits, exponent bias 7: smallest normal 2^-6,
//         subnormals down to 2^-9, largest 448 (1.75 * 2^8); no infinities
//         ("FN"), so anything beyond 448, +-Inf included, saturates to
//         +-448 (what the hardware's satfinite conversion does); NaN stays NaN.
//   E2M1  1 mantissa bit, exponent bias 1: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and
//         their negatives; beyond 6 saturates.
// Rounding is to nearest, ties to the even code (mantissa LSB 0): 0.25 -> 0,
// 0.75 -> 1, 2.5 -> 2, 5 -> 4 in E2M1.
//
// Per-tensor scaling is "current" (just in time): the scale maps the
// tensor's own amax onto the format's largest value. A recipe with delayed
// scaling (an amax history) must keep recording the amax while the unit is
// promoted, so that its scale is fresh when the unit drops back
// (docs/algorithm.md, Precision promotion); here the amax is taken every
// step either way.
#pragma once

#include <cstdint>

#include "gnmr/core/half.hpp"
#include "gnmr/core/math.hpp"

namespace fq {

// A low-precision element format: mantissa bits, exponent of its smallest
// normal, largest finite magnitude.
struct Format {
  int mant_bits;
  int emin;
  float max;
};
GNMR_HOST_DEVICE Format e4m3() { return Format{3, -6, 448.0f}; }
GNMR_HOST_DEVICE Format e2m1() { return Format{1, 0, 6.0f}; }
inline const char* format_name(const Format& f) { return f.mant_bits == 3 ? "FP8 E4M3" : "FP4 E2M1"; }

// 2^k for k in [-126, 127], exactly.
GNMR_HOST_DEVICE float pow2(int k) {
  return gnmr::detail::bits_to_float(static_cast<std::uint32_t>(k + 127) << 23);
}

// Round v >= 0 (v < 2^23) to an integer, ties to even. Written out rather
// than rint(), so that it depends on no rounding mode and is the same on
// the host and the device.
GNMR_HOST_DEVICE float round_half_even(float v) {
  const std::uint32_t i = static_cast<std::uint32_t>(v);  // truncation, v >= 0
  const float frac = gnmr::math::sub(v, static_cast<float>(i));  // exact
  const bool up = frac > 0.5f || (frac == 0.5f && (i & 1u) != 0u);
  return static_cast<float>(i + (up ? 1u : 0u));
}

// x (already divided by the tensor's scale) to the nearest value of f.
// The sign is taken off and put back on the bits, so -0 stays -0.
GNMR_HOST_DEVICE float quantize(float x, const Format& f) {
  if (gnmr::is_nan(x)) return x;
  const std::uint32_t sign = gnmr::detail::float_to_bits(x) & 0x80000000u;
  const std::uint32_t abits = gnmr::detail::float_to_bits(x) ^ sign;
  const float a = gnmr::detail::bits_to_float(abits);
  float q;
  if (a >= f.max) {
    q = f.max;
  } else {
    // The spacing of f's values around a is 2^(e - mant_bits), e = the
    // binade of a, never below the smallest normal's (the subnormals share
    // its spacing). a / spacing and the product back are exact (powers of
    // two), and rounding up from just below max lands on max at most.
    int e = static_cast<int>(abits >> 23) - 127;
    if (e < f.emin) e = f.emin;
    const int k = e - f.mant_bits;
    q = gnmr::math::mul(round_half_even(gnmr::math::mul(a, pow2(-k))), pow2(k));
  }
  return gnmr::detail::bits_to_float(gnmr::detail::float_to_bits(q) | sign);
}

// The scale that maps amax onto f's largest value. An all-zero or
// non-finite amax keeps 1 (nothing to scale; a NaN stays in the data).
GNMR_HOST_DEVICE float tensor_scale(float amax, const Format& f) {
  if (!(amax > 0.0f) || !gnmr::is_finite(amax)) return 1.0f;
  return gnmr::math::div(amax, f.max);
}

GNMR_HOST_DEVICE float fake_quant(float x, float scale, const Format& f) {
  return gnmr::math::mul(quantize(gnmr::math::div(x, scale), f), scale);
}

// max |x| over n values (NaN propagates).
GNMR_HOST_DEVICE float amax(const float* x, std::uint32_t n) {
  float m = 0.0f;
  for (std::uint32_t i = 0; i < n; ++i) m = gnmr::math::max_nan(m, x[i] < 0.0f ? -x[i] : x[i]);
  return m;
}

// One output of a linear layer, y_o = sum_i W[o][i] x[i] + b[o], summed in
// index order. Low precision (promoted == false): W and x enter as their
// fake-quantized values (per-tensor scales w_scale, x_scale) and the
// accumulation stays fp32, as an FP8/FP4 GEMM accumulates; the bias is
// never quantized. Promoted: W and x as they are.
GNMR_HOST_DEVICE float linear_out(const float* w_row, const float* x, std::uint32_t in, float bias,
                                  bool promoted, const Format& f, float w_scale, float x_scale) {
  float acc = 0.0f;
  for (std::uint32_t i = 0; i < in; ++i) {
    const float w = promoted ? w_row[i] : fake_quant(w_row[i], w_scale, f);
    const float v = promoted ? x[i] : fake_quant(x[i], x_scale, f);
    acc = gnmr::math::add(acc, gnmr::math::mul(w, v));
  }
  return gnmr::math::add(acc, bias);
}

}  // namespace fq
