// demo/formats.hpp — the low-precision number formats gnmr-demo emulates,
// on raw float arrays: FP8 E4M3 and E5M2, FP4 E2M1, per-tensor scaling and
// NVFP4-like 16-element block scaling. No torch here: the CPU path of the
// quantized linear layer (qlinear.hpp) runs these loops directly, and
// tests/demo/test_quant.cpp holds them (and the torch-op path used on CUDA,
// quant.hpp) against a double-precision reference that enumerates each
// format's grid.
//
// Rounding is to nearest, ties to even; magnitudes at or above the format's
// largest finite value saturate to it (E4M3 and E2M1 have no infinity, and
// Transformer Engine clips out-of-range E5M2 values too); below the smallest
// normal the spacing is that of the subnormals. NaN and +-Inf pass through
// unchanged, so a fault upstream stays visible downstream.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace demo {

enum class Fmt : std::uint8_t { kNone, kE4M3, kE5M2, kE2M1 };

struct FmtInfo {
  int mant;   // explicit mantissa bits
  int emin;   // exponent of the smallest normal
  float max;  // largest finite value
};

inline FmtInfo fmt_info(Fmt f) {
  switch (f) {
    case Fmt::kE4M3: return {3, -6, 448.0f};
    case Fmt::kE5M2: return {2, -14, 57344.0f};
    case Fmt::kE2M1: return {1, 0, 6.0f};
    case Fmt::kNone: break;
  }
  throw std::invalid_argument("fmt_info: no grid for format 'none'");
}

inline const char* fmt_name(Fmt f) {
  switch (f) {
    case Fmt::kE4M3: return "e4m3";
    case Fmt::kE5M2: return "e5m2";
    case Fmt::kE2M1: return "e2m1";
    case Fmt::kNone: break;
  }
  return "none";
}

// The enumerator of `all` whose name(e) is s; the error lists the names.
template <class E, std::size_t N>
E parse_named(const std::string& s, const E (&all)[N], const char* (*name)(E), const char* what) {
  std::string names;
  for (E e : all) {
    if (s == name(e)) return e;
    names += (names.empty() ? "" : ", ") + std::string(name(e));
  }
  throw std::invalid_argument(std::string("unknown ") + what + " '" + s + "' (" + names + ")");
}

inline Fmt parse_fmt(const std::string& s) {
  static const Fmt all[] = {Fmt::kNone, Fmt::kE4M3, Fmt::kE5M2, Fmt::kE2M1};
  return parse_named(s, all, fmt_name, "number format");
}

// 2^e for e in [-126, 127], exactly, from its bits (no pow/exp2: their last
// bit is the library's business).
inline float pow2f(int e) {
  const std::uint32_t bits = static_cast<std::uint32_t>(e + 127) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// The grid value nearest to t (ties to even), saturating at +-max.
inline float round_to_grid(float t, const FmtInfo& f) {
  if (!std::isfinite(t)) return t;
  const float a = std::fabs(t);
  if (a >= f.max) return std::copysign(f.max, t);
  std::uint32_t bits;
  std::memcpy(&bits, &a, sizeof bits);
  int e = static_cast<int>((bits >> 23) & 0xffu) - 127;  // floor(log2 a) for a normal float
  if (e < f.emin) e = f.emin;                              // subnormal spacing below 2^emin
  const int s = e - f.mant;                                // log2 of the grid spacing
  const float y = a * pow2f(-s);                           // exact; y < 2^(mant+1)
  // Adding and removing 2^23 rounds y to an integer, ties to even (|y| < 2^22).
  const float r = (y + 8388608.0f) - 8388608.0f;
  return std::copysign(r * pow2f(s), t);
}

// max |x| over the finite elements (0 if none): an amax that a NaN cannot
// poison, as Transformer Engine keeps the previous scale on a bad amax.
inline float finite_amax(const float* x, std::size_t n) {
  float m = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (a > m && a <= FLT_MAX) m = a;
  }
  return m;
}

// The per-tensor scale that maps amax to the format's max (Transformer
// Engine: fp8_max / amax, margin 0). A zero amax (an all-zero tensor) gives
// 1; a scale that would overflow is FLT_MAX.
inline float scale_for(float amax, float fmt_max) {
  if (!(amax > 0.0f) || !(amax <= FLT_MAX)) return 1.0f;
  const float s = fmt_max / amax;
  return s <= FLT_MAX ? s : FLT_MAX;
}

// y = q(x * scale) / scale, elementwise; y may alias x.
inline void qdq_scaled(const float* x, float* y, std::size_t n, float scale, const FmtInfo& f) {
  for (std::size_t i = 0; i < n; ++i) y[i] = round_to_grid(x[i] * scale, f) / scale;
}

constexpr int kNvfp4Block = 16;

// NVFP4-like two-level scaling of a row-major [rows, cols] array, blocks of
// 16 along each row (the last block of a row may be shorter): a per-tensor
// scale g = amax / (6 * 448), then per block an E4M3 scale
// s = e4m3(block_amax / 6 / g); elements become e2m1(x / (s g)) * (s g).
// A block whose scale rounds to 0 flushes to 0 (NaN/Inf still pass through).
inline void qdq_nvfp4(const float* x, float* y, std::size_t rows, std::size_t cols) {
  const FmtInfo e4m3 = fmt_info(Fmt::kE4M3), e2m1 = fmt_info(Fmt::kE2M1);
  const float g = finite_amax(x, rows * cols) / (e2m1.max * e4m3.max);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c0 = 0; c0 < cols; c0 += kNvfp4Block) {
      const std::size_t len = cols - c0 < kNvfp4Block ? cols - c0 : kNvfp4Block;
      const float* xb = x + r * cols + c0;
      float* yb = y + r * cols + c0;
      const float bs = g > 0.0f ? round_to_grid(finite_amax(xb, len) / e2m1.max / g, e4m3) : 0.0f;
      const float sc = bs * g;
      for (std::size_t i = 0; i < len; ++i) {
        if (!std::isfinite(xb[i])) yb[i] = xb[i];
        else yb[i] = sc > 0.0f ? round_to_grid(xb[i] / sc, e2m1) * sc : 0.0f;
      }
    }
  }
}

}  // namespace demo
