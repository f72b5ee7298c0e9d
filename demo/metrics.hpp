// demo/metrics.hpp — what a run is scored on (docs/record/stability.md, "Metrics";
// docs/record/demo.md for the legacy table).
//
// - spikes: steps whose train loss exceeds the median of the previous 20
//   steps' losses by more than 10% (a non-finite loss counts);
// - spike score: OLMo-core's StabilityMonitorCallback rule (a loss above the
//   mean of the previous W losses by more than 6 population standard
//   deviations; W = 50 here, 128 there, for runs of a few hundred steps),
//   as a percentage of the steps that have W predecessors; the metric AdaGC
//   (arXiv 2502.11034) reports;
// - diverged: a non-finite train loss, or a train loss above twice the
//   step-1 loss for 10 consecutive steps (a one-step spike that recovers,
//   such as an injected outlier's, is a spike, not a divergence);
// - recovered fraction: unit-steps in recovery / (steps x controller units);
// - high-precision share: operator-steps run unquantized / (steps x
//   operators), and the same weighted by each operator's GEMM FLOPs;
// - detection: an injected event (an outlier on an operator, a scale fault
//   on a unit) is detected when the arm acts on that unit at a step in
//   [start, start + k]; recall = detected events / events, precision = acts
//   that detect some event / acts. An act is a grant (or, where promotions
//   are redirected or drawn, the operator that was promoted).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "train.hpp"

namespace demo {

constexpr int kSpikeWindow = 20;
constexpr double kSpikeFrac = 0.10;
constexpr int kScoreWindow = 50;
constexpr int kDivergeSteps = 10;
constexpr double kScoreSigma = 6.0;

struct Metrics {
  int spikes = 0;
  double spike_score = 0;  // percent
  bool diverged = false;
  double recovered_fraction = 0;
  std::uint32_t max_in_recovery = 0;
  double hp_share = 0, hp_flops_share = 0;
  std::int64_t promoted_op_steps = 0;
  double detect_precision = NAN, detect_recall = NAN;  // NaN: undefined
  double control_ms = 0, step_ms = 0;  // per step
};

// losses[0] is step 1's.
inline bool diverged_of(const std::vector<double>& losses) {
  int run = 0;
  for (double l : losses) {
    if (!std::isfinite(l)) return true;
    run = l > 2.0 * losses[0] ? run + 1 : 0;
    if (run >= kDivergeSteps) return true;
  }
  return false;
}

inline bool is_spike(const std::vector<StepRow>& rows, std::size_t i) {
  if (i < static_cast<std::size_t>(kSpikeWindow)) return false;
  std::vector<double> l;
  for (std::size_t j = i - kSpikeWindow; j < i; ++j) l.push_back(rows[j].train_loss);
  std::nth_element(l.begin(), l.begin() + kSpikeWindow / 2, l.end());
  // Even window: the median is the mean of the two middle values.
  const double hi = l[kSpikeWindow / 2];
  const double lo = *std::max_element(l.begin(), l.begin() + kSpikeWindow / 2);
  return rows[i].train_loss > 0.5 * (lo + hi) * (1.0 + kSpikeFrac);
}

inline bool is_score_spike(const std::vector<StepRow>& rows, std::size_t i) {
  double m = 0, v = 0;
  for (std::size_t j = i - kScoreWindow; j < i; ++j) m += rows[j].train_loss;
  m /= kScoreWindow;
  for (std::size_t j = i - kScoreWindow; j < i; ++j) v += (rows[j].train_loss - m) * (rows[j].train_loss - m);
  const double sd = std::sqrt(v / kScoreWindow);
  return sd >= 1e-10 && rows[i].train_loss > m + kScoreSigma * sd;
}

// acts_per_unit: whether the arm can act on single units (per-unit rules,
// random promotions); detection is undefined otherwise, and without events.
inline Metrics metrics_of(const RunResult& r, int detect_k, bool acts_per_unit) {
  Metrics m;
  double rec = 0, cms = 0, sms = 0;
  int scored = 0, score_spikes = 0;
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const auto& row = r.rows[i];
    if (!std::isfinite(row.train_loss)) {
      ++m.spikes;
    } else {
      m.spikes += is_spike(r.rows, i) ? 1 : 0;
      if (i >= static_cast<std::size_t>(kScoreWindow)) {
        ++scored;
        score_spikes += is_score_spike(r.rows, i) ? 1 : 0;
      }
    }
    rec += row.in_recovery;
    m.max_in_recovery = std::max(m.max_in_recovery, row.in_recovery);
    cms += row.control_ms;
    sms += row.step_ms;
  }
  std::vector<double> losses;
  for (const auto& row : r.rows) losses.push_back(row.train_loss);
  m.diverged = !losses.empty() && diverged_of(losses);
  const double n = static_cast<double>(std::max<std::size_t>(1, r.rows.size()));
  m.recovered_fraction = rec / (n * static_cast<double>(std::max<std::size_t>(1, r.controller_units)));
  m.spike_score = scored ? 100.0 * score_spikes / scored : 0.0;
  m.control_ms = cms / n;
  m.step_ms = sms / n;

  // Over the operators that can run in low precision: a pinned one (weight
  // 0, the NVFP4 recipe's head) is neither promoted nor counted.
  double w_all = 0, w_hp = 0;
  std::size_t n_low = 0;
  for (double w : r.op_weight) w_all += w, n_low += w > 0 ? 1 : 0;
  for (const auto& mask : r.masks)
    for (std::size_t o = 0; o < mask.size(); ++o)
      if (mask[o] && r.op_weight[o] > 0) {
        ++m.promoted_op_steps;
        w_hp += r.op_weight[o];
      }
  if (n_low > 0 && !r.masks.empty()) {
    m.hp_share = static_cast<double>(m.promoted_op_steps) / (static_cast<double>(r.masks.size()) * n_low);
    m.hp_flops_share = w_hp / (static_cast<double>(r.masks.size()) * w_all);
  }

  if (acts_per_unit && !r.truth.empty()) {
    const auto hits = [&](const Act& a, const TruthEvent& e) {
      return a.unit == e.unit && a.step >= e.step && a.step <= e.step + detect_k;
    };
    int found = 0, good = 0;
    for (const auto& e : r.truth)
      found += std::any_of(r.acts.begin(), r.acts.end(), [&](const Act& a) { return hits(a, e); }) ? 1 : 0;
    for (const auto& a : r.acts)
      good += std::any_of(r.truth.begin(), r.truth.end(), [&](const TruthEvent& e) { return hits(a, e); }) ? 1 : 0;
    m.detect_recall = static_cast<double>(found) / static_cast<double>(r.truth.size());
    if (!r.acts.empty()) m.detect_precision = static_cast<double>(good) / static_cast<double>(r.acts.size());
  }
  return m;
}

}  // namespace demo
