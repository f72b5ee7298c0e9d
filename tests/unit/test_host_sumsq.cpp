// The host sum of squares per dtype (gnmr/host/sumsq.hpp): the portable build
// follows the documented order (lane i mod 8, increasing i, the fixed tree),
// written here independently; the AVX2 (+F16C) builds give the portable
// build's bits on random data, subnormals, Inf and every length around the
// block size, and a NaN wherever it does; all are within rounding of a long
// double reference.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gnmr/core/half.hpp"
#include "gnmr/host/sumsq.hpp"

namespace {

std::uint64_t bits(double x) {
  std::uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// The definition, element by element.
template <class Sq>
double by_definition(const std::vector<std::uint16_t>& p, Sq sq) {
  std::vector<double> a(8, 0.0);
  for (std::size_t i = 0; i < p.size(); ++i) a[i % 8] += sq(p[i]);
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

std::vector<std::uint16_t> make(std::mt19937& rng, std::size_t n, bool bf16, int specials) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<std::uint16_t> p(n);
  for (auto& b : p) {
    float x = d(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 24) - 16);
    const unsigned r = static_cast<unsigned>(rng() % 200);
    if (specials >= 1 && r == 0) x = std::numeric_limits<float>::infinity();
    if (specials >= 1 && r == 1) x = -std::numeric_limits<float>::infinity();
    if (specials >= 1 && r == 2) x = bf16 ? 1e-40f : 3e-6f;  // bf16 / fp16 subnormal
    if (specials >= 2 && r == 3) x = std::numeric_limits<float>::quiet_NaN();
    b = bf16 ? gnmr::float_to_bf16(x) : gnmr::float_to_fp16(x);
    if (specials >= 2 && r == 4) b = bf16 ? 0xff81 : 0xfc01;  // a signalling NaN with its sign set
  }
  return p;
}

}  // namespace

TEST_CASE("host sum of squares: the documented order, and the same bits on every build",
          "[norms][host][simd]") {
  std::mt19937 rng(42);
  const bool simd_bf16 = gnmr::detail::host_has_avx2();
  const bool simd_f16 = gnmr::detail::host_has_avx2_f16c();
  if (!simd_bf16 || !simd_f16) WARN("no AVX2/F16C on this CPU: only the portable builds ran");
  std::vector<std::size_t> lengths;
  for (std::size_t n = 0; n <= 70; ++n) lengths.push_back(n);
  for (std::size_t n : {255u, 256u, 257u, 4095u, 100003u}) lengths.push_back(n);
  for (int specials = 0; specials <= 2; ++specials) {
    for (std::size_t n : lengths) {
      for (bool bf16 : {true, false}) {
        const auto p = make(rng, n, bf16, specials);
        const double portable = bf16 ? gnmr::detail::sumsq_bf16_any(p.data(), n, false)
                                     : gnmr::detail::sumsq_f16_any(p.data(), n, false);
        const double def = bf16 ? by_definition(p, gnmr::detail::sq_bf16)
                                : by_definition(p, gnmr::detail::sq_f16);
        const double fast = bf16 ? gnmr::detail::sumsq_bf16_any(p.data(), n, simd_bf16)
                                 : gnmr::detail::sumsq_f16_any(p.data(), n, simd_f16);
        INFO("n " << n << (bf16 ? " bf16" : " fp16") << " specials " << specials);
        if (std::isnan(def)) {
          CHECK(std::isnan(portable));
          CHECK(std::isnan(fast));
          continue;
        }
        CHECK(bits(portable) == bits(def));
        CHECK(bits(fast) == bits(def));
        if (specials == 0) {
          long double ref = 0.0L;
          for (std::uint16_t b : p) {
            const long double x = bf16 ? gnmr::bf16_to_float(b) : gnmr::fp16_to_float(b);
            ref += x * x;
          }
          // Positive terms summed in double: each lane's n/8 adds and the
          // tree's 3 levels each round once, so |error| <= (n/8 + 3) u ref.
          const long double u = std::ldexp(1.0L, -53);
          CHECK(std::fabs(static_cast<long double>(def) - ref) <=
                (static_cast<long double>(n) / 8 + 3) * u * ref);
        }
      }
    }
  }
}

TEST_CASE("host sum of squares: fp32 follows the same 8-lane order", "[norms][host]") {
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (std::size_t n : {1u, 7u, 8u, 9u, 1000u, 65537u}) {
    std::vector<float> p(n);
    for (auto& x : p) x = d(rng);
    std::vector<double> a(8, 0.0);
    for (std::size_t i = 0; i < n; ++i) a[i % 8] += static_cast<double>(p[i]) * static_cast<double>(p[i]);
    const double def = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    CHECK(bits(gnmr::detail::sumsq_f32(p.data(), n)) == bits(def));
  }
}
