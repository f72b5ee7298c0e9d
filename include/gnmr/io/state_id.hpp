// gnmr/io/state_id.hpp — what a state blob says about the controller
// that saved it: the policy identity ("l2/ema/gnmr<8>(window=4)/
// compose(clip_to_mean,reset_moments)/maxo") and the fingerprint built from
// it (gnmr/io/state.hpp).
//
// The identity names each policy, its template parameters that shape the
// stored state (WindowMean<Cap>, GnmrTriggerT<Cap>) and the hyperparameters
// under which the stored state means something else — the *state-shaping*
// hyperparameters, found by reading every policy's State:
//   WindowMean::window     the ring's head and modulus, and how many samples count
//   GnmrTriggerT::window   the same for the ratio history of Delta-GNMR
//   EmaMeanVar::seed       k < seed: Welford accumulators; k >= seed: EMA fields
//   MinSeededEma::seed     k < seed: m is a minimum; k >= seed: an EMA
// A Compose lists its parts. Every other hyperparameter (tau, delta, maxO,
// lock, cooldown, kappa, an EMA's beta, NormReplace's gammas, the Ladder's
// horizon and top, the systemic and denied rules) may change on resume: the
// stored state stays valid under it (an EMA's bias correction is the
// running product of the decays actually used, so it stays exact when beta
// changes). A policy of one's own declares its state-shaping values with a
// member `std::string state_key() const` (e.g. "window=16"), or a
// specialisation of gnmr::PolicyIdentity.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "gnmr/detail/fnv.hpp"
#include "gnmr/policy/mean.hpp"
#include "gnmr/policy/mean_peers.hpp"
#include "gnmr/policy/recovery.hpp"
#include "gnmr/policy/trigger.hpp"
#include "gnmr/step/systemic.hpp"

