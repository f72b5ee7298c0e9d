// gnmr/step/step.hpp — one controller step, as per-unit functors.
//
// The step has three per-unit phases and two global ones:
//   evaluate_unit  (pure) norm -> mean, ratio, trigger verdict, lock status
//   [select]       free slots -> the highest-risk candidates (backend-owned)
//   [systemic]     triggered count (+ total norm) -> SystemicStep
//                  (decide_systemic, gnmr/step/systemic.hpp; backend-owned sums)
//   commit_unit    grant, recovery action, denied / systemic action, feed
//                  the tracker, trigger history
//   SummaryAcc     counts and the max ratio, mergeable in any tree shape
// The host backend runs them in loops, the CUDA backend in kernels: the
// CPU tests therefore exercise exactly the code the GPU runs. evaluate_unit
// runs once per unit and step on both: phase 1 keeps what it decided in a
// UnitVerdict (32 bytes), and phase 3 rebuilds the view from it (view_of)
// instead of evaluating again; a trigger's arithmetic (the calibrated
// trigger's logarithms and thresholds) is not repeated.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "gnmr/core/math.hpp"
#include "gnmr/core/types.hpp"
#include "gnmr/detail/canonical.hpp"
#include "gnmr/detail/check.hpp"
#include "gnmr/policy/interface.hpp"
#include "gnmr/policy/recovery.hpp"
#include "gnmr/step/systemic.hpp"

namespace gnmr {

// Controller-wide settings that are not a policy's.
struct ControllerOptions {
  float eps = 1e-12f;  // ratio floor, r = n / max(mu, eps)
  // A norm of exactly 0 means the unit got no gradient this step (an MoE
  // expert nobody was routed to, a frozen or unused parameter). By default it
  // is *not a sample*: no verdict, nothing fed, the ratio history untouched
  // (kZeroNorm). Feeding zeros would drag mu toward 0, and a unit whose first
  // samples are all 0 would then have mu = 0 for good (the clamped feed
  // min(n, tau * 0) = 0 keeps it there) and trigger on every later step.
  // true: 0 is fed like any norm (docs/algorithm.md, Mean).
  bool zero_is_sample = false;
  // Many units trigger at once: a global action instead of the denials.
  // Off by default (action kOff): the controller then makes today's
  // decisions bit for bit.
  SystemicRule systemic{};
  // A triggered unit that gets no slot: a clip without a slot. Off by default.
  DeniedRule denied{};
  // A periodic restart of every unit's statistic (SPAM's DeltaT timer,
  // galore_torch/SPAM.py @e8185fb): on every step t with t % every == 0 each
  // unit's mean tracker and trigger state start afresh *before* that step's
  // verdict (the step's own sample is the first one in), the unit gets
  // kResetMoments, and no unit is judged while t % every < quiet (kWarmup).
  // every = 0: off, the default (the decisions are then today's, bit for bit).
  struct TimerRule {
    std::uint32_t every = 0;
    std::uint32_t quiet = 0;
  } timer{};
  // AdaGC's warm-up: a global clip of the first steps (WarmupClipRule,
  // gnmr/step/systemic.hpp). Off by default.
  WarmupClipRule warmup_clip{};

