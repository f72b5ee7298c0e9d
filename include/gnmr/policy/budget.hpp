// gnmr/policy/budget.hpp — BudgetScheduler: who gets a recovery slot.
//
// A unit granted at step g is in recovery at steps g .. g+lock-1 and holds
// one slot meanwhile; it is eligible again from step g+lock+cooldown. The
// per-unit state is the grant step alone, so locks, releases and cool-downs
// are derived, never counted down (nothing to drift or to forget on load).
// The selection itself (free slots to the highest risk, ties to the lower
// index) lives in the backends: it is the one global step of the controller.
#pragma once

#include <cstdint>
#include <string>

#include "gnmr/config.hpp"
#include "gnmr/detail/check.hpp"

namespace gnmr {

namespace detail {
struct LockState {
  std::int64_t granted_at;  // 0 = never granted
};
// Shared by every scheduler: the lock window arithmetic. Written as
// differences t - granted_at (both positive, so no overflow) rather than
// sums, so that any stored granted_at (a crafted state blob included) is
// defined behaviour; for real states (0 < granted_at <= t) it is the same.
template <class B>
struct LockRules {
  GNMR_HOST_DEVICE static bool in_recovery(const B& b, const LockState& s, std::int64_t t) {
    return s.granted_at > 0 && s.granted_at <= t && t - s.granted_at < b.lock;
  }
  GNMR_HOST_DEVICE static std::int32_t lock_left(const B& b, const LockState& s, std::int64_t t) {
    return in_recovery(b, s, t) ? static_cast<std::int32_t>(b.lock - (t - s.granted_at)) : 0;
  }
  GNMR_HOST_DEVICE static bool released(const B& b, const LockState& s, std::int64_t t) {
    return s.granted_at > 0 && s.granted_at <= t && t - s.granted_at == b.lock;
  }
  GNMR_HOST_DEVICE static bool eligible(const B& b, const LockState& s, std::int64_t t) {
    return s.granted_at <= 0 ||
           (s.granted_at <= t && t - s.granted_at >= static_cast<std::int64_t>(b.lock) + b.cooldown);
  }
};
}  // namespace detail

// Default: at most max_o units in recovery at once.
struct MaxO {
  static constexpr const char* kName = "maxo";
  std::int32_t max_o = 4;
  std::int32_t lock = 8;
  std::int32_t cooldown = 0;

  using State = detail::LockState;
  using Rules = detail::LockRules<MaxO>;
  GNMR_HOST_DEVICE static State init() { return State{0}; }
  GNMR_HOST_DEVICE std::uint32_t slots() const { return static_cast<std::uint32_t>(max_o); }
  std::string check() const {
    if (max_o < 1)
      return "gnmr: MaxO: max_o must be >= 1 (0 would make every trigger a denial), got " +
             std::to_string(max_o);
    if (lock < 1) return "gnmr: MaxO: lock must be >= 1, got " + std::to_string(lock);
    if (cooldown < 0) return "gnmr: MaxO: cooldown must be >= 0, got " + std::to_string(cooldown);
    return {};
  }
};

// Every triggered, eligible unit is granted (peer presets: AdaGC, ZClip, ...).
struct Unlimited {
  static constexpr const char* kName = "unlimited";
  std::int32_t lock = 1;
  std::int32_t cooldown = 0;

  using State = detail::LockState;
  using Rules = detail::LockRules<Unlimited>;
  GNMR_HOST_DEVICE static State init() { return State{0}; }
  GNMR_HOST_DEVICE std::uint32_t slots() const { return 0xffffffffu; }
  std::string check() const {
    if (lock < 1) return "gnmr: Unlimited: lock must be >= 1, got " + std::to_string(lock);
    if (cooldown < 0)
      return "gnmr: Unlimited: cooldown must be >= 0, got " + std::to_string(cooldown);
    return {};
  }
};

}  // namespace gnmr
