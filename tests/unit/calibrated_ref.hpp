// tests/unit/calibrated_ref.hpp — an independent double-precision reference
// of the calibrated trigger with GNMR's EMA mean, written from
// docs/algorithm.md ("Calibrated trigger"), not from the header: the
// logs are the C library's, every quantity a double. test_calibrated.cpp
// runs it beside gnmr's controller and compares verdicts away from ties.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <vector>

namespace calref {

struct Params {
  double rate = 1e-3, floor = 2.0, ceiling = 16.0;  // ceiling: INFINITY = none
  std::uint32_t warmup = 20;
  double beta = 0.98, winsor = 3.0, min_spread = 0.05;
  std::size_t window = 4;
  double mean_beta = 0.99;  // the EMA mean of the norms (EmaMean)
};

struct Stat {  // location and mean absolute deviation, bias-corrected EMAs
  double m = 0, s = 0;
  std::uint32_t k = 0;
  double loc(double beta) const { return k ? m / (1 - std::pow(beta, k)) : 0.0; }
  double spread(double beta) const { return k > 1 ? s / (1 - std::pow(beta, k - 1)) : 0.0; }
};

struct Verdict {
  bool defined = false;    // r defined (k >= 1) and a finite, nonzero norm
  bool triggered = false;
  bool restarted = false;  // the history restarted at this sample (no verdict)
  double restart_margin = INFINITY;  // distance (log2) of x to the restart bound -log2(ceiling)
  double margin = INFINITY;  // distance (log2) of the closest rule to its threshold
  double x = 0, j = 0, risk = 0, target = 0;
};

class Unit {
 public:
  explicit Unit(Params p) : p_(p) {}

  // One step with norm n; returns the verdict and advances the state.
  Verdict step(double n) {
    Verdict v;
    if (!std::isfinite(n) || n == 0.0) return v;  // never given to the trigger or the mean
    const double mu = k_ ? m_ / (1 - std::pow(p_.mean_beta, k_)) : 0.0;
    // While calibrating, a ratio below 1 / ceiling says the history is the
    // outlier: everything restarts and this sample is the first.
    if (k_ >= 1 && level_.k < p_.warmup && std::isfinite(p_.ceiling)) {
      const double r = n / std::max(mu, 1e-12);
      const double x = std::log2(std::min(std::max(r, 1.17549435e-38), 3.40282347e+38));
      v.restart_margin = std::fabs(x + std::log2(p_.ceiling));
      if (x < -std::log2(p_.ceiling)) {
        v.restarted = true;
        level_ = Stat{};
        jump_ = Stat{};
        ring_.clear();
        m_ = (1 - p_.mean_beta) * n;
        k_ = 1;
        return v;
      }
    }
    if (k_ >= 1) {
      v.defined = true;
      const double r = n / std::max(mu, 1e-12);
      v.x = std::log2(std::min(std::max(r, 1.17549435e-38), 3.40282347e+38));
      const bool has_jump = !ring_.empty();
      if (has_jump) {
        double a = 0;
        for (double y : ring_) a += y;
        v.j = v.x - a / ring_.size();
      }
      const double K = std::log(1.0 / p_.rate);
      const double lf = std::log2(p_.floor);
      const double lc = std::log2(p_.ceiling);  // +inf for none
      auto thr = [&](const Stat& st) {
        return std::max(st.loc(p_.beta) + K * std::max(st.spread(p_.beta), p_.min_spread), lf);
      };
      bool ceiling_while_calibrating = false;
      if (level_.k < p_.warmup) {
        // Calibrating: the ceiling is the only rule; the mean's clamp is
        // floor * mu; a sample it fires on stays out of the statistics.
        v.target = mu * p_.floor;
        if (std::isfinite(lc)) {
          v.triggered = v.x > lc;
          v.margin = std::fabs(v.x - lc);
          v.risk = std::max(v.x / lc, 0.0);
        }
        ceiling_while_calibrating = v.triggered;
      } else {
        const double tl = std::min(thr(level_), lc);
        v.target = mu * std::exp2(tl);
        v.triggered = v.x > tl;
        v.margin = std::fabs(v.x - tl);
        v.risk = (v.x - level_.loc(p_.beta)) / (tl - level_.loc(p_.beta));
        if (has_jump && jump_.k >= p_.warmup) {
          const double tj = thr(jump_);
          v.triggered = v.triggered || v.j > tj;
          v.margin = std::min(v.margin, std::fabs(v.j - tj));
          v.risk = std::max(v.risk, (v.j - jump_.loc(p_.beta)) / (tj - jump_.loc(p_.beta)));
        }
        v.risk = std::max(v.risk, 0.0);
      }
      // the trigger's statistics, after the verdict
      if (!ceiling_while_calibrating) {
        if (has_jump) push(jump_, v.j);
        push(level_, v.x);
        ring_.push_back(v.x);
        if (ring_.size() > p_.window) ring_.pop_front();
      }
    }
    const double fed = v.triggered ? std::min(n, v.target) : n;
    m_ = p_.mean_beta * m_ + (1 - p_.mean_beta) * fed;
    ++k_;
    return v;
  }

 private:
  void push(Stat& st, double x) const {
    if (st.k > 0) {
      const double loc = st.loc(p_.beta);
      if (st.k >= p_.warmup) {
        const double w = p_.winsor * std::max(st.spread(p_.beta), p_.min_spread);
        x = std::min(std::max(x, loc - w), loc + w);
      }
      st.s = p_.beta * st.s + (1 - p_.beta) * std::fabs(x - loc);
    }
    st.m = p_.beta * st.m + (1 - p_.beta) * x;
    ++st.k;
  }

  Params p_;
  double m_ = 0;
  std::uint32_t k_ = 0;
  Stat level_, jump_;
  std::deque<double> ring_;
};

}  // namespace calref
