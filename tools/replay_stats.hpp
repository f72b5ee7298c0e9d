// tools/replay_stats.hpp — what gnmr-replay counts during a run and prints.
//
// Per run: the event totals, the fraction of unit-steps spent in recovery,
// the most units in recovery at once, per-unit counts, and log-binned
// histograms of the ratio r and of Delta-GNMR d over the unit-steps past
// warm-up, whose quantiles are what tau and delta are chosen from
// (docs/tuning.md). The histograms are fixed-size, so a run of any length
// costs the same memory.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace replay {

// Positive values in 100 bins per decade over [1e-4, 1e8); values <= 0 in
// bin 0, beyond the range in the edge bins. Quantiles come back as the
// bin's geometric middle: within 1.2 % of the true value.
class LogHist {
 public:
  static constexpr int kPerDecade = 100;
  static constexpr double kLo = -4.0, kHi = 8.0;
  static constexpr int kBins = static_cast<int>((kHi - kLo) * kPerDecade) + 2;

  LogHist() : bins_(kBins, 0) {}
  void add(float v) {
    ++n_;
    if (!(v > 0.0f)) {
      ++bins_[0];
      return;
    }
    const double b = (std::log10(static_cast<double>(v)) - kLo) * kPerDecade;
    const int i = b < 0.0 ? 1 : (b >= kBins - 2 ? kBins - 1 : 1 + static_cast<int>(b));
    ++bins_[static_cast<std::size_t>(i)];
  }
  std::uint64_t count() const { return n_; }
  // The q-quantile (0 < q < 1); 0 if the value is <= 0; NaN when empty.
  double quantile(double q) const {
    if (n_ == 0) return NAN;
    const double want = q * static_cast<double>(n_);
    std::uint64_t acc = 0;
    for (int i = 0; i < kBins; ++i) {
      acc += bins_[static_cast<std::size_t>(i)];
      if (static_cast<double>(acc) >= want) {
        if (i == 0) return 0.0;
        return std::pow(10.0, kLo + (i - 0.5) / kPerDecade);
      }
    }
    return std::pow(10.0, kHi);
  }

 private:
  std::vector<std::uint64_t> bins_;
  std::uint64_t n_ = 0;
};

struct UnitStats {
  std::uint64_t grants = 0, triggers = 0, denials = 0, nonfinite = 0;
  float max_ratio = 0.0f, max_norm = 0.0f;
};

struct RunStats {
  std::string preset;
  std::size_t units = 0;
  std::uint64_t steps = 0, triggers = 0, grants = 0, denials = 0, nonfinite = 0, releases = 0,
                global_skips = 0, in_rec_sum = 0, events = 0,
                systemic = 0,        // systemic steps
                denied_clipped = 0;  // denied unit-steps the denied-unit rule clipped
  std::uint32_t max_in_rec = 0;
  bool has_ratio = true;  // false for presets without a mean (the ratio is n / eps)
  std::vector<std::string> names;
  std::vector<UnitStats> per_unit;
  LogHist ratio_h, delta_h;  // unit-steps past warm-up with a finite, non-zero norm
  float ratio_max = 0.0f, delta_max = 0.0f;
  double recovered() const {
    return steps && units ? static_cast<double>(in_rec_sum) / (static_cast<double>(steps) * units) : 0.0;
  }
};

