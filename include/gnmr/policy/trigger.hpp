// gnmr/policy/trigger.hpp — TriggerPolicy: risk score and verdict per unit.
//
// A trigger sees the unit's finite norm, its mean (and spread) at the start
// of the step, and its own small State; it fills v.delta, v.risk, v.target
// and the kTriggered / kWarmup flags. feed() says what the MeanTracker
// accepts at the end of the step; update() advances the trigger's own
// history on finite steps. Non-finite norms never reach a trigger: the
// controller flags them NONFINITE with risk +inf first. Zero norms do not
// either, unless ControllerOptions::zero_is_sample is set (kZeroNorm).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "gnmr/core/math.hpp"
#include "gnmr/core/numeric.hpp"
#include "gnmr/core/types.hpp"
#include "gnmr/detail/check.hpp"

namespace gnmr {

// GNMR (default): triggered when k >= warmup and (r > tau or d > delta),
// d = r - mean(last `window` defined ratios of earlier finite steps).
// rho = max(r/tau, d/delta, 0). Either threshold may be +inf (off).
template <int Cap = 8>
struct GnmrTriggerT {
  static_assert(Cap >= 1 && Cap <= 64, "GnmrTriggerT<Cap>: Cap must be in [1, 64]");
  static constexpr const char* kName = "gnmr";
  float tau = 3.0f;
  float delta = 1.5f;
  std::uint32_t warmup = 10;
  int window = 4 < Cap ? 4 : Cap;  // w, the Delta-GNMR horizon
  bool clamp_feed = true;          // feed min(n, tau*mu) on triggered steps

  struct State {
    float ring[static_cast<std::size_t>(Cap)];  // last ratios, oldest overwritten first
    std::uint32_t head;  // next slot
    std::uint32_t n;     // defined ratios seen (saturating at window)
  };
  GNMR_HOST_DEVICE static State init() {
    State s{};
    return s;
  }

  GNMR_HOST_DEVICE float history_mean(const State& s) const {
    return detail::ring_mean(s.ring, s.head, static_cast<std::uint32_t>(window), s.n);
  }

  GNMR_HOST_DEVICE void evaluate(const State& s, UnitView& v) const {
    v.delta = 0.0f;
    v.risk = 0.0f;
    v.target = math::mul(tau, v.mean);
    if (v.count == 0) {
      v.flags |= kWarmup;
      return;
    }
    if (s.n > 0) v.delta = math::sub(v.ratio, history_mean(s));
    if (v.count < warmup) {
      v.flags |= kWarmup;
      return;
    }
    // A threshold at +inf is off: its term is 0, not r/inf, which is NaN for
    // r = +inf (n near FLT_MAX over a tiny mean) and would sink the risk.
    const float a = tau < inf_f() ? math::div(v.ratio, tau) : 0.0f;
    const float b = delta < inf_f() ? math::div(v.delta, delta) : 0.0f;
    v.risk = math::max(math::max(a, b), 0.0f);
    if (v.ratio > tau || v.delta > delta) v.flags |= kTriggered;
  }
  GNMR_HOST_DEVICE float feed(const UnitView& v) const {
    return (clamp_feed && (v.flags & kTriggered)) ? math::min(v.norm, v.target) : v.norm;
  }
  GNMR_HOST_DEVICE void update(State& s, const UnitView& v) const {
    if (v.count == 0) return;  // r undefined this step
    const std::uint32_t w = static_cast<std::uint32_t>(window);
    // A finite norm can still give r = +inf (n near FLT_MAX over a small
    // mean); keep the history finite (the soak test checks it) — FLT_MAX
    // gives the same verdicts, d is hugely negative either way.
    detail::ring_push(s.ring, s.head, w, math::min(v.ratio, 3.40282347e+38f));
    s.n = s.n < w ? s.n + 1 : w;
  }
  std::string check() const {
    if (!(tau < inf_f()) && !(delta < inf_f()))
      return "gnmr: GnmrTrigger: tau and delta cannot both be +inf (nothing would trigger)";
    if (window < 1 || window > Cap)
      return "gnmr: GnmrTrigger: window must be in [1, " + std::to_string(Cap) +
             "] (the template's Cap), got " + std::to_string(window);
    return detail::first_error({detail::positive_or_inf("GnmrTrigger", "tau", tau),
                                detail::positive_or_inf("GnmrTrigger", "delta", delta)});
  }
};
using GnmrTrigger = GnmrTriggerT<8>;

// Fixed threshold on the norm itself (PyTorch clip_grad_norm_):
// triggered when max_norm / (n + eps) < 1, i.e. exactly when torch's
// clamp(max_norm / (n + eps), max=1) would scale.
struct FixedThreshold {
  static constexpr const char* kName = "fixed";
  float max_norm = 1.0f;
  float eps = 1e-6f;

  struct State {};
  GNMR_HOST_DEVICE static State init() { return State{}; }
  GNMR_HOST_DEVICE void evaluate(const State&, UnitView& v) const {
    v.delta = 0.0f;
    v.target = max_norm;
    v.risk = math::div(v.norm, max_norm);
    if (math::div(max_norm, math::add(v.norm, eps)) < 1.0f) v.flags |= kTriggered;
  }
  GNMR_HOST_DEVICE float feed(const UnitView& v) const { return v.norm; }
  GNMR_HOST_DEVICE void update(State&, const UnitView&) const {}
  std::string check() const {
    return detail::first_error({detail::positive("FixedThreshold", "max_norm", max_norm),
                                detail::non_negative("FixedThreshold", "eps", eps)});
  }
};

// Every finite unit, every step (always-on actions such as GradientStabilizer).
struct AlwaysTrigger {
  static constexpr const char* kName = "always";
  struct State {};
  GNMR_HOST_DEVICE static State init() { return State{}; }
  GNMR_HOST_DEVICE void evaluate(const State&, UnitView& v) const {
    v.delta = 0.0f;
    v.target = v.norm;
    v.risk = 1.0f;
    v.flags |= kTriggered;
  }
  GNMR_HOST_DEVICE float feed(const UnitView& v) const { return v.norm; }
  GNMR_HOST_DEVICE void update(State&, const UnitView&) const {}
  std::string check() const { return {}; }
};

}  // namespace gnmr
