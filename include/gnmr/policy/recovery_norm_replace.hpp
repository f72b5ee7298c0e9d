// gnmr/policy/recovery_norm_replace.hpp — GradientStabilizer: fix the norm, not the gradient.
//
// Stable-SPAM's AdaGN (the rule docs/presets.md ties to "GradientStabilizer"):
// keep each unit's gradient direction and set its norm to m_hat/(sqrt(v_hat)+eps),
// where m, v are bias-corrected EMAs of the unit's norm and squared norm
// (gamma1 = 0.7, gamma2 = 0.9). As published, the current norm enters m and v
// before the target is formed; that is what bounds a spike step (v jumps with
// n^2, so the target shrinks). The statistics advance on every finite step
// that is a sample (a zero norm only with zero_is_sample, which the preset
// sets); the replacement is applied while the unit is in recovery, which the
// stabilizer preset makes "always" (AlwaysTrigger + Unlimited).
//
// restart_every (0 = off): Stable-SPAM's periodic restart (stablespam.py
// @6a66da1, `update_proj_gap`, 1000 there): on every step t with
// t % restart_every == 0, after this step's target, the bias-correction
// count goes back to 1 while m and v keep their values, and the unit gets
// kResetMoments (the peer zeroes Adam's exp_avg and exp_avg_sq of every
// tensor on that step and restarts Adam's own bias correction at 1).
#pragma once

#include <cstdint>
#include <string>

#include "gnmr/core/math.hpp"
#include "gnmr/core/types.hpp"
#include "gnmr/detail/check.hpp"

namespace gnmr {

struct NormReplace {
  static constexpr const char* kName = "norm_replace";
  float gamma1 = 0.7f;
  float gamma2 = 0.9f;
  float eps = 1e-8f;
  std::uint32_t restart_every = 0;

  struct State {
    float m, v;
    // gamma^k, running products (no powf). Double: for gamma near 1 (the
    // BF16 script's gamma2 = 0.99999) 1 - gamma^k cancels catastrophically
    // in fp32 (up to 0.15% off, around k = 300); double mul/add are IEEE on
    // both sides.
    double g1_pow, g2_pow;
  };
  GNMR_HOST_DEVICE static State init() { return State{0.0f, 0.0f, 1.0, 1.0}; }

  // The norm AdaGN would give the unit after accepting n (advances s).
  GNMR_HOST_DEVICE float advance(State& s, float n) const {
    s.m = math::add(math::mul(gamma1, s.m), math::mul(math::sub(1.0f, gamma1), n));
    s.v = math::add(math::mul(gamma2, s.v), math::mul(math::sub(1.0f, gamma2), math::mul(n, n)));
    s.g1_pow = math::dmul(s.g1_pow, static_cast<double>(gamma1));
    s.g2_pow = math::dmul(s.g2_pow, static_cast<double>(gamma2));
    const float m_hat = math::div(s.m, static_cast<float>(math::dadd(1.0, -s.g1_pow)));
    const float v_hat = math::div(s.v, static_cast<float>(math::dadd(1.0, -s.g2_pow)));
    return math::div(m_hat, math::add(math::sqrt(v_hat), eps));
  }
  GNMR_HOST_DEVICE void apply(State& s, const UnitView& v, UnitDecision& d,
                              std::uint32_t&) const {
    // A zero norm that the controller treats as "no sample" (kZeroNorm)
    // stays out of these statistics too; its gradient keeps scale 1.
    if (v.flags & kZeroNorm) return;
    const float target = advance(s, v.norm);
    if ((v.flags & kInRecovery) && v.norm > 0.0f) d.scale = math::div(target, v.norm);
    if (restart_every != 0u && v.step > 0 && v.step % static_cast<std::int64_t>(restart_every) == 0) {
      s.g1_pow = static_cast<double>(gamma1);  // the count is 1: gamma^1
      s.g2_pow = static_cast<double>(gamma2);
      d.flags |= kResetMoments;
    }
  }
  std::string check() const {
    return detail::first_error({detail::in_range_open_hi("NormReplace", "gamma1", gamma1, 0.0f, 1.0f),
                                detail::in_range_open_hi("NormReplace", "gamma2", gamma2, 0.0f, 1.0f),
                                detail::non_negative("NormReplace", "eps", eps)});
  }
};

}  // namespace gnmr
