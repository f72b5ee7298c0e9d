// demo/suite_report.hpp — what a suite makes of its runs: DIR/results.csv
// (one row per run), DIR/summary.csv and the printed table (per scenario
// and arm: mean +- std over seeds, and paired differences), and a picture
// per scenario (DIR/<scenario>.png: loss curves, and the frontier of gap
// closed against high-precision share, one point per arm).
//
// Paired statistics: for an arm x and a reference arm a of the same
// scenario and settings, d_s = L_x(s) - L_a(s) per seed s; reported as
// mean +- sample standard deviation of d over the seeds both have, with the
// number of seeds where x is better (d < 0) and worse (d > 0), and a 95%
// bootstrap interval of the mean (demo/bootstrap.hpp). Gap closed, in the
// summary, is a ratio of means over the seeds with low, high and x:
// mean(L_low - L_x) / mean(L_low - L_high), with its bootstrap interval
// (never a mean of per-seed ratios, which explodes where a seed's gap is
// small); results.csv keeps the per-seed ratio of each run, empty when the
// suite lacks low or high for that seed, or when L_low = L_high.
#pragma once

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bootstrap.hpp"
#include "suite.hpp"

namespace demo {

struct SuiteRow {
  const Job* job;
  Result r;
  double val = NAN, gap = NAN;
};

inline std::string cell(double v, int prec = 6) {
  if (std::isnan(v)) return "";
  std::ostringstream s;
  s << std::setprecision(prec) << v;
  return s.str();
}

struct Stat {
  int n = 0;
  double mean = NAN, sd = NAN;
  int better = 0, worse = 0;
};
inline Stat stat_of(const std::vector<double>& v) {
  Stat s;
  double sum = 0;
  for (double x : v)
    if (!std::isnan(x)) sum += x, ++s.n;
  if (s.n == 0) return s;
  s.mean = sum / s.n;
  double q = 0;
  for (double x : v)
    if (!std::isnan(x)) q += (x - s.mean) * (x - s.mean), s.better += x < 0, s.worse += x > 0;
  s.sd = s.n > 1 ? std::sqrt(q / (s.n - 1)) : 0.0;
  return s;
}

inline std::string pm(const Stat& s, int prec = 4) {
  if (s.n == 0) return "-";
  std::ostringstream o;
  o << std::fixed << std::setprecision(prec) << s.mean << "+-" << s.sd;
  return o.str();
}

// Reads every finished run and computes gap closed against the low and
// high runs of the same scenario, seed and settings.
inline std::vector<SuiteRow> collect(const Plan& p, const Overrides& ov) {
  std::map<std::string, const Job*> by_key;
  for (const auto& j : p.jobs) by_key[j.key] = &j;
  std::vector<SuiteRow> rows;
  std::map<std::string, double> val_of;
  for (const auto& j : p.jobs) {
    if (j.state != Job::kDone) continue;
    SuiteRow r{&j, read_result(j.dir, j.cfg)};
    r.val = field(r.r, "final_val_loss");
    // The divergence rule from the stored losses: entries written before
    // the rule's last change are scored like the rest.
    r.r["diverged"] = diverged_of(series(r.r, "train_loss")) ? "1" : "0";
    val_of[j.key] = r.val;
    rows.push_back(std::move(r));
  }
  for (auto& r : rows) {
    const auto& c = r.job->cfg;
    const auto lo = val_of.find(run_key(build_config(c.scenario, "low", c.seed, ov)));
    const auto hi = val_of.find(run_key(build_config(c.scenario, "high", c.seed, ov)));
    if (lo != val_of.end() && hi != val_of.end() && lo->second != hi->second)
      r.gap = (lo->second - r.val) / (lo->second - hi->second);
  }
  return rows;
}

inline void write_results_csv(const std::string& path, const std::vector<SuiteRow>& rows) {
  std::ofstream f(path);
  f << "scenario,arm,seed,final_val_loss,gap_closed,hp_share,spikes,diverged,recovered_fraction,"
       "max_in_recovery,detect_precision,detect_recall,hp_flops_share,spike_score,promoted_op_steps,"
       "final_train_loss,recipe_clip,steps,cpu_s,wall_s,key\n";
  for (const auto& r : rows) {
    const auto& g = r.r;
    const auto& c = r.job->cfg;
    f << c.scenario << ',' << c.arm.name << ',' << c.seed << ',' << g.at("final_val_loss") << ',' << cell(r.gap)
      << ',' << g.at("hp_share") << ',' << g.at("spikes") << ',' << g.at("diverged") << ','
      << g.at("recovered_fraction") << ',' << g.at("max_in_recovery") << ',' << g.at("detect_precision") << ','
      << g.at("detect_recall") << ',' << g.at("hp_flops_share") << ',' << g.at("spike_score") << ','
      << g.at("promoted_op_steps") << ',' << g.at("final_train_loss") << ',' << c.recipe_clip << ','
      << g.at("steps_run") << ',' << g.at("cpu_s") << ',' << g.at("wall_s") << ',' << r.job->key << '\n';
  }
}

// Arms that are controls in the "best control" comparison.
// Not low, not an all-high reference (high, stabilizer-high), not an arm
// with GNMR in it (the default and its random twin are GNMR inside the
// stabilizer).
inline bool is_control(const std::string& arm) {
  const bool all_high = arm == "high" || (arm.size() > 5 && arm.compare(arm.size() - 5, 5, "-high") == 0);
  return arm != "low" && !all_high && arm.find("gnmr") == std::string::npos && arm.rfind("default", 0) != 0;
}

// Per scenario: the table on `os`, rows appended to summary.csv.
inline void summarize(std::ostream& os, std::ofstream& csv, const std::string& scenario,
                      const std::vector<SuiteRow>& rows, const std::vector<std::string>& arm_order) {
  std::map<std::string, std::map<std::uint64_t, const SuiteRow*>> by;  // arm -> seed -> row
  for (const auto& r : rows)
    if (r.job->cfg.scenario == scenario) by[r.job->cfg.arm.name][r.job->cfg.seed] = &r;
  const auto diffs = [&](const std::string& x, const std::string& a) {
    std::vector<double> d;
    if (!by.count(x) || !by.count(a)) return d;
    for (const auto& [seed, r] : by[x])
      if (by[a].count(seed) && !std::isnan(r->val) && !std::isnan(by[a][seed]->val))
        d.push_back(r->val - by[a][seed]->val);
    return d;
  };
  const auto paired = [&](const std::string& x, const std::string& a) { return stat_of(diffs(x, a)); };
  // Gap closed as a ratio of means: (low - x) over (low - high), seeds with all three.
  const auto gap_of = [&](const std::string& x, Interval& ci) {
    std::vector<double> num, den;
    ci = Interval{};
    if (!by.count(x) || !by.count("low") || !by.count("high")) return static_cast<double>(NAN);
    for (const auto& [seed, r] : by[x]) {
      if (!by["low"].count(seed) || !by["high"].count(seed)) continue;
      const double lo = by["low"][seed]->val, hi = by["high"][seed]->val;
      if (std::isnan(lo) || std::isnan(hi) || std::isnan(r->val)) continue;
      num.push_back(lo - r->val);
      den.push_back(lo - hi);
    }
    if (num.empty()) return static_cast<double>(NAN);
    ci = boot_ratio(num, den);
    return ratio_of_means(num, den);
  };
  const auto ci_text = [](double m, const Interval& i, int prec) {
    if (std::isnan(m)) return std::string("-");
    std::ostringstream o;
    o << std::fixed << std::setprecision(prec) << std::showpos << m;
    if (!std::isnan(i.lo)) o << " [" << i.lo << "," << i.hi << "]";
    return o.str();
  };
  const auto column = [&](const std::string& arm, const char* k) {
    std::vector<double> v;
    for (const auto& [seed, r] : by[arm]) v.push_back(k ? field(r->r, k) : r->gap);
    return stat_of(v);
  };
  std::string best;  // the control with the lowest mean validation loss
  for (const auto& [arm, m] : by)
    if (is_control(arm) && (best.empty() || column(arm, "final_val_loss").mean < column(best, "final_val_loss").mean))
      best = arm;
  os << "\n== " << scenario << (best.empty() ? "" : " (best control: " + best + ")") << "\n";
  os << std::left << std::setw(25) << "arm" << std::right << std::setw(3) << "n" << std::setw(17) << "val"
     << std::setw(28) << "d(low) [95% CI]" << std::setw(6) << "+/-" << std::setw(28) << "d(best ctl) [95% CI]"
     << std::setw(6) << "+/-" << std::setw(20) << "gap closed [CI]" << std::setw(7) << "hp%" << std::setw(7) << "hpF%" << std::setw(7) << "spk"
     << std::setw(7) << "score%" << std::setw(5) << "div" << std::setw(7) << "recov%" << std::setw(5) << "max"
     << std::setw(6) << "detP" << std::setw(6) << "detR" << std::setw(7) << "cpu-s" << "\n";
  for (const auto& arm : arm_order) {
    if (!by.count(arm)) continue;
    const Stat v = column(arm, "final_val_loss"), dl = paired(arm, "low"), db = paired(arm, best);
    const Interval dl_ci = boot_mean(diffs(arm, "low")), db_ci = boot_mean(diffs(arm, best));
    Interval gap_ci;
    const double gap = gap_of(arm, gap_ci);
    const auto mean = [&](const char* k) { return column(arm, k).mean; };
    const auto wl = [](const Stat& s) { return s.n ? std::to_string(s.better) + "/" + std::to_string(s.worse) : "-"; };
    os << std::left << std::setw(25) << arm << std::right << std::setw(3) << v.n << std::setw(17) << pm(v)
       << std::setw(28) << (arm == "low" ? "-" : ci_text(dl.mean, dl_ci, 4)) << std::setw(6)
       << (arm == "low" ? "-" : wl(dl)) << std::setw(28) << (arm == best ? "-" : ci_text(db.mean, db_ci, 4))
       << std::setw(6) << (arm == best ? "-" : wl(db)) << std::setw(20) << ci_text(gap, gap_ci, 2) << std::noshowpos
       << std::fixed << std::setprecision(2) << std::setw(7)
       << 100 * mean("hp_share") << std::setw(7) << 100 * mean("hp_flops_share") << std::setprecision(1)
       << std::setw(7) << mean("spikes") << std::setprecision(2) << std::setw(7) << mean("spike_score")
       << std::setw(5) << static_cast<int>(std::lround(v.n * mean("diverged"))) << std::setw(7)
       << 100 * mean("recovered_fraction") << std::setprecision(0) << std::setw(5) << column(arm, "max_in_recovery").mean
       << std::setprecision(2) << std::setw(6) << cell(mean("detect_precision"), 2) << std::setw(6)
       << cell(mean("detect_recall"), 2) << std::setprecision(1) << std::setw(7) << mean("cpu_s") << "\n";
    csv << scenario << ',' << arm << ',' << v.n << ',' << cell(v.mean) << ',' << cell(v.sd) << ',' << cell(dl.mean)
        << ',' << cell(dl.sd) << ',' << cell(dl_ci.lo) << ',' << cell(dl_ci.hi) << ',' << dl.better << ','
        << dl.worse << ',' << best << ',' << cell(db.mean) << ',' << cell(db.sd) << ',' << cell(db_ci.lo) << ','
        << cell(db_ci.hi) << ',' << db.better << ',' << db.worse << ',' << cell(gap) << ',' << cell(gap_ci.lo) << ','
        << cell(gap_ci.hi) << ','
        << cell(mean("hp_share")) << ',' << cell(mean("hp_flops_share")) << ',' << cell(mean("spikes")) << ','
        << cell(mean("spike_score")) << ',' << cell(v.n * mean("diverged")) << ',' << cell(mean("recovered_fraction"))
        << ',' << cell(mean("detect_precision")) << ',' << cell(mean("detect_recall")) << ',' << cell(mean("cpu_s"))
        << '\n';
  }
}

inline const char* kSummaryHeader =
    "scenario,arm,seeds,val_mean,val_sd,d_low_mean,d_low_sd,d_low_ci_lo,d_low_ci_hi,better_than_low,worse_than_low,"
    "best_control,d_best_mean,d_best_sd,d_best_ci_lo,d_best_ci_hi,better_than_best,worse_than_best,gap_closed,"
    "gap_closed_ci_lo,gap_closed_ci_hi,hp_share,"
    "hp_flops_share,spikes,spike_score,diverged_runs,recovered_fraction,detect_precision,detect_recall,cpu_s\n";

}  // namespace demo
