// gnmr/policy/trigger_calibrated.hpp — a TriggerPolicy that sets its own
// thresholds from a false-alarm rate (issue 31; docs/algorithm.md,
// "Calibrated trigger").
//
// GNMR's fixed thresholds (r > tau, d > delta) mean different things on
// different units: a unit whose ratio wanders by +-50% from step to step
// crosses tau = 3 far more often than a unit that moves by 2%, and which
// units wander depends on the model, the recipe and the topology (on the
// Hugging Face stack gnmr promoted 13.7% of operator-steps of a run with
// nothing to recover). This trigger learns, per unit, where the unit's own
// signal usually lies and fires only beyond what a target rate of false
// alarms allows.
//
// The signals, in the log2 domain (a ratio of 2 and one of 1/2 are equally
// far from 1, and multiplicative noise becomes additive):
//   x = log2(r)                      the level, r = n / mu (GNMR)
//   j = x - mean(last w values of x)  the jump (Delta-GNMR on log ratios)
// For each signal an EMA (decay beta, bias-corrected) of its location m and
// of its mean absolute deviation s around m, both fed a *winsorized* sample
// (clamped to m +- winsor * s once warmed up), so that the spikes this
// trigger exists to catch move neither statistic by more than winsor * s *
// (1 - beta) per step. The tail is modelled as Laplace (exponential) with
// scale s: P(signal > m + K s) = exp(-K) / 2, so K = ln(1 / rate) puts each
// rule at rate / 2 and the two together at most at `rate` per unit-step.
// A rule fires when its signal exceeds max(m + K max(s, min_spread),
// log2(floor)): the floor keeps a calm unit (s near 0) from firing on a
// small relative change, whatever its statistics say.
//
// The ceiling guards from the second step (the first has nothing to be
// judged against): a ratio above `ceiling` fires whatever the statistics
// say (the level's threshold is never above log2(ceiling)), and while the
// level statistic calibrates (its first `warmup` samples) it is the only
// rule, so a spike at step 2 is caught. A sample the ceiling fires on while
// calibrating is kept out of the trigger's own statistics (it is not the
// unit's calm behaviour); the mean is fed min(n, floor * mu), GNMR's clamp.
// The same bound read the other way guards the start of the history: while
// calibrating, a ratio below 1 / ceiling says the unit's mean is an outlier
// (a spike at the very first step, which nothing could judge, became it),
// and restarts() has the controller start the unit's mean and this
// trigger's statistics afresh from that sample (kRestart), so a spike at
// step 1 does not blind the trigger to the next one.
//
// Same rules as every policy: fixed-size State, GNMR_HOST_DEVICE, the same
// bits on host and device (the logs are gnmr/core/log2.hpp's, built from
// correctly rounded operations), non-finite samples never reach it (the
// controller flags them first), and a sample is never in the statistic it
// is judged against (evaluate() reads the state before update() adds the
// sample). The report's delta column holds j (log2 units).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "gnmr/core/log2.hpp"
#include "gnmr/core/math.hpp"
#include "gnmr/core/numeric.hpp"
#include "gnmr/core/types.hpp"
#include "gnmr/detail/check.hpp"

namespace gnmr {

namespace detail {
// One robust running location/spread pair (a signal's statistic). Its
// sample count k is the trigger's (State::k for the level, k - 1 for the
// jump), kept once. The bias corrections are running products of beta:
// p = beta^(k-1) (1 while k <= 1) divides s; m's, beta^k, is p * beta,
// computed from p, which is the very product the first layout stored
// (both are the same chain of fp32 multiplications by beta).
struct LogStat {
  float m;  // EMA of the winsorized samples (raw: divide by 1 - p * beta)
  float s;  // EMA of |sample - location before it| (raw: divide by 1 - p)
  float p;  // beta^(k-1): the first sample has no deviation
};
GNMR_HOST_DEVICE LogStat logstat_init() { return LogStat{0.0f, 0.0f, 1.0f}; }
GNMR_HOST_DEVICE float logstat_loc(const LogStat& a, std::uint32_t k, float beta) {
  return k ? math::div(a.m, math::sub(1.0f, math::mul(a.p, beta))) : 0.0f;
}
GNMR_HOST_DEVICE float logstat_spread(const LogStat& a, std::uint32_t k) {
  return k > 1 ? math::div(a.s, math::sub(1.0f, a.p)) : 0.0f;
}
}  // namespace detail

template <int Cap = 4>
struct CalibratedTriggerT {
  static_assert(Cap >= 1 && Cap <= 64, "CalibratedTriggerT<Cap>: Cap must be in [1, 64]");
  static constexpr const char* kName = "calibrated";
  float rate = 1e-3f;        // target false alarms per unit-step (both rules)
  float floor = 2.0f;        // a rule fires only on a jump of at least this factor
  float ceiling = 16.0f;     // a ratio above this fires always, from the first step
  std::uint32_t warmup = 20; // samples of a signal's statistic before it may fire
  float beta = 0.98f;        // EMA decay of the log statistics (about 50 steps)
  float winsor = 3.0f;       // samples clamped to m +- winsor * s once warm
  float min_spread = 0.05f;  // log2 units: s is read as at least this
  int window = 4 < Cap ? 4 : Cap;  // w, the jump's horizon
  bool clamp_feed = true;    // feed min(n, level threshold) on triggered steps