  std::string check() const {
    return detail::first_error({(eps > 0.0f && is_finite(eps))
                                    ? std::string()
                                    : detail::bad("ControllerOptions", "eps", "finite and > 0", eps),
                                systemic.check(), denied.check(), warmup_clip.check(),
                                timer.every != 0u && timer.quiet > timer.every
                                    ? detail::bad("ControllerOptions", "timer.quiet", "<= timer.every",
                                                  static_cast<float>(timer.quiet))
                                    : std::string()});
  }
};

namespace detail {

template <class Mean, class = void>
struct has_stddev : std::false_type {};
template <class Mean>
struct has_stddev<Mean, std::void_t<decltype(std::declval<const Mean&>().stddev(
                            std::declval<const typename Mean::State&>()))>> : std::true_type {};

template <class Trigger, class = void>
struct needs_stddev : std::false_type {};
template <class Trigger>
struct needs_stddev<Trigger, std::void_t<decltype(Trigger::kNeedsStddev)>>
    : std::integral_constant<bool, Trigger::kNeedsStddev> {};

// A trigger that needs each unit's aux signal (NoiseFloorTrigger) says so
// with `static constexpr bool kNeedsAux = true`: the controllers then refuse
// a step without it (step_with_aux).
template <class Trigger, class = void>
struct needs_aux : std::false_type {};
template <class Trigger>
struct needs_aux<Trigger, std::void_t<decltype(Trigger::kNeedsAux)>>
    : std::integral_constant<bool, Trigger::kNeedsAux> {};

template <class Mean>
GNMR_HOST_DEVICE float stddev_of(const Mean& m, const typename Mean::State& s) {
  if constexpr (has_stddev<Mean>::value) {
    return m.stddev(s);
  } else {
    (void)m;
    (void)s;
    return 0.0f;
  }
}

// Everything a step needs, trivially copyable: this is the kernel params
// struct of the CUDA backend and the host controller's configuration.
template <class Norm, class Mean, class Trigger, class Recovery, class Budget>
struct PolicySet {
  static_assert(CheckPolicies<Norm, Mean, Trigger, Recovery, Budget>::value, "docs/policies.md");
  static_assert(!needs_stddev<Trigger>::value || has_stddev<Mean>::value,
                "gnmr: this TriggerPolicy (e.g. ZScoreTrigger) needs a MeanTracker with a "
                "spread: use EmaMeanVar or WindowMean<Cap>, not EmaMean/CumulativeMean/NoMean");
  using NormT = Norm;
  using MeanT = Mean;
  using TriggerT = Trigger;
  using RecoveryT = Recovery;
  using BudgetT = Budget;
  Norm norm;
  Mean mean;
  Trigger trigger;
  Recovery recovery;
  Budget budget;
  ControllerOptions opt;

