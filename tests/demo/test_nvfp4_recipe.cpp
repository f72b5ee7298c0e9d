// tests/demo/test_nvfp4_recipe.cpp — gnmr-demo's emulation of NVIDIA's
// NVFP4 training recipe (demo/nvfp4_recipe.hpp) against direct references:
// the 16x16 weight blocks element by element in double precision, the
// transposition property the recipe needs, stochastic rounding (its two
// neighbours, its probability, its mean over many draws, its
// reproducibility), and the Hadamard transform as a 16x16 matrix product in
// double precision. No torch here (a fast build); the quantized linear
// layer's three GEMMs under --format nvfp4-recipe are in test_quant.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "nvfp4_recipe.hpp"

// As in test_quant.cpp (which needs it for c10's CHECK): Catch's macros by
// their prefixed names.
#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

namespace {

const double kE2M1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};

// E2M1 round to nearest, ties to the even code, saturating: by enumeration.
double ref_e2m1(double t) {
  const double a = std::fabs(t);
  if (a >= 6) return std::copysign(6.0, t);
  int k = 0;
  while (kE2M1[k + 1] <= a) ++k;
  const double dl = a - kE2M1[k], dh = kE2M1[k + 1] - a;
  const bool up = dh < dl || (dh == dl && (k + 1) % 2 == 0);
  return std::copysign(up ? kE2M1[k + 1] : kE2M1[k], t);
}
// E4M3 (no NaN code) nearest, ties to even, saturating at 448.
double ref_e4m3(double t) {
  std::vector<double> g;
  for (int k = 0; k < 8; ++k) g.push_back(std::ldexp(k, -9));
  for (int e = -6; e <= 8; ++e)
    for (int m = 0; m < 8; ++m) {
      const double v = std::ldexp(1.0 + m / 8.0, e);
      if (v <= 448) g.push_back(v);
    }
  std::sort(g.begin(), g.end());
  if (t >= 448) return 448;
  const auto hi = std::upper_bound(g.begin(), g.end(), t);
  const auto lo = hi - 1;
  const double dl = t - *lo, dh = *hi - t;
  return (dh < dl || (dh == dl && (hi - g.begin()) % 2 == 0)) ? *hi : *lo;
}

std::vector<float> randn(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = nd(rng) * std::exp2(static_cast<float>(i % 5) - 2.0f);
  return v;
}

bool same_bits(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::memcmp(&a, &b, sizeof a) == 0;
}

}  // namespace

CATCH_TEST_CASE("16x16 weight blocks: the reference's values, and q2d(W)^T == q2d(W^T)", "[demo][nvfp4]") {
  const std::size_t rows = 40, cols = 35;  // edge blocks of 8 rows and 3 columns
  std::vector<float> w = randn(rows * cols, 3);
  w[7] = NAN;
  for (std::size_t r = 16; r < 32; ++r)
    for (std::size_t c = 0; c < 16; ++c) w[r * cols + c] *= 1e-14f;  // a block whose scale rounds to 0
  std::vector<float> y(w.size(), -7.0f);
  demo::qdq_nvfp4_2d(w.data(), y.data(), rows, cols);
  float amax = 0;
  for (float v : w)
    if (std::isfinite(v)) amax = std::max(amax, std::fabs(v));
  const float g = amax / (6.0f * 448.0f);
  std::size_t bad = 0;
  for (std::size_t r0 = 0; r0 < rows; r0 += 16)
    for (std::size_t c0 = 0; c0 < cols; c0 += 16) {
      float bm = 0;
      for (std::size_t r = r0; r < std::min(rows, r0 + 16); ++r)
        for (std::size_t c = c0; c < std::min(cols, c0 + 16); ++c)
          if (std::isfinite(w[r * cols + c])) bm = std::max(bm, std::fabs(w[r * cols + c]));
      const float sc = static_cast<float>(ref_e4m3(static_cast<double>(bm / 6.0f / g))) * g;
      for (std::size_t r = r0; r < std::min(rows, r0 + 16); ++r)
        for (std::size_t c = c0; c < std::min(cols, c0 + 16); ++c) {
          const float v = w[r * cols + c];
          const float want = !std::isfinite(v) ? v : sc > 0 ? static_cast<float>(ref_e2m1(v / sc)) * sc : 0.0f;
          bad += !same_bits(y[r * cols + c], want);
        }
    }
  CATCH_CHECK(bad == 0);
  CATCH_CHECK(std::isnan(y[7]));
  CATCH_CHECK(y[20 * cols + 3] == 0.0f);
  // Transposed: the same values.
  std::vector<float> wt(w.size()), yt(w.size());
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) wt[c * rows + r] = w[r * cols + c];
  demo::qdq_nvfp4_2d(wt.data(), yt.data(), cols, rows);
  std::size_t diff = 0;
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) diff += !same_bits(yt[c * rows + r], y[r * cols + c]);
  CATCH_CHECK(diff == 0);
}