  // 12 + 4 Cap bytes (44 at Cap 4): the ring's write position is k % window
  // and its fill min(k, window); the jump statistic has k - 1 samples.
  struct State {
    float ring[static_cast<std::size_t>(Cap)];  // last values of x, oldest overwritten first
    detail::LogStat level, jump;
    std::uint32_t k;  // samples in the level statistic (saturating)
  };
  GNMR_HOST_DEVICE static State init() {
    State s{};
    s.level = detail::logstat_init();
    s.jump = detail::logstat_init();
    return s;
  }
  GNMR_HOST_DEVICE std::uint32_t jump_count(const State& s) const { return s.k ? s.k - 1u : 0u; }
  GNMR_HOST_DEVICE std::uint32_t filled(const State& s) const {
    const std::uint32_t w = static_cast<std::uint32_t>(window);
    return s.k < w ? s.k : w;
  }

  // K = ln(1 / rate) (each rule at rate / 2 under the Laplace tail).
  GNMR_HOST_DEVICE float k_sigma() const { return math::mul(math::log2(math::div(1.0f, rate)), 0.693147181f); }
  GNMR_HOST_DEVICE float log_floor() const { return math::log2(floor); }
  GNMR_HOST_DEVICE float log_ceiling() const { return ceiling < inf_f() ? math::log2(ceiling) : inf_f(); }
  // While the level statistic calibrates, only the ceiling judges.
  GNMR_HOST_DEVICE bool calibrating(const State& s) const { return s.k < warmup; }
  // The history is the outlier (gnmr/step/step.hpp, history_restarts): while
  // calibrating, a ratio below 1 / ceiling, read in the log domain as the
  // ceiling is (x < -log2(ceiling)). No ceiling (+inf): never.
  GNMR_HOST_DEVICE bool restarts(const State& s, float ratio) const {
    if (!calibrating(s) || !(ceiling < inf_f())) return false;
    return math::log2(ratio) < -log_ceiling();
  }

  GNMR_HOST_DEVICE float level_of(const UnitView& v) const { return math::log2(v.ratio); }
  GNMR_HOST_DEVICE float history_mean(const State& s) const {
    const std::uint32_t w = static_cast<std::uint32_t>(window);
    return detail::ring_mean(s.ring, s.k % w, w, filled(s));
  }
  // A rule's threshold: max(loc + K max(s, min_spread), log2(floor)) for a
  // statistic of n samples whose location is loc (logstat_loc, computed
  // once per statistic and evaluation); k and lf are k_sigma() and
  // log_floor().
  GNMR_HOST_DEVICE float threshold(const detail::LogStat& a, std::uint32_t n, float loc, float k, float lf) const {
    const float sp = math::max(detail::logstat_spread(a, n), min_spread);
    return math::max(math::add(loc, math::mul(k, sp)), lf);
  }
  // (value - loc) / (threshold - loc): above 1 exactly when the rule fires.
  GNMR_HOST_DEVICE static float risk_of(float loc, float value, float thr) {
    return math::div(math::sub(value, loc), math::sub(thr, loc));
  }

