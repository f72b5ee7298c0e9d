// Tests of gnmr/core/numeric.hpp, the leaf helpers that the statistics,
// the norm folds and the reducers share: the saturating count, the ring
// order, the double -> float rounding at the edge of the float range and the
// double NaN test. Expected values are worked out by hand (bit patterns,
// powers of two) or drawn from an independent model (std::deque, std::isnan).
#include "gnmr/core/numeric.hpp"

#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <random>
#include <vector>

using gnmr::detail::is_nan_d;
using gnmr::detail::ring_oldest_first;
using gnmr::detail::ring_push;
using gnmr::detail::saturating_inc;
using gnmr::detail::to_float_rn;

namespace {
double bits_d(std::uint64_t u) {
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
}
std::uint32_t bits_f(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
}  // namespace

TEST_CASE("saturating_inc counts up and stops at 2^32 - 1", "[numeric]") {
  CHECK(saturating_inc(0u) == 1u);
  CHECK(saturating_inc(41u) == 42u);
  CHECK(saturating_inc(0xfffffffeu) == 0xffffffffu);
  CHECK(saturating_inc(0xffffffffu) == 0xffffffffu);
}

TEST_CASE("ring_push and ring_oldest_first replay a sliding window", "[numeric]") {
  std::mt19937 rng(14);
  for (std::uint32_t w = 1; w <= 9; ++w) {
    std::vector<float> ring(w, -1.0f);
    std::uint32_t head = 0;
    std::deque<float> model;  // the last w pushes, oldest first
    for (int step = 0; step < 40; ++step) {
      const float x = static_cast<float>(rng() % 1000);
      ring_push(ring.data(), head, w, x);
      model.push_back(x);
      if (model.size() > w) model.pop_front();
      REQUIRE(head < w);
      // Every suffix of the window, read oldest first, is the model's suffix.
      for (std::uint32_t n = 0; n <= model.size(); ++n)
        for (std::uint32_t j = 0; j < n; ++j) {
          const std::uint32_t slot = ring_oldest_first(head, w, n, j);
          REQUIRE(slot < w);
          REQUIRE(ring[slot] == model[model.size() - n + j]);
        }
    }
  }
}

TEST_CASE("to_float_rn rounds to nearest and overflows exactly at 2^128 - 2^103",
          "[numeric]") {
  const double cut = std::ldexp(1.0, 128) - std::ldexp(1.0, 103);
  const double below = std::nextafter(cut, 0.0);
  CHECK(std::isinf(to_float_rn(cut)));
  CHECK(to_float_rn(cut) > 0.0f);
  CHECK(to_float_rn(-cut) < 0.0f);
  CHECK(std::isinf(to_float_rn(-cut)));
  CHECK(std::isinf(to_float_rn(1e300)));
  // Just below the midpoint between FLT_MAX and 2^128 rounds down to FLT_MAX.
  CHECK(bits_f(to_float_rn(below)) == 0x7f7fffffu);
  CHECK(bits_f(to_float_rn(-below)) == 0xff7fffffu);
  CHECK(to_float_rn(static_cast<double>(FLT_MAX)) == FLT_MAX);
  // 1 + 2^-24 is the tie between 1 and 1 + 2^-23: even wins (1).
  CHECK(to_float_rn(1.0 + std::ldexp(1.0, -24)) == 1.0f);
  CHECK(to_float_rn(1.0 + 3 * std::ldexp(1.0, -24)) == 1.0f + 2 * FLT_EPSILON);
  CHECK(std::isinf(to_float_rn(std::numeric_limits<double>::infinity())));
  CHECK(std::isnan(to_float_rn(std::numeric_limits<double>::quiet_NaN())));
}

TEST_CASE("is_nan_d tells NaN from Inf and finite doubles", "[numeric]") {
  CHECK(is_nan_d(std::numeric_limits<double>::quiet_NaN()));
  CHECK(is_nan_d(bits_d(0x7ff0000000000001ull)));  // smallest signalling NaN payload
  CHECK(is_nan_d(bits_d(0xfff8000000000000ull)));  // negative quiet NaN
  CHECK_FALSE(is_nan_d(std::numeric_limits<double>::infinity()));
  CHECK_FALSE(is_nan_d(-std::numeric_limits<double>::infinity()));
  CHECK_FALSE(is_nan_d(0.0));
  CHECK_FALSE(is_nan_d(DBL_MAX));
  CHECK_FALSE(is_nan_d(bits_d(0x0000000000000001ull)));  // smallest subnormal
  std::mt19937_64 rng(7);
  for (int i = 0; i < 10000; ++i) {
    const double d = bits_d(rng());
    REQUIRE(is_nan_d(d) == std::isnan(d));
  }
}