CATCH_TEST_CASE("stochastic rounding: neighbours, probability, mean, reproducibility", "[demo][nvfp4]") {
  // One value, exact probabilities: u below p goes up.
  CATCH_CHECK(demo::e2m1_round_sr(2.25f, 0.24f) == 3.0f);   // p = 0.25
  CATCH_CHECK(demo::e2m1_round_sr(2.25f, 0.25f) == 2.0f);
  CATCH_CHECK(demo::e2m1_round_sr(-0.2f, 0.0f) == -0.5f);   // p = 0.4, the sign kept
  CATCH_CHECK(demo::e2m1_round_sr(-0.2f, 0.5f) == -0.0f);
  CATCH_CHECK(demo::e2m1_round_sr(4.0f, 0.0f) == 4.0f);     // on the grid: p = 0
  CATCH_CHECK(demo::e2m1_round_sr(7.5f, 0.0f) == 6.0f);     // saturates
  CATCH_CHECK(std::isnan(demo::e2m1_round_sr(NAN, 0.3f)));
  CATCH_CHECK(std::isinf(demo::e2m1_round_sr(-INFINITY, 0.3f)));
  // Each element lands on one of its two grid neighbours (in its block's
  // scale), and the mean over many keys is the value (unbiased): within 5
  // standard errors, the spread bounded by the neighbours' gap. (A value
  // whose block scale rounded down can sit beyond 6 in its block: it
  // saturates, as the format does, and is left out of the mean.)
  const std::size_t rows = 4, cols = 32, draws = 4000;
  const std::vector<float> x = randn(rows * cols, 9);
  std::vector<double> sc(x.size()), lo(x.size()), hi(x.size()), mean(x.size(), 0.0);
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float g = amax / (6.0f * 448.0f);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t b0 = i / 16 * 16;
    float bm = 0;
    for (std::size_t j = b0; j < b0 + 16; ++j) bm = std::max(bm, std::fabs(x[j]));
    sc[i] = static_cast<float>(ref_e4m3(static_cast<double>(bm / 6.0f / g))) * g;
    const double a = std::fabs(x[i] / static_cast<float>(sc[i]));
    int k = 0;
    while (k < 6 && kE2M1[k + 1] <= a) ++k;
    lo[i] = a >= 6 ? 6 : kE2M1[k];
    hi[i] = a >= 6 ? 6 : kE2M1[k + 1];
  }
  std::vector<float> y(x.size());
  std::size_t off_grid = 0;
  for (std::size_t k = 0; k < draws; ++k) {
    demo::qdq_nvfp4_sr(x.data(), y.data(), rows, cols, demo::sr_key(1, static_cast<std::int64_t>(k), 0, 0));
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double m = std::fabs(y[i]) / sc[i];  // y = q * sc rounded once to fp32
      off_grid += (std::fabs(m - lo[i]) > 1e-6 * hi[i] && std::fabs(m - hi[i]) > 1e-6 * hi[i]) || (y[i] != 0 && std::signbit(y[i]) != std::signbit(x[i]));
      mean[i] += y[i] / static_cast<double>(draws);
    }
  }
  std::size_t biased = 0, saturated = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (lo[i] == 6) {
      ++saturated;
      continue;
    }
    const double half_gap = (hi[i] - lo[i]) * sc[i] / 2.0;
    biased += std::fabs(mean[i] - x[i]) > 5.0 * half_gap / std::sqrt(static_cast<double>(draws)) + 1e-9;
  }
  CATCH_CHECK(off_grid == 0);
  CATCH_CHECK(biased == 0);
  CATCH_CHECK(saturated < x.size() / 8);
  // Reproducible from its key, different across steps, operators, operands.
  std::vector<float> a(x.size()), b(x.size());
  demo::qdq_nvfp4_sr(x.data(), a.data(), rows, cols, demo::sr_key(5, 10, 2, 1));
  demo::qdq_nvfp4_sr(x.data(), b.data(), rows, cols, demo::sr_key(5, 10, 2, 1));
  CATCH_CHECK(a == b);
  for (auto key : {demo::sr_key(5, 11, 2, 1), demo::sr_key(5, 10, 3, 1), demo::sr_key(5, 10, 2, 0),
                   demo::sr_key(6, 10, 2, 1)}) {
    demo::qdq_nvfp4_sr(x.data(), b.data(), rows, cols, key);
    CATCH_CHECK(a != b);
  }
}