  struct UnitState {
    typename Mean::State mean;
    typename Trigger::State trigger;
    typename Recovery::State recovery;
    typename Budget::State budget;
    // The four states at their offsets, the gaps between them zero
    // (gnmr/detail/canonical.hpp: what a state blob stores).
    void canonical_bytes(unsigned char* out) const {
      detail::canonical_member(*this, mean, out);
      detail::canonical_member(*this, trigger, out);
      detail::canonical_member(*this, recovery, out);
      detail::canonical_member(*this, budget, out);
    }
  };
  GNMR_HOST_DEVICE static UnitState init_unit() {
    return UnitState{Mean::init(), Trigger::init(), Recovery::init(), Budget::init()};
  }
};

// Does unit a rank before unit b for a slot? Higher risk first, ties to the
// lower index. A total order on non-NaN risks, so any selection algorithm
// (sort, nth_element, a GPU top-k) picks the same set.
GNMR_HOST_DEVICE bool ranks_before(float risk_a, std::uint32_t a, float risk_b, std::uint32_t b) {
  return risk_a > risk_b || (!(risk_b > risk_a) && a < b);
}

GNMR_HOST_DEVICE bool is_candidate(std::uint32_t flags) {
  return (flags & kTriggered) && !(flags & (kInRecovery | kCooldown | kNonFinite));
}

// ControllerOptions::timer: does step t restart every unit's statistic, and
// is it inside the quiet window after a restart?
GNMR_HOST_DEVICE bool timer_restarts(const ControllerOptions& o, std::int64_t t) {
  return o.timer.every != 0u && t > 0 && t % static_cast<std::int64_t>(o.timer.every) == 0;
}
GNMR_HOST_DEVICE bool timer_quiet(const ControllerOptions& o, std::int64_t t) {
  return o.timer.every != 0u && t >= static_cast<std::int64_t>(o.timer.every) &&
         t % static_cast<std::int64_t>(o.timer.every) < static_cast<std::int64_t>(o.timer.quiet);
}

// A trigger may say that a unit's history is an outlier and its statistics
// must start afresh with this step's sample (CalibratedTrigger::restarts: a
// spike at the very first step became the unit's mean). Optional member:
//   GNMR_HOST_DEVICE bool restarts(const State&, float ratio) const
template <class Trigger, class = void>
struct has_restarts : std::false_type {};
template <class Trigger>
struct has_restarts<Trigger, std::void_t<decltype(std::declval<const Trigger&>().restarts(
                                 std::declval<const typename Trigger::State&>(), 0.0f))>> : std::true_type {};

// Does unit s's history restart at this step's norm? Only a finite, positive
// norm judged against a mean with a sample can say so (a zero is no
// evidence); the ratio is evaluate_unit_from's, bit for bit.
template <class PS>
GNMR_HOST_DEVICE bool history_restarts(const PS& p, const typename PS::UnitState& s, float norm) {
  if constexpr (has_restarts<typename PS::TriggerT>::value) {
    if (!is_finite(norm) || !(norm > 0.0f) || PS::MeanT::count(s.mean) < 1u) return false;
    const float ratio = math::div(norm, math::max(p.mean.mean(s.mean), p.opt.eps));
    return p.trigger.restarts(s.trigger, ratio);
  } else {
    (void)p;
    (void)s;
    (void)norm;
    return false;
  }
}

// What the denied-unit rule (ControllerOptions::denied) scales a denied or
// held unit by: 1 when it is off, else a clip to kappa * mu or to the
// trigger's target (only ever lowers the scale).
template <class PS>
GNMR_HOST_DEVICE float denied_scale(const PS& p, const UnitView& v) {
  switch (p.opt.denied.action) {
    case DeniedAction::kClip: return clip_scale(v.norm, math::mul(p.opt.denied.kappa, v.mean), 0.0f);
    case DeniedAction::kClipTarget: return clip_scale(v.norm, v.target, 0.0f);
    default: return 1.0f;
  }
}

// Phase 1's body, from the statistic's and the trigger's states given apart
// (evaluate_unit passes fresh ones on a timer step).
template <class PS>
GNMR_HOST_DEVICE UnitView evaluate_unit_from(const PS& p, const typename PS::UnitState& s,
                                             const typename PS::MeanT::State& ms,
                                             const typename PS::TriggerT::State& ts, float norm,
                                             std::int64_t t, std::uint32_t unit, float aux = 0.0f) {
  using Rules = typename PS::BudgetT::Rules;
  UnitView v{};
  v.norm = norm;
  v.aux = aux;
  v.unit = unit;
  v.step = t;
  v.granted_at = s.budget.granted_at;
  v.count = PS::MeanT::count(ms);
  v.mean = p.mean.mean(ms);
  v.stddev = stddev_of(p.mean, ms);
  if (Rules::in_recovery(p.budget, s.budget, t))
    v.flags |= kInRecovery;
  else if (!Rules::eligible(p.budget, s.budget, t))
    v.flags |= kCooldown;
  if (Rules::released(p.budget, s.budget, t)) v.flags |= kReleased;
  if (!is_finite(norm)) {
    v.flags |= kNonFinite;
    v.risk = inf_f();
    return v;
  }
  if (norm == 0.0f && !p.opt.zero_is_sample) {
    v.flags |= kZeroNorm;  // no gradient: nothing to judge, nothing to learn from
    return v;
  }
  v.ratio = v.count >= 1 ? math::div(norm, math::max(v.mean, p.opt.eps)) : 0.0f;
  p.trigger.evaluate(ts, v);
  if (is_nan(v.risk)) v.risk = 0.0f;
  if (timer_quiet(p.opt, t)) {  // the timer's quiet window: no verdict
    v.flags = (v.flags & ~kTriggered) | kWarmup;
    v.risk = 0.0f;
  }
  return v;
}

// Phase 1 (pure): unit i's view at step t from its state and norm (and the
// caller's aux signal, 0 when none; UnitView::aux).
template <class PS>
GNMR_HOST_DEVICE UnitView evaluate_unit(const PS& p, const typename PS::UnitState& s, float norm,
                                        std::int64_t t, std::uint32_t unit, float aux = 0.0f) {
  const bool timer = timer_restarts(p.opt, t);
  const bool history = !timer && history_restarts(p, s, norm);
  if (timer || history) {
    // Judged against a fresh statistic: what the timer, or the trigger's
    // verdict on the unit's history, restarts (the sample is its first).
    const typename PS::MeanT::State m0 = PS::MeanT::init();
    const typename PS::TriggerT::State t0 = PS::TriggerT::init();
    UnitView v = evaluate_unit_from(p, s, m0, t0, norm, t, unit, aux);
    if (history) v.flags |= kRestart;
    return v;
  }
  return evaluate_unit_from(p, s, s.mean, s.trigger, norm, t, unit, aux);
}

// What evaluate_unit decided about a unit, kept from phase 1 to phase 3
// (the host controller's per-unit buffer, the device's workspace): the
// view's fields that the evaluation computes. The norm, the step, the unit
// and granted_at are known to phase 3 (the budget state is not changed in
// between), so view_of(verdict_of(v), ...) is v, bit for bit, but for aux
// (0 in the commit's view: only evaluate reads it, UnitView::aux).
struct UnitVerdict {
  float mean, ratio, delta, risk, stddev, target;
  std::uint32_t count, flags;
};
GNMR_HOST_DEVICE UnitVerdict verdict_of(const UnitView& v) {
  return UnitVerdict{v.mean, v.ratio, v.delta, v.risk, v.stddev, v.target, v.count, v.flags};
}
GNMR_HOST_DEVICE UnitView view_of(const UnitVerdict& d, float norm, std::int64_t t, std::uint32_t unit,
                                  std::int64_t granted_at) {
  UnitView v{};
  v.norm = norm;
  v.mean = d.mean;
  v.ratio = d.ratio;
  v.delta = d.delta;
  v.risk = d.risk;
  v.stddev = d.stddev;
  v.target = d.target;
  v.count = d.count;
  v.flags = d.flags;
  v.unit = unit;
  v.step = t;
  v.granted_at = granted_at;
  return v;
}

// Phase 3: apply the selection's verdict and the step's systemic outcome,
// and advance the unit's state. Returns the final view (flags complete);
// writes the decision and report. Order (docs/algorithm.md, "Order of a
// step"): grant; a triggered unit without a slot is replaced by the
// systemic action on a systemic step, denied otherwise; then the recovery
// action, the denied-unit clip, the systemic action (each only lowers the
// scale: min), and the statistics.
template <class PS>
GNMR_HOST_DEVICE UnitView commit_unit(const PS& p, typename PS::UnitState& s, UnitView v,
                                      bool granted, const SystemicStep& sys, UnitDecision& dec,
                                      UnitReport* rep, std::uint32_t& global_skip) {
  using Rules = typename PS::BudgetT::Rules;
  if (granted) {
    s.budget.granted_at = v.step;
    v.granted_at = v.step;
    v.flags |= kGranted | kInRecovery;
    v.flags &= ~kCooldown;
  }
  const bool unserved = (v.flags & kTriggered) && !(v.flags & kInRecovery);
  if (unserved && sys.action == 0u) v.flags |= kDenied;
  const bool timer = timer_restarts(p.opt, v.step);
  const bool restart = timer || (v.flags & kRestart) != 0u;
  if (restart) {  // the timer (ControllerOptions::timer) or kRestart: evaluate_unit saw these fresh states
    s.mean = PS::MeanT::init();
    s.trigger = PS::TriggerT::init();
  }
  dec.scale = 1.0f;
  dec.flags = v.flags;
  if (v.flags & kNonFinite) {
    // The safety action: no update, and the sample stays out of every
    // statistic and out of the systemic action.
    dec.flags |= kSkip;
    dec.scale = 0.0f;
    // A promotion holds for its whole lock: ask the action on a throw-away
    // copy of its state (nothing else of the answer is kept), so kPromote
    // does not flicker off on a non-finite step in the middle of the lock.
    if (v.flags & kInRecovery) {
      typename PS::RecoveryT::State scratch = s.recovery;
      UnitDecision probe{1.0f, v.flags};
      std::uint32_t ignored = 0;
      p.recovery.apply(scratch, v, probe, ignored);
      dec.flags |= probe.flags & kPromote;
    }
  } else {
    p.recovery.apply(s.recovery, v, dec, global_skip);
    if ((v.flags & kDenied) && p.opt.denied.action != DeniedAction::kNone)
      dec.scale = math::min(dec.scale, denied_scale(p, v));
    if (sys.action == static_cast<std::uint32_t>(SystemicAction::kClipTriggered)) {
      if (unserved) {
        dec.scale = math::min(dec.scale, clip_scale(v.norm, math::mul(p.opt.systemic.kappa, v.mean), 0.0f));
        dec.flags |= kSystemic;
      }
    } else if (sys.action == static_cast<std::uint32_t>(SystemicAction::kGlobalClip)) {
      // s is in [0, 1] (load_state refuses a tracker that could give anything
      // else); a skipped unit keeps its scale 0 (select, not multiply).
      if (!(dec.flags & kSkip)) dec.scale = math::min(dec.scale, sys.scale);
      dec.flags |= kSystemic;
    } else if (sys.action == static_cast<std::uint32_t>(SystemicAction::kSkip)) {
      set_skip(dec);
      dec.flags |= kSystemic;
    } else if (sys.action == static_cast<std::uint32_t>(SystemicAction::kHold)) {
      // No slot this step: not denied, but bounded as a denied unit would be
      // (the denied-unit rule, when it is on), so a spike on a held step
      // does not pass unscaled.
      if (unserved) {
        dec.flags |= kSystemic;
        if (p.opt.denied.action != DeniedAction::kNone) dec.scale = math::min(dec.scale, denied_scale(p, v));
      }
    }
    // The warm-up clip (ControllerOptions::warmup_clip): every unit scaled
    // by the global coefficient, and the statistic fed the clipped norm.
    UnitView fed = v;
    if (sys.warm_scale < 1.0f) {
      if (!(dec.flags & kSkip)) {
        dec.scale = math::min(dec.scale, sys.warm_scale);
        dec.flags |= kSystemic;
      }
      fed.norm = math::mul(v.norm, sys.warm_scale);
    }
    // A zero norm (kZeroNorm) stays out of the statistics; a lock still runs
    // its course (scale 1: 0 * x).
    if (!(v.flags & kZeroNorm)) {
      p.mean.push(s.mean, p.trigger.feed(fed));
      p.trigger.update(s.trigger, v);
    }
    if (timer) dec.flags |= kResetMoments;  // SPAM's timer resets the moments; kRestart does not
  }
  v.flags = dec.flags;
  if (rep) {
    rep->norm = v.norm;
    rep->mean = v.mean;
    rep->ratio = v.ratio;
    rep->delta = v.delta;
    rep->risk = v.risk;
    rep->scale = dec.scale;
    rep->flags = dec.flags;
    rep->lock_left = Rules::lock_left(p.budget, s.budget, v.step);
  }
  return v;
}

// Phase 4: the step summary, built from final views in any merge order.
struct SummaryAcc {
  std::uint32_t triggered, granted, in_recovery, denied, nonfinite, released, skip;
  float max_ratio;
  std::int32_t max_unit;  // -1: none