inline std::string fmt_q(double v) {
  char b[32];
  if (std::isnan(v)) return "-";
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

inline void print_summary(const std::vector<RunStats>& runs, int top) {
  std::printf("\n%-13s %8s %6s %9s %7s %8s %9s %8s %7s %10s %8s %8s %8s\n", "preset", "steps", "units",
              "triggers", "grants", "denials", "nonfinite", "releases", "gskips", "recovered",
              "max_rec", "systemic", "dclipped");
  for (const RunStats& r : runs)
    std::printf("%-13s %8llu %6zu %9llu %7llu %8llu %9llu %8llu %7llu %9.3f%% %8u %8llu %8llu\n",
                r.preset.c_str(), static_cast<unsigned long long>(r.steps), r.units,
                static_cast<unsigned long long>(r.triggers), static_cast<unsigned long long>(r.grants),
                static_cast<unsigned long long>(r.denials), static_cast<unsigned long long>(r.nonfinite),
                static_cast<unsigned long long>(r.releases),
                static_cast<unsigned long long>(r.global_skips), 100.0 * r.recovered(), r.max_in_rec,
                static_cast<unsigned long long>(r.systemic), static_cast<unsigned long long>(r.denied_clipped));
  std::printf("(recovered: unit-steps in recovery / (steps x units); max_rec: most units in "
              "recovery at once;\n systemic: systemic steps; dclipped: denied unit-steps clipped by the "
              "denied-unit rule)\n");
  std::printf("\nratio r and Delta-GNMR d over unit-steps past warm-up (quantiles within 1.2%%):\n");
  std::printf("%-13s %8s %8s %8s %9s %8s %8s %9s %9s\n", "preset", "r_p50", "r_p99", "r_p99.9",
              "r_max", "d_p99", "d_p99.9", "d_max", "samples");
  for (const RunStats& r : runs) {
    if (!r.has_ratio) {
      std::printf("%-13s %8s (no mean: r is not defined for this preset)\n", r.preset.c_str(), "-");
      continue;
    }
    const bool any = r.ratio_h.count() > 0;
    std::printf("%-13s %8s %8s %8s %9s %8s %8s %9s %9llu\n", r.preset.c_str(),
                fmt_q(r.ratio_h.quantile(0.5)).c_str(), fmt_q(r.ratio_h.quantile(0.99)).c_str(),
                fmt_q(r.ratio_h.quantile(0.999)).c_str(), any ? fmt_q(r.ratio_max).c_str() : "-",
                fmt_q(r.delta_h.quantile(0.99)).c_str(), fmt_q(r.delta_h.quantile(0.999)).c_str(),
                any ? fmt_q(r.delta_max).c_str() : "-",
                static_cast<unsigned long long>(r.ratio_h.count()));
  }
  if (top <= 0) return;
  for (const RunStats& r : runs) {
    std::vector<std::size_t> idx;
    for (std::size_t u = 0; u < r.units; ++u) {
      const UnitStats& s = r.per_unit[u];
      if (s.grants || s.triggers || s.nonfinite) idx.push_back(u);
    }
    std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
      const UnitStats &x = r.per_unit[a], &y = r.per_unit[b];
      if (x.grants != y.grants) return x.grants > y.grants;
      return x.triggers > y.triggers;
    });
    if (idx.size() > static_cast<std::size_t>(top)) idx.resize(static_cast<std::size_t>(top));
    std::printf("\ntop units by grants (%s):\n", r.preset.c_str());
    if (idx.empty()) {
      std::printf("  (no unit triggered or went non-finite)\n");
      continue;
    }
    std::printf("  %-24s %7s %9s %8s %9s %10s %10s\n", "unit", "grants", "triggers", "denials",
                "nonfinite", "max_ratio", "max_norm");
    for (std::size_t u : idx) {
      const UnitStats& s = r.per_unit[u];
      char ratio[32] = "-";
      if (r.has_ratio) std::snprintf(ratio, sizeof ratio, "%.4g", static_cast<double>(s.max_ratio));
      std::printf("  %-24s %7llu %9llu %8llu %9llu %10s %10.4g\n", r.names[u].c_str(),
                  static_cast<unsigned long long>(s.grants), static_cast<unsigned long long>(s.triggers),
                  static_cast<unsigned long long>(s.denials), static_cast<unsigned long long>(s.nonfinite),
                  ratio, static_cast<double>(s.max_norm));
    }
  }
}

inline void write_summary_csv(const std::string& path, const std::vector<RunStats>& runs) {
  std::ofstream f(path);
  if (!f) throw std::runtime_error("cannot write the summary '" + path + "'");
  f << "preset,steps,units,triggers,grants,denials,nonfinite,releases,global_skips,"
       "recovered_fraction,max_in_recovery,event_lines,systemic_steps,denied_clipped\n";
  for (const RunStats& r : runs) {
    char frac[32];
    std::snprintf(frac, sizeof frac, "%.9g", r.recovered());
    f << r.preset << ',' << r.steps << ',' << r.units << ',' << r.triggers << ',' << r.grants << ','
      << r.denials << ',' << r.nonfinite << ',' << r.releases << ',' << r.global_skips << ',' << frac
      << ',' << r.max_in_rec << ',' << r.events << ',' << r.systemic << ',' << r.denied_clipped << '\n';
  }
  f.flush();
  if (!f) throw std::runtime_error("writing the summary '" + path + "' failed");
}

}  // namespace replay