CATCH_TEST_CASE("the random Hadamard transform is diag(s) H / 4 and keeps a product", "[demo][nvfp4]") {
  float s[16];
  demo::rht_signs(77, s);
  int neg = 0;
  for (float v : s) neg += v < 0;
  CATCH_CHECK(neg > 0);
  CATCH_CHECK(neg < 16);
  const std::size_t rows = 3, cols = 37;  // two full blocks and a tail of 5
  std::vector<float> x = randn(rows * cols, 4), y = x;
  demo::rht16_rows(y.data(), rows, cols, s);
  const auto H = [](int i, int j) { return (__builtin_popcount(i & j) % 2) ? -1.0 : 1.0; };
  double err = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c0 = 0; c0 + 16 <= cols; c0 += 16)
      for (int j = 0; j < 16; ++j) {
        double want = 0;
        for (int i = 0; i < 16; ++i) want += static_cast<double>(x[r * cols + c0 + i]) * s[i] * H(i, j) / 4.0;
        err = std::max(err, std::fabs(want - y[r * cols + c0 + j]) / (1.0 + std::fabs(want)));
      }
    for (std::size_t c = 32; c < cols; ++c) CATCH_CHECK(y[r * cols + c] == x[r * cols + c]);  // the tail
  }
  CATCH_CHECK(err < 1e-6);
  // Two operands transformed alike along their contraction keep their product.
  std::vector<float> z = randn(rows * cols, 5), zt = z;
  demo::rht16_rows(zt.data(), rows, cols, s);
  for (std::size_t a = 0; a < rows; ++a)
    for (std::size_t b = 0; b < rows; ++b) {
      double p = 0, q = 0;
      for (std::size_t c = 0; c < cols; ++c) {
        p += static_cast<double>(x[a * cols + c]) * z[b * cols + c];
        q += static_cast<double>(y[a * cols + c]) * zt[b * cols + c];
      }
      CATCH_CHECK(std::fabs(p - q) < 1e-5 * (1.0 + std::fabs(p)));
    }
}

CATCH_TEST_CASE("stochastic rounding's variance is that of its draws", "[demo][nvfp4]") {
  // Hand cases: p (1 - p) (hi - lo)^2.
  CATCH_CHECK(demo::e2m1_sr_variance(2.25f) == 0.1875f);  // 2..3, p = 1/4
  CATCH_CHECK(demo::e2m1_sr_variance(-0.25f) == 0.0625f); // 0..0.5, p = 1/2
  CATCH_CHECK(demo::e2m1_sr_variance(5.0f) == 1.0f);      // 4..6, p = 1/2
  CATCH_CHECK(demo::e2m1_sr_variance(4.0f) == 0.0f);      // on the grid
  CATCH_CHECK(demo::e2m1_sr_variance(7.0f) == 0.0f);      // saturated: deterministic
  CATCH_CHECK(std::isnan(demo::e2m1_sr_variance(NAN)));
  CATCH_CHECK(std::isnan(demo::e2m1_sr_variance(INFINITY)));
  // Against the rounding itself: the exact second moment over every draw u
  // (a multiple of 2^-24, up iff u < p), in double precision.
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> ud(-6.5f, 6.5f);
  for (int i = 0; i < 2000; ++i) {
    const float t = ud(rng);
    const float a = std::fabs(t);
    int k = 0;
    while (k < 6 && kE2M1[k + 1] <= a) ++k;
    double want = 0.0;
    if (a < 6) {
      const double up = std::ceil(static_cast<double>((a - static_cast<float>(kE2M1[k])) /
                                                      static_cast<float>(kE2M1[k + 1] - kE2M1[k])) * 16777216.0) /
                        16777216.0;  // the share of draws that round up
      const double lo = demo::e2m1_round_sr(t, 0.999999f), hi = demo::e2m1_round_sr(t, 0.0f);
      const double mean = up * hi + (1 - up) * lo;
      want = up * (hi - mean) * (hi - mean) + (1 - up) * (lo - mean) * (lo - mean);
    }
    CATCH_CHECK(std::fabs(demo::e2m1_sr_variance(t) - want) <= 1e-6 * (1.0 + want));
  }
}