namespace gnmr {

namespace detail {
template <class P, class = void>
struct has_state_key : std::false_type {};
template <class P>
struct has_state_key<P, std::void_t<decltype(std::declval<const P&>().state_key())>> : std::true_type {};
}  // namespace detail

// name(): the policy's kName and state-shaping template parameters;
// key(): its state-shaping hyperparameters ("" if none); composite: a Compose.
template <class P>
struct PolicyIdentity {
  static constexpr bool kComposite = false;
  static std::string name(const P&) { return P::kName; }
  static std::string key(const P& p) {
    if constexpr (detail::has_state_key<P>::value) {
      return p.state_key();
    } else {
      (void)p;
      return {};
    }
  }
};

// "name" or "name(key)".
template <class P>
std::string policy_id(const P& p) {
  const std::string k = PolicyIdentity<P>::key(p);
  return PolicyIdentity<P>::name(p) + (k.empty() ? std::string() : "(" + k + ")");
}

template <int Cap>
struct PolicyIdentity<WindowMean<Cap>> {
  static constexpr bool kComposite = false;
  static std::string name(const WindowMean<Cap>&) { return "window<" + std::to_string(Cap) + ">"; }
  static std::string key(const WindowMean<Cap>& m) { return "window=" + std::to_string(m.window); }
};
template <int Cap>
struct PolicyIdentity<GnmrTriggerT<Cap>> {
  static constexpr bool kComposite = false;
  static std::string name(const GnmrTriggerT<Cap>&) { return "gnmr<" + std::to_string(Cap) + ">"; }
  static std::string key(const GnmrTriggerT<Cap>& t) { return "window=" + std::to_string(t.window); }
};
template <>
struct PolicyIdentity<EmaMeanVar> {
  static constexpr bool kComposite = false;
  static std::string name(const EmaMeanVar&) { return EmaMeanVar::kName; }
  static std::string key(const EmaMeanVar& m) { return "seed=" + std::to_string(m.seed); }
};
template <>
struct PolicyIdentity<MinSeededEma> {
  static constexpr bool kComposite = false;
  static std::string name(const MinSeededEma&) { return MinSeededEma::kName; }
  static std::string key(const MinSeededEma& m) { return "seed=" + std::to_string(m.seed); }
};
template <class A, class... Rest>
struct PolicyIdentity<Compose<A, Rest...>> {
  static constexpr bool kComposite = true;
  static std::string name(const Compose<A, Rest...>& c) { return "compose(" + parts(c) + ")"; }
  static std::string key(const Compose<A, Rest...>&) { return {}; }
  template <class X>
  static std::string parts(const Compose<X>& c) {
    return policy_id(c.first);
  }
  template <class X, class Y, class... Z>
  static std::string parts(const Compose<X, Y, Z...>& c) {
    return policy_id(c.first) + "," + parts(c.rest);
  }
};

// The identity of a PolicySet (a controller's Policies), Norm/Mean/Trigger/
// Recovery/Budget: "l2/ema/gnmr<8>(window=4)/clip_to_mean/maxo".
template <class PS>
std::string policy_identity(const PS& p) {
  return policy_id(p.norm) + "/" + policy_id(p.mean) + "/" + policy_id(p.trigger) + "/" +
         policy_id(p.recovery) + "/" + policy_id(p.budget);
}

namespace detail {

template <class P, class = void>
struct state_size_of : std::integral_constant<std::uint64_t, 0> {};  // stateless (norms)
template <class P>
struct state_size_of<P, std::void_t<typename P::State>>
    : std::integral_constant<std::uint64_t, sizeof(typename P::State)> {};

// The global state's layout, by name: a new field gets a new name.
constexpr const char* kGlobalStateId = "global:systemic_total=ema";

// Version-1 fingerprint: each policy's kName and State size (no parameters,
// and every Compose was "compose"). Kept to recognise version-1 blobs.
template <class P>
std::uint64_t fingerprint_policy_v1(std::uint64_t h) {
  return fnv1a64_u64(state_size_of<P>::value, fnv1a64_str(P::kName, h));
}

// Does the version-1 fingerprint leave this policy's stored state
// ambiguous (a Compose's parts, a state-shaping hyperparameter)?
template <class P>
bool v1_ambiguous(const P& p) {
  return PolicyIdentity<P>::kComposite || !PolicyIdentity<P>::key(p).empty();
}

}  // namespace detail

// The fingerprint of a blob: FNV-1a-64 over the identity, each policy's
// State size (Norm..Budget) and the global state's layout.
template <class PS>
std::uint64_t policy_fingerprint(const PS& p) {
  std::uint64_t h = detail::fnv1a64_str(policy_identity(p).c_str(), detail::kFnvOffset);
  h = detail::fnv1a64_u64(detail::state_size_of<typename PS::NormT>::value, h);
  h = detail::fnv1a64_u64(detail::state_size_of<typename PS::MeanT>::value, h);
  h = detail::fnv1a64_u64(detail::state_size_of<typename PS::TriggerT>::value, h);
  h = detail::fnv1a64_u64(detail::state_size_of<typename PS::RecoveryT>::value, h);
  h = detail::fnv1a64_u64(detail::state_size_of<typename PS::BudgetT>::value, h);
  h = detail::fnv1a64_str(detail::kGlobalStateId, h);
  return detail::fnv1a64_u64(sizeof(GlobalState), h);
}

// The version-1 fingerprint of a PolicySet type.
template <class PS>
std::uint64_t policy_fingerprint_v1() {
  std::uint64_t h = detail::kFnvOffset;
  h = detail::fingerprint_policy_v1<typename PS::NormT>(h);
  h = detail::fingerprint_policy_v1<typename PS::MeanT>(h);
  h = detail::fingerprint_policy_v1<typename PS::TriggerT>(h);
  h = detail::fingerprint_policy_v1<typename PS::RecoveryT>(h);
  h = detail::fingerprint_policy_v1<typename PS::BudgetT>(h);
  return h;
}

// "l2/ema/gnmr/clip_to_mean/maxo": the kNames alone (DynController::name()).
template <class PS>
std::string policy_names() {
  return std::string(PS::NormT::kName) + "/" + PS::MeanT::kName + "/" + PS::TriggerT::kName +
         "/" + PS::RecoveryT::kName + "/" + PS::BudgetT::kName;
}

}  // namespace gnmr