  GNMR_HOST_DEVICE void evaluate(const State& s, UnitView& v) const {
    v.delta = 0.0f;
    v.risk = 0.0f;
    v.target = math::mul(floor, v.mean);
    if (v.count == 0) {
      v.flags |= kWarmup;
      return;
    }
    const float x = level_of(v);
    const bool has_jump = s.k > 0;
    const float j = has_jump ? math::sub(x, history_mean(s)) : 0.0f;
    v.delta = j;
    const float lc = log_ceiling();
    if (calibrating(s)) {
      // The learned rules are not ready (kWarmup); the ceiling guards.
      // risk = x / log2(ceiling): above 1 exactly when it fires.
      v.flags |= kWarmup;
      v.risk = lc < inf_f() ? math::max(math::div(x, lc), 0.0f) : 0.0f;  // +inf: no ceiling
      if (x > lc) v.flags |= kTriggered;
      return;
    }
    const float k = k_sigma(), lf = log_floor();
    const float loc = detail::logstat_loc(s.level, s.k, beta);
    const float tx = math::min(threshold(s.level, s.k, loc, k, lf), lc);
    float risk = risk_of(loc, x, tx);
    bool fired = x > tx;
    const std::uint32_t kj = jump_count(s);
    if (has_jump && kj >= warmup) {
      const float loc_j = detail::logstat_loc(s.jump, kj, beta);
      const float tj = threshold(s.jump, kj, loc_j, k, lf);
      risk = math::max(risk, risk_of(loc_j, j, tj));
      fired = fired || j > tj;
    }
    v.risk = math::max(risk, 0.0f);
    if (fired) v.flags |= kTriggered;
    // The level threshold as a norm, for the units whose step reads it: a
    // triggered unit (the clamped feed, the denied-unit clip) and one holding
    // a slot (a recovery that clips to the target). Every other unit keeps
    // floor * mu (set above), and skips the exponential.
    if (fired || (v.flags & kInRecovery)) v.target = math::mul(v.mean, math::exp2(tx));
  }
  GNMR_HOST_DEVICE float feed(const UnitView& v) const {
    return (clamp_feed && (v.flags & kTriggered)) ? math::min(v.norm, v.target) : v.norm;
  }
  // One sample into a statistic of n samples: winsorized once it is warm.
  GNMR_HOST_DEVICE void push(detail::LogStat& a, std::uint32_t n, float x) const {
    const float one_m = math::sub(1.0f, beta);
    if (n > 0) {
      const float loc = detail::logstat_loc(a, n, beta);
      if (n >= warmup) {
        const float w = math::mul(winsor, math::max(detail::logstat_spread(a, n), min_spread));
        x = math::min(math::max(x, math::sub(loc, w)), math::add(loc, w));
      }
      const float dev = x > loc ? math::sub(x, loc) : math::sub(loc, x);
      a.s = math::add(math::mul(beta, a.s), math::mul(one_m, dev));
      a.p = math::mul(a.p, beta);
    }
    a.m = math::add(math::mul(beta, a.m), math::mul(one_m, x));
  }
  GNMR_HOST_DEVICE void update(State& s, const UnitView& v) const {
    if (v.count == 0) return;  // r undefined this step
    if (calibrating(s) && (v.flags & kTriggered)) return;  // the ceiling fired: not calm behaviour
    const float x = level_of(v);
    if (s.k > 0) push(s.jump, jump_count(s), math::sub(x, history_mean(s)));
    push(s.level, s.k, x);
    const std::uint32_t w = static_cast<std::uint32_t>(window);
    std::uint32_t head = s.k % w;
    detail::ring_push(s.ring, head, w, x);
    s.k = detail::saturating_inc(s.k);
  }
  // The layout (v2: one count, no stored ring position), the ring's
  // capacity and modulus shape the stored state (io/state_id.hpp): a blob of
  // the first layout ("cap=8,window=4") is refused, naming both.
  std::string state_key() const {
    return "v2,cap=" + std::to_string(Cap) + ",window=" + std::to_string(window);
  }
  std::string check() const {
    if (!(rate > 0.0f && rate < 0.5f))
      return detail::bad("CalibratedTrigger", "rate", "in (0, 0.5)", rate);
    if (!(floor >= 1.0f) || !(floor < inf_f()))
      return detail::bad("CalibratedTrigger", "floor", "finite and >= 1", floor);
    if (!(ceiling >= floor) || !(ceiling > 1.0f))
      return detail::bad("CalibratedTrigger", "ceiling", "> 1 and >= floor (+inf: none)", ceiling);
    if (window < 1 || window > Cap)
      return "gnmr: CalibratedTrigger: window must be in [1, " + std::to_string(Cap) +
             "] (the template's Cap), got " + std::to_string(window);
    if (warmup < 2)
      return detail::bad("CalibratedTrigger", "warmup", ">= 2 (a spread needs two samples)", warmup);
    return detail::first_error({detail::in_range_open_hi("CalibratedTrigger", "beta", beta, 0.0, 1.0),
                                detail::positive("CalibratedTrigger", "winsor", winsor),
                                detail::positive("CalibratedTrigger", "min_spread", min_spread)});
  }
};
using CalibratedTrigger = CalibratedTriggerT<4>;

}  // namespace gnmr
