// demo/bootstrap.hpp — 95% percentile-bootstrap intervals for the suite's
// summary (summary.csv, the printed table): the mean of paired differences,
// and gap closed as a ratio of mean differences, seeds resampled with
// replacement. bench/python/verdict.py computes the same quantities with
// numpy; the draws differ (another generator), the method does not.
//
// Determinism: a fixed generator seed and draw count, so a summary is the
// same on every invocation over the same runs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace demo {

struct Interval {
  double lo = NAN, hi = NAN;
};

constexpr int kBootDraws = 10000;
// Below this many seeds no interval is given: a percentile bootstrap over
// a handful of values is far narrower than the truth (three seeds resample
// to at most ten distinct means), and a narrow interval on three seeds
// would claim what they cannot show.
constexpr std::size_t kBootMinSeeds = 10;
constexpr std::uint64_t kBootSeed = 20;  // issue 20

// Interval of f(resampled indices) over kBootDraws draws of n indices; f
// returns NAN to drop a draw (a ratio whose denominator is 0).
template <class F>
Interval boot(std::size_t n, F f) {
  Interval r;
  if (n < kBootMinSeeds) return r;
  std::mt19937_64 rng(kBootSeed);
  std::uniform_int_distribution<std::size_t> pick(0, n - 1);
  std::vector<std::size_t> idx(n);
  std::vector<double> v;
  v.reserve(kBootDraws);
  for (int b = 0; b < kBootDraws; ++b) {
    for (auto& i : idx) i = pick(rng);
    const double x = f(idx);
    if (!std::isnan(x)) v.push_back(x);
  }
  if (v.size() < 100) return r;
  std::sort(v.begin(), v.end());
  const auto at = [&v](double q) {  // linear interpolation, numpy's default
    const double pos = q * static_cast<double>(v.size() - 1);
    const auto k = static_cast<std::size_t>(pos);
    const double w = pos - static_cast<double>(k);
    return k + 1 < v.size() ? v[k] * (1 - w) + v[k + 1] * w : v[k];
  };
  r.lo = at(0.025);
  r.hi = at(0.975);
  return r;
}

// The mean of d, resampled.
inline Interval boot_mean(const std::vector<double>& d) {
  return boot(d.size(), [&d](const std::vector<std::size_t>& idx) {
    double s = 0;
    for (auto i : idx) s += d[i];
    return s / static_cast<double>(idx.size());
  });
}

// mean(num) / mean(den) over the same resampled seeds (NAN when the
// resampled mean of den is 0).
inline double ratio_of_means(const std::vector<double>& num, const std::vector<double>& den) {
  double a = 0, b = 0;
  for (std::size_t i = 0; i < num.size(); ++i) a += num[i], b += den[i];
  return b != 0 ? a / b : NAN;
}
inline Interval boot_ratio(const std::vector<double>& num, const std::vector<double>& den) {
  return boot(num.size(), [&](const std::vector<std::size_t>& idx) {
    double a = 0, b = 0;
    for (auto i : idx) a += num[i], b += den[i];
    return b != 0 ? a / b : NAN;
  });
}

}  // namespace demo