  GNMR_HOST_DEVICE static SummaryAcc zero() { return SummaryAcc{0, 0, 0, 0, 0, 0, 0, 0.0f, -1}; }
  GNMR_HOST_DEVICE void add(const UnitView& v, std::uint32_t unit, std::uint32_t gskip) {
    triggered += (v.flags & kTriggered) ? 1u : 0u;
    granted += (v.flags & kGranted) ? 1u : 0u;
    in_recovery += (v.flags & kInRecovery) ? 1u : 0u;
    denied += (v.flags & kDenied) ? 1u : 0u;
    nonfinite += (v.flags & kNonFinite) ? 1u : 0u;
    released += (v.flags & kReleased) ? 1u : 0u;
    skip |= gskip;
    if (!(v.flags & (kNonFinite | kZeroNorm)) && v.count >= 1) merge_max(v.ratio, static_cast<std::int32_t>(unit));
  }
  GNMR_HOST_DEVICE void merge_max(float r, std::int32_t u) {
    if (max_unit < 0 || r > max_ratio || (!(r < max_ratio) && u < max_unit)) {
      max_ratio = r;
      max_unit = u;
    }
  }
  GNMR_HOST_DEVICE void merge(const SummaryAcc& o) {
    triggered += o.triggered;
    granted += o.granted;
    in_recovery += o.in_recovery;
    denied += o.denied;
    nonfinite += o.nonfinite;
    released += o.released;
    skip |= o.skip;
    if (o.max_unit >= 0) merge_max(o.max_ratio, o.max_unit);
  }
  GNMR_HOST_DEVICE StepSummary finish(std::int64_t t, const SystemicStep& sys) const {
    StepSummary s;
    s.step = t;
    s.triggered = triggered;
    s.granted = granted;
    s.in_recovery = in_recovery;
    s.denied = denied;
    s.nonfinite = nonfinite;
    s.released = released;
    s.max_ratio = max_ratio;
    s.max_ratio_unit = max_unit;
    s.skip_step = skip | (sys.action == static_cast<std::uint32_t>(SystemicAction::kSkip) ? 1u : 0u);
    s.systemic = sys.action;
    s.systemic_scale = sys.scale;
    s.total_norm = sys.total_norm;
    s.total_mean = sys.total_mean;
    return s;
  }
};

}  // namespace detail
}  // namespace gnmr
