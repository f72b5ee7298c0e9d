// tests/support/half_ref.hpp — independent references for the half-precision
// codecs (gnmr/core/half.hpp), shared by the codec tests (test_half.cpp)
// and the norm tests (test_norms.cpp), which need the exact value of every
// bf16/fp16 gradient element. The decoder is field arithmetic plus ldexp in
// long double and the encoder a search for the nearest pattern, so neither
// shares code with the library's bit tricks.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "gnmr/host/unit_norms.hpp"

namespace halfref {

using gnmr::DType;

inline float bits_f(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline std::uint32_t f_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// ---- Independent reference decoders (field arithmetic + ldexp) ----------
inline long double ref_decode(std::uint16_t h, DType t) {
  const bool neg = (h & 0x8000u) != 0;
  int e, m, mbits, bias, emax;
  if (t == DType::kBF16) {
    e = (h >> 7) & 0xff;
    m = h & 0x7f;
    mbits = 7;
    bias = 127;
    emax = 0xff;
  } else {
    e = (h >> 10) & 0x1f;
    m = h & 0x3ff;
    mbits = 10;
    bias = 15;
    emax = 0x1f;
  }
  long double v;
  if (e == emax)
    v = m ? std::numeric_limits<long double>::quiet_NaN() : std::numeric_limits<long double>::infinity();
  else if (e == 0)
    v = std::ldexp(static_cast<long double>(m), 1 - bias - mbits);
  else
    v = std::ldexp(static_cast<long double>((1 << mbits) + m), e - bias - mbits);
  return neg ? -v : v;
}

inline float lib_decode(std::uint16_t h, DType t) {
  return t == DType::kBF16 ? gnmr::bf16_to_float(h) : gnmr::fp16_to_float(h);
}
inline std::uint16_t lib_encode(float f, DType t) {
  return t == DType::kBF16 ? gnmr::float_to_bf16(f) : gnmr::float_to_fp16(f);
}

// Reference encoder for finite f: the nearest finite half or Inf, where Inf
// counts as the next power of two above max for rounding (IEEE overflow),
// ties to the even bit pattern.
inline std::uint16_t ref_encode(float f, DType t) {
  const std::uint16_t inf = t == DType::kBF16 ? 0x7f80u : 0x7c00u;
  const long double beyond = t == DType::kBF16 ? std::ldexp(1.0L, 128) : 65536.0L;
  const std::uint16_t sign = std::signbit(f) ? 0x8000u : 0u;
  const long double a = std::fabs(static_cast<long double>(f));
  // Largest pattern lo in [0, inf) with value <= a (magnitudes are monotone in the bits).
  std::uint32_t lo = 0, hi = inf;  // invariant: val(lo) <= a, and hi == inf or val(hi) > a
  while (hi - lo > 1) {
    const std::uint32_t mid = (lo + hi) / 2;
    if (ref_decode(static_cast<std::uint16_t>(mid), t) <= a) lo = mid; else hi = mid;
  }
  const long double vlo = ref_decode(static_cast<std::uint16_t>(lo), t);
  if (vlo == a) return static_cast<std::uint16_t>(sign | lo);
  const long double vhi = lo + 1 == inf ? beyond : ref_decode(static_cast<std::uint16_t>(lo + 1), t);
  const long double dlo = a - vlo, dhi = vhi - a;
  std::uint32_t r;
  if (dlo < dhi) r = lo;
  else if (dhi < dlo) r = lo + 1;
  else r = (lo & 1u) ? lo + 1 : lo;
  return static_cast<std::uint16_t>(sign | r);
}

inline bool same_value(float a, long double b) {
  if (std::isnan(b)) return std::isnan(a);
  return static_cast<long double>(a) == b && std::signbit(a) == std::signbit(b);
}

}  // namespace halfref