CATCH_TEST_CASE("the rounding's per-element variance, and the noise it puts into a product", "[demo][nvfp4]") {
  // Block scales far from 1 both ways, so that a scale's power is checked.
  for (const float scale : {1e-3f, 40.0f}) {
    CATCH_INFO("scale " << scale);
    const std::size_t n = 6, k = 5, m = 48;  // A [n, m] rounded stochastically, B [k, m]
    std::vector<float> a = randn(n * m, 11), b = randn(k * m, 12);
    for (float& v : a) v *= scale;
    a[7] = 0.0f;
    std::vector<float> ya(a.size()), yb(a.size()), var(a.size(), -1.0f);
    const std::uint64_t key = demo::sr_key(2, 3, 4, 1);
    demo::qdq_nvfp4_sr(a.data(), ya.data(), n, m, key);
    demo::qdq_nvfp4_sr(a.data(), yb.data(), n, m, key, var.data());
    CATCH_CHECK(ya == yb);  // asking for the variance changes no bit
    for (float v : var) CATCH_CHECK(v >= 0.0f);
    // sr_product_noise against the direct sum over every element of A B^T.
    double direct = 0.0;
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < k; ++j)
        for (std::size_t t = 0; t < m; ++t) direct += static_cast<double>(var[i * m + t]) * b[j * m + t] * b[j * m + t];
    const double est = demo::sr_product_noise(var.data(), n, b.data(), k, m);
    CATCH_CHECK(est > 0.0);
    CATCH_CHECK(std::fabs(est - direct) <= 1e-12 * direct);
    // Against the spread of the rounded product over independent draws, about
    // its own mean (a saturated element would bias the mean, not the spread):
    // within 8% over 2,000 draws.
    const int draws = 2000;
    std::vector<double> prod(static_cast<std::size_t>(draws) * n * k, 0.0), mean(n * k, 0.0);
    for (int d = 0; d < draws; ++d) {
      demo::qdq_nvfp4_sr(a.data(), ya.data(), n, m, demo::sr_key(9, d, 0, 1));
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < k; ++j) {
          double p = 0.0;
          for (std::size_t t = 0; t < m; ++t) p += static_cast<double>(ya[i * m + t]) * b[j * m + t];
          prod[(static_cast<std::size_t>(d) * n + i) * k + j] = p;
          mean[i * k + j] += p / draws;
        }
    }
    double mc = 0.0;
    for (int d = 0; d < draws; ++d)
      for (std::size_t e = 0; e < n * k; ++e) {
        const double dv = prod[static_cast<std::size_t>(d) * n * k + e] - mean[e];
        mc += dv * dv / (draws - 1);
      }
    CATCH_INFO("estimate " << est << ", measured " << mc);
    CATCH_CHECK(std::fabs(mc - est) < 0.08 * est);
    // A NaN element: its variance is NaN (no estimate), the others unchanged.
    a[3] = NAN;
    demo::qdq_nvfp4_sr(a.data(), ya.data(), n, m, key, var.data());
    CATCH_CHECK(std::isnan(var[3]));
    CATCH_CHECK(std::isnan(demo::sr_product_noise(var.data(), n, b.data(), k, m)));
  }
}
