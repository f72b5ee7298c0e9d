// tests/support/sumsq16_values.hpp — bf16/fp16 test values for the host's
// sums of squares in both orders (tests/unit/test_host_block_sumsq.cpp,
// tests/unit/test_host_chunk_sumsq.cpp): the codecs, random values over
// many binades (so fp32 sums round) with optional subnormals, and the exact
// sum of their squares.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "gnmr/core/half.hpp"

namespace sumsq16 {

inline std::uint16_t enc(float v, bool bf) { return bf ? gnmr::float_to_bf16(v) : gnmr::float_to_fp16(v); }
inline float dec(std::uint16_t b, bool bf) { return bf ? gnmr::bf16_to_float(b) : gnmr::fp16_to_float(b); }

// n values spanning many binades; with `special`, the smallest subnormal at
// n/3 and a negative subnormal at n/2 (n > 10).
inline std::vector<std::uint16_t> random_values(std::mt19937_64& rng, std::size_t n, bool bf, bool special = false) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> e(bf ? -30 : -12, bf ? 20 : 10);
  std::vector<std::uint16_t> v(n);
  for (auto& x : v) x = enc(std::ldexp(u(rng), e(rng)), bf);
  if (special && n > 10) {
    v[n / 3] = 0x0001;                // the smallest subnormal
    v[n / 2] = bf ? 0x8040 : 0x8200;  // a negative subnormal
  }
  return v;
}

// The exact sum of squares to double precision: a 16-bit value's square is
// exact in double, and Fast2Sum carries what each addition drops (the terms
// are non-negative, so the running sum dominates after the first few).
inline double exact_sumsq(const std::vector<std::uint16_t>& v, bool bf) {
  double s = 0, comp = 0;
  for (std::uint16_t b : v) {
    const double x = static_cast<double>(dec(b, bf));
    const double y = x * x;
    const double t = s + y;
    comp += (s - t) + y;
    s = t;
  }
  return s + comp;
}

}  // namespace sumsq16
