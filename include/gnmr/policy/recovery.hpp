// gnmr/policy/recovery.hpp — RecoveryAction: what a unit in recovery gets.
//
// apply() runs for every unit with a finite norm, every step, after the
// budget has decided; v.flags tells whether the unit is kInRecovery and
// whether it was kGranted this step. An action writes the UnitDecision
// (scale, kSkip / kResetMoments / kPromote) and may ask for a global skip.
// apply() also runs on a kZeroNorm step (no gradient; a lock in progress
// keeps its flags), so an action with statistics of its own must leave them
// alone there, as NormReplace does. A unit not in recovery keeps scale 1 and
// no action flags. kSkip always comes with scale 0, and consumers must
// *select* on kSkip rather than multiply by the scale (0 * NaN is NaN).
#pragma once

#include <cstdint>
#include <string>

#include "gnmr/core/math.hpp"
#include "gnmr/core/types.hpp"
#include "gnmr/detail/canonical.hpp"
#include "gnmr/detail/check.hpp"

namespace gnmr {

namespace detail {
// scale = min(1, target / (n + eps)); n = 0 or a non-positive denominator keeps 1.
GNMR_HOST_DEVICE float clip_scale(float norm, float target, float eps) {
  const float den = math::add(norm, eps);
  if (!(den > 0.0f)) return 1.0f;
  return math::min(1.0f, math::div(target, den));
}
GNMR_HOST_DEVICE void set_skip(UnitDecision& d) {
  d.flags |= kSkip;
  d.scale = 0.0f;
}
}  // namespace detail

// Default: clip to kappa * mu (mu as of the start of the step).
struct ClipToMean {
  static constexpr const char* kName = "clip_to_mean";
  float kappa = 1.0f;
  struct State {};
  GNMR_HOST_DEVICE static State init() { return State{}; }
  GNMR_HOST_DEVICE void apply(State&, const UnitView& v, UnitDecision& d,
                              std::uint32_t&) const {
    if (v.flags & kInRecovery) d.scale = detail::clip_scale(v.norm, math::mul(kappa, v.mean), 0.0f);
  }
  std::string check() const { return detail::positive("ClipToMean", "kappa", kappa); }
};

// Clip to the trigger's own target (ZClip's adaptive value, a fixed max
// norm): scale = min(1, target / (n + eps)); eps = 1e-6 reproduces torch.
struct ClipToTarget {
  static constexpr const char* kName = "clip_to_target";
  float eps = 0.0f;
  struct State {};
  GNMR_HOST_DEVICE static State init() { return State{}; }
  GNMR_HOST_DEVICE void apply(State&, const UnitView& v, UnitDecision& d,
                              std::uint32_t&) const {
    if (v.flags & kInRecovery) d.scale = detail::clip_scale(v.norm, v.target, eps);
  }
  std::string check() const { return detail::non_negative("ClipToTarget", "eps", eps); }
};

// Skip the unit's update for the whole lock.
struct SkipUnit {
  static constexpr const char* kName = "skip_unit";
  struct State {};
  GNMR_HOST_DEVICE static State init() { return State{}; }
  GNMR_HOST_DEVICE void apply(State&, const UnitView& v, UnitDecision& d,
                              std::uint32_t&) const {
    if (v.flags & kInRecovery) detail::set_skip(d);
  }
  std::string check() const { return {}; }
};

// Zero the unit's optimizer moments once, on the grant step (SPAM-style).
struct ResetMoments {
  static constexpr const char* kName = "reset_moments";
  struct State {};
  GNMR_HOST_DEVICE static State init() { return State{}; }
  GNMR_HOST_DEVICE void apply(State&, const UnitView& v, UnitDecision& d,
                              std::uint32_t&) const {
    if (v.flags & kGranted) d.flags |= kResetMoments;
  }
  std::string check() const { return {}; }
};

// Route the unit to the higher-precision path for the lock.
struct PromotePrecision {
  static constexpr const char* kName = "promote";
  struct State {};
  GNMR_HOST_DEVICE static State init() { return State{}; }
  GNMR_HOST_DEVICE void apply(State&, const UnitView& v, UnitDecision& d,
                              std::uint32_t&) const {
    if (v.flags & kInRecovery) d.flags |= kPromote;
  }
  std::string check() const { return {}; }
};

// Skip the unit and suggest skipping the whole step when it is granted
// (skip-step presets: one global unit, lock 1).
struct GlobalSkip {
  static constexpr const char* kName = "global_skip";
  struct State {};
  GNMR_HOST_DEVICE static State init() { return State{}; }
  GNMR_HOST_DEVICE void apply(State&, const UnitView& v, UnitDecision& d,
                              std::uint32_t& global_skip) const {
    if (v.flags & kInRecovery) {
      detail::set_skip(d);
      global_skip = 1u;
    }
  }
  std::string check() const { return {}; }
};

// Several actions in order; later ones see the decision the earlier wrote.
// Compose<ClipToMean, ResetMoments>{{1.0f}, {}} clips and resets moments.
template <class A, class... Rest>
struct Compose {
  A first;
  Compose<Rest...> rest;
  static constexpr const char* kName = "compose";
  struct State {
    typename A::State a;
    typename Compose<Rest...>::State r;
    void canonical_bytes(unsigned char* out) const {  // gnmr/detail/canonical.hpp
      detail::canonical_member(*this, a, out);
      detail::canonical_member(*this, r, out);
    }
  };
  GNMR_HOST_DEVICE static State init() { return State{A::init(), Compose<Rest...>::init()}; }
  GNMR_HOST_DEVICE void apply(State& s, const UnitView& v, UnitDecision& d,
                              std::uint32_t& g) const {
    first.apply(s.a, v, d, g);
    rest.apply(s.r, v, d, g);
  }
  std::string check() const {
    std::string m = first.check();
    return m.empty() ? rest.check() : m;
  }
};
template <class A>
struct Compose<A> {
  A first;
  static constexpr const char* kName = "compose";
  struct State {
    typename A::State a;
    void canonical_bytes(unsigned char* out) const { detail::canonical_member(*this, a, out); }
  };
  GNMR_HOST_DEVICE static State init() { return State{A::init()}; }
  GNMR_HOST_DEVICE void apply(State& s, const UnitView& v, UnitDecision& d,
                              std::uint32_t& g) const {
    first.apply(s.a, v, d, g);
  }
  std::string check() const { return first.check(); }
};

}  // namespace gnmr
