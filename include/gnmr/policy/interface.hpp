// gnmr/policy/interface.hpp — what a policy of each kind must provide,
// checked at compile time.
//
// A controller is five policies: NormPolicy, MeanTracker, TriggerPolicy,
// RecoveryAction, BudgetScheduler (docs/policies.md describes each member,
// when the step calls it and what it may do). Nothing else says so in code:
// without these checks a policy that lacks a member fails deep inside the
// step with a long template error (a missing check() as a 600-character
// initializer-list error) or not at all until save_state (a missing kName).
// detail::PolicySet instantiates CheckPolicies<...>, so every controller,
// host or device, reports the first missing member of each policy by name,
// as its first error. The CUDA backend adds one check of its own (every
// member it calls must be GNMR_HOST_DEVICE; gnmr/cuda/policy_check.cuh).
//
// The checks test that each member exists and can be called the way the
// step calls it (static where it is called as P::f, const where it is
// called on the controller's const configuration), not what it computes.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "gnmr/core/types.hpp"
#include "gnmr/policy/norm.hpp"

namespace gnmr {
namespace detail {
namespace iface {

// has_<member><P>: the expression compiles (and converts to R where given).
#define GNMR_IFACE_HAS(trait, ...)                                                  \
  template <class P, class = void>                                                  \
  struct trait : std::false_type {};                                                \
  template <class P>                                                                \
  struct trait<P, std::void_t<decltype(__VA_ARGS__)>> : std::true_type {};
#define GNMR_IFACE_RET(trait, R, ...)                                               \
  template <class P, class = void>                                                  \
  struct trait : std::false_type {};                                                \
  template <class P>                                                                \
  struct trait<P, std::enable_if_t<std::is_convertible<decltype(__VA_ARGS__), R>::value>> \
      : std::true_type {};

template <class P>
const P& cref();  // declaration only: unevaluated operands
template <class P>
typename P::State& st();
template <class P>
const typename P::State& cst();
UnitView& view();
const UnitView& cview();

GNMR_IFACE_RET(has_kname, const char*, P::kName)
GNMR_IFACE_RET(has_check, std::string, cref<P>().check())
GNMR_IFACE_HAS(has_state, std::declval<typename P::State>())
GNMR_IFACE_RET(has_init, typename P::State, P::init())
// NormPolicy
GNMR_IFACE_RET(has_kcombine, Combine, P::kCombine)
GNMR_IFACE_RET(has_identity, float, P::identity())
GNMR_IFACE_RET(has_element, float, P::element(0.0f))
GNMR_IFACE_RET(has_combine, float, P::combine(0.0f, 0.0f))
GNMR_IFACE_RET(has_finish, float, cref<P>().finish(0.0f, 1.0))
// MeanTracker
GNMR_IFACE_RET(has_count, std::uint32_t, P::count(cst<P>()))
GNMR_IFACE_RET(has_mean, float, cref<P>().mean(cst<P>()))
GNMR_IFACE_HAS(has_push, cref<P>().push(st<P>(), 0.0f))
// TriggerPolicy
GNMR_IFACE_HAS(has_evaluate, cref<P>().evaluate(cst<P>(), view()))
GNMR_IFACE_RET(has_feed, float, cref<P>().feed(cview()))
GNMR_IFACE_HAS(has_update, cref<P>().update(st<P>(), cview()))
// RecoveryAction
GNMR_IFACE_HAS(has_apply, cref<P>().apply(st<P>(), cview(), std::declval<UnitDecision&>(),
                                          std::declval<std::uint32_t&>()))
// BudgetScheduler
GNMR_IFACE_HAS(has_granted_at, st<P>().granted_at = std::int64_t{1})
GNMR_IFACE_RET(has_granted_at_read, std::int64_t, cst<P>().granted_at)
GNMR_IFACE_RET(has_slots, std::uint32_t, cref<P>().slots())
GNMR_IFACE_RET(has_in_recovery, bool, P::Rules::in_recovery(cref<P>(), cst<P>(), std::int64_t{1}))
GNMR_IFACE_RET(has_eligible, bool, P::Rules::eligible(cref<P>(), cst<P>(), std::int64_t{1}))
GNMR_IFACE_RET(has_released, bool, P::Rules::released(cref<P>(), cst<P>(), std::int64_t{1}))
GNMR_IFACE_RET(has_lock_left, std::int32_t, P::Rules::lock_left(cref<P>(), cst<P>(), std::int64_t{1}))

#undef GNMR_IFACE_HAS
#undef GNMR_IFACE_RET

// A member that needs State is only checked once State exists, so a policy
// without State gets one message, not one per member.
template <class P>
constexpr bool kStateful = has_state<P>::value;

}  // namespace iface

// The members every kind shares: a name, a validation hook and, for the four
// stateful kinds, a plain per-unit State with a static init().
#define GNMR_IFACE_NAMED(P, kind)                                                              \
  static_assert(iface::has_kname<P>::value,                                                    \
                "gnmr: this " kind " has no `static constexpr const char* kName` (its name in " \
                "state blobs and messages; see docs/policies.md)");                            \
  static_assert(iface::has_check<P>::value,                                                    \
                "gnmr: this " kind " has no `std::string check() const` (return an empty "     \
                "string when the parameters are valid, else the error message; see "           \
                "docs/policies.md)")
#define GNMR_IFACE_STATEFUL(P, kind)                                                           \
  static_assert(iface::has_state<P>::value,                                                    \
                "gnmr: this " kind " has no nested `struct State` (its per-unit state; an "     \
                "empty `struct State {};` if it has none; see docs/policies.md)");             \
  static_assert(!iface::kStateful<P> || iface::has_init<P>::value,                             \
                "gnmr: this " kind " has no `GNMR_HOST_DEVICE static State init()` (a unit's " \
                "state before its first step; see docs/policies.md)");                         \
  static_assert(!iface::kStateful<P> || std::is_trivially_copyable<detail::state_of_t<P>>::value, \
                "gnmr: this " kind "'s State must be trivially copyable (plain numbers and "   \
                "fixed arrays: it is saved byte for byte and lives in device memory)")

template <class P, class = void>
struct state_of {
  using type = char;
};
template <class P>
struct state_of<P, std::void_t<typename P::State>> {
  using type = typename P::State;
};
template <class P>
using state_of_t = typename state_of<P>::type;

template <class P>
struct NormPolicyCheck {
  GNMR_IFACE_NAMED(P, "NormPolicy");
  static_assert(iface::has_kcombine<P>::value,
                "gnmr: this NormPolicy has no `static constexpr gnmr::Combine kCombine` (kSum: "
                "partials add; kMax: partials merge with combine(); see docs/policies.md)");
  static_assert(iface::has_identity<P>::value,
                "gnmr: this NormPolicy has no `GNMR_HOST_DEVICE static float identity()` (the "
                "partial of no elements; see docs/policies.md)");
  static_assert(iface::has_element<P>::value,
                "gnmr: this NormPolicy has no `GNMR_HOST_DEVICE static float element(float x)` "
                "(one gradient element's contribution; see docs/policies.md)");
  static_assert(iface::has_combine<P>::value,
                "gnmr: this NormPolicy has no `GNMR_HOST_DEVICE static float combine(float a, "
                "float b)` (merges two partials; see docs/policies.md)");
  static_assert(iface::has_finish<P>::value,
                "gnmr: this NormPolicy has no `GNMR_HOST_DEVICE float finish(float partial, "
                "double numel) const` (partial -> norm; see docs/policies.md)");
  static constexpr bool value = true;
};

template <class P>
struct MeanTrackerCheck {
  GNMR_IFACE_NAMED(P, "MeanTracker");
  GNMR_IFACE_STATEFUL(P, "MeanTracker");
  static_assert(!iface::kStateful<P> || iface::has_count<P>::value,
                "gnmr: this MeanTracker has no `GNMR_HOST_DEVICE static std::uint32_t "
                "count(const State&)` (accepted samples k; static; see docs/policies.md)");
  static_assert(!iface::kStateful<P> || iface::has_mean<P>::value,
                "gnmr: this MeanTracker has no `GNMR_HOST_DEVICE float mean(const State&) "
                "const` (mu from the accepted samples; see docs/policies.md)");
  static_assert(!iface::kStateful<P> || iface::has_push<P>::value,
                "gnmr: this MeanTracker has no `GNMR_HOST_DEVICE void push(State&, float x) "
                "const` (accepts one sample at the end of a step; see docs/policies.md)");
  static constexpr bool value = true;
};

template <class P>
struct TriggerPolicyCheck {
  GNMR_IFACE_NAMED(P, "TriggerPolicy");
  GNMR_IFACE_STATEFUL(P, "TriggerPolicy");
  static_assert(!iface::kStateful<P> || iface::has_evaluate<P>::value,
                "gnmr: this TriggerPolicy has no `GNMR_HOST_DEVICE void evaluate(const State&, "
                "gnmr::UnitView& v) const` (sets v.delta, v.risk, v.target and kTriggered / "
                "kWarmup; see docs/policies.md)");
  static_assert(iface::has_feed<P>::value,
                "gnmr: this TriggerPolicy has no `GNMR_HOST_DEVICE float feed(const "
                "gnmr::UnitView&) const` (the sample the MeanTracker accepts; see "
                "docs/policies.md)");
  static_assert(!iface::kStateful<P> || iface::has_update<P>::value,
                "gnmr: this TriggerPolicy has no `GNMR_HOST_DEVICE void update(State&, const "
                "gnmr::UnitView&) const` (advances its own history; see docs/policies.md)");
  static constexpr bool value = true;
};

template <class P>
struct RecoveryActionCheck {
  GNMR_IFACE_NAMED(P, "RecoveryAction");
  GNMR_IFACE_STATEFUL(P, "RecoveryAction");
  static_assert(!iface::kStateful<P> || iface::has_apply<P>::value,
                "gnmr: this RecoveryAction has no `GNMR_HOST_DEVICE void apply(State&, const "
                "gnmr::UnitView&, gnmr::UnitDecision&, std::uint32_t& global_skip) const` "
                "(writes the unit's decision; see docs/policies.md)");
  static constexpr bool value = true;
};

template <class P>
struct BudgetSchedulerCheck {
  GNMR_IFACE_NAMED(P, "BudgetScheduler");
  GNMR_IFACE_STATEFUL(P, "BudgetScheduler");
  static_assert(!iface::kStateful<P> ||
                    (iface::has_granted_at<P>::value && iface::has_granted_at_read<P>::value),
                "gnmr: this BudgetScheduler's State has no `std::int64_t granted_at` (the step "
                "of the unit's last grant, 0 = never; the step writes it; see docs/policies.md)");
  static_assert(iface::has_slots<P>::value,
                "gnmr: this BudgetScheduler has no `std::uint32_t slots() const` (units that "
                "may be in recovery at once; see docs/policies.md)");
  static_assert(!iface::kStateful<P> ||
                    (iface::has_in_recovery<P>::value && iface::has_eligible<P>::value &&
                     iface::has_released<P>::value && iface::has_lock_left<P>::value),
                "gnmr: this BudgetScheduler has no `Rules` with GNMR_HOST_DEVICE static "
                "in_recovery, eligible, released (bool) and lock_left (std::int32_t), each "
                "taking (const Budget&, const State&, std::int64_t t); `using Rules = "
                "gnmr::detail::LockRules<ThisBudget>;` gives the standard lock window; see "
                "docs/policies.md");
  static constexpr bool value = true;
};

#undef GNMR_IFACE_NAMED
#undef GNMR_IFACE_STATEFUL

// All five at once; detail::PolicySet static_asserts its value, so each
// check's own message (naming the member) is the first error a controller
// reports. (A struct, not a constexpr function: after a failed check, Clang
// would also report the function call as "not an integral constant
// expression".)
template <class Norm, class Mean, class Trigger, class Recovery, class Budget>
struct CheckPolicies : NormPolicyCheck<Norm>,
                       MeanTrackerCheck<Mean>,
                       TriggerPolicyCheck<Trigger>,
                       RecoveryActionCheck<Recovery>,
                       BudgetSchedulerCheck<Budget> {
  static constexpr bool value = true;
};

}  // namespace detail
}  // namespace gnmr
