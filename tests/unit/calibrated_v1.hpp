// tests/unit/calibrated_v1.hpp — the calibrated trigger in its first state
// layout (gnmr 2026-11-27: a count per statistic, both bias-correction
// products, a stored ring position; 80 bytes at Cap 8), kept verbatim as a
// test reference: the layout of gnmr/policy/trigger_calibrated.hpp (44
// bytes at Cap 4) must decide and report bit for bit as this one did
// (test_calibrated.cpp). Only the names changed (namespace v1, the struct's),
// and the history restart (restarts()) was added when the rule was.
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
namespace testref {

namespace v1 {
// One robust running location/spread pair (a signal's statistic).
struct LogStat {
  float m;       // EMA of the winsorized samples (raw: divide by 1 - m_pow)
  float s;       // EMA of |sample - location before it| (raw: divide by 1 - s_pow)
  float m_pow;   // beta^k for m
  float s_pow;   // beta^(k-1) for s: the first sample has no deviation
  std::uint32_t k;  // samples accepted
};
GNMR_HOST_DEVICE LogStat logstat_init() { return LogStat{0.0f, 0.0f, 1.0f, 1.0f, 0u}; }
GNMR_HOST_DEVICE float logstat_loc(const LogStat& a) {
  return a.k ? math::div(a.m, math::sub(1.0f, a.m_pow)) : 0.0f;
}
GNMR_HOST_DEVICE float logstat_spread(const LogStat& a) {
  return a.k > 1 ? math::div(a.s, math::sub(1.0f, a.s_pow)) : 0.0f;
}
}  // namespace v1

template <int Cap = 8>
struct CalibratedTriggerV1 {
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

  struct State {
    float ring[static_cast<std::size_t>(Cap)];  // last values of x, oldest overwritten first
    std::uint32_t head;
    std::uint32_t n;   // values in the ring (saturating at window)
    v1::LogStat level, jump;
  };
  GNMR_HOST_DEVICE static State init() {
    State s{};
    s.level = v1::logstat_init();
    s.jump = v1::logstat_init();
    return s;
  }

  // K = ln(1 / rate) (each rule at rate / 2 under the Laplace tail).
  GNMR_HOST_DEVICE float k_sigma() const { return math::mul(math::log2(math::div(1.0f, rate)), 0.693147181f); }
  GNMR_HOST_DEVICE float log_floor() const { return math::log2(floor); }
  GNMR_HOST_DEVICE float log_ceiling() const { return ceiling < inf_f() ? math::log2(ceiling) : inf_f(); }
  // While the level statistic calibrates, only the ceiling judges.
  GNMR_HOST_DEVICE bool calibrating(const State& s) const { return s.level.k < warmup; }
  // Added with the rule (2026-11-28), so that this layout still decides as
  // today's: the history restarts on a ratio below 1 / ceiling while
  // calibrating (gnmr/policy/trigger_calibrated.hpp).
  GNMR_HOST_DEVICE bool restarts(const State& s, float ratio) const {
    if (!calibrating(s) || !(ceiling < inf_f())) return false;
    return math::log2(ratio) < -log_ceiling();
  }

  GNMR_HOST_DEVICE float level_of(const UnitView& v) const { return math::log2(v.ratio); }
  GNMR_HOST_DEVICE float history_mean(const State& s) const {
    return detail::ring_mean(s.ring, s.head, static_cast<std::uint32_t>(window), s.n);
  }
  // A rule's threshold: max(m + K max(s, min_spread), log2(floor)); k and lf
  // are k_sigma() and log_floor(), computed once per evaluation.
  GNMR_HOST_DEVICE float threshold(const v1::LogStat& a, float k, float lf) const {
    const float sp = math::max(v1::logstat_spread(a), min_spread);
    return math::max(math::add(v1::logstat_loc(a), math::mul(k, sp)), lf);
  }
  // (value - m) / (threshold - m): above 1 exactly when the rule fires.
  GNMR_HOST_DEVICE float risk_of(const v1::LogStat& a, float value, float thr) const {
    const float loc = v1::logstat_loc(a);
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
    const bool has_jump = s.n > 0;
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
    const float tx = math::min(threshold(s.level, k, lf), lc);
    v.target = math::mul(v.mean, math::exp2(tx));
    float risk = risk_of(s.level, x, tx);
    bool fired = x > tx;
    if (has_jump && s.jump.k >= warmup) {
      const float tj = threshold(s.jump, k, lf);
      risk = math::max(risk, risk_of(s.jump, j, tj));
      fired = fired || j > tj;
    }
    v.risk = math::max(risk, 0.0f);
    if (fired) v.flags |= kTriggered;
  }
  GNMR_HOST_DEVICE float feed(const UnitView& v) const {
    return (clamp_feed && (v.flags & kTriggered)) ? math::min(v.norm, v.target) : v.norm;
  }
  // One sample into a statistic: winsorized once the statistic is warm.
  GNMR_HOST_DEVICE void push(v1::LogStat& a, float x) const {
    const float one_m = math::sub(1.0f, beta);
    if (a.k > 0) {
      const float loc = v1::logstat_loc(a);
      if (a.k >= warmup) {
        const float w = math::mul(winsor, math::max(v1::logstat_spread(a), min_spread));
        x = math::min(math::max(x, math::sub(loc, w)), math::add(loc, w));
      }
      const float dev = x > loc ? math::sub(x, loc) : math::sub(loc, x);
      a.s = math::add(math::mul(beta, a.s), math::mul(one_m, dev));
      a.s_pow = math::mul(a.s_pow, beta);
    }
    a.m = math::add(math::mul(beta, a.m), math::mul(one_m, x));
    a.m_pow = math::mul(a.m_pow, beta);
    a.k = detail::saturating_inc(a.k);
  }
  GNMR_HOST_DEVICE void update(State& s, const UnitView& v) const {
    if (v.count == 0) return;  // r undefined this step
    if (calibrating(s) && (v.flags & kTriggered)) return;  // the ceiling fired: not calm behaviour
    const float x = level_of(v);
    if (s.n > 0) push(s.jump, math::sub(x, history_mean(s)));
    push(s.level, x);
    const std::uint32_t w = static_cast<std::uint32_t>(window);
    detail::ring_push(s.ring, s.head, w, x);
    s.n = s.n < w ? s.n + 1 : w;
  }
  // The ring's capacity and modulus shape the stored state (io/state_id.hpp).
  std::string state_key() const { return "cap=" + std::to_string(Cap) + ",window=" + std::to_string(window); }
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

}  // namespace testref
}  // namespace gnmr
