// gnmr/policy/trigger_noise.hpp — the noise-floor TriggerPolicy: a unit whose
// gradient is lost in its own quantization noise.
//
// Chmiel et al., "FP4 All the Way" (arXiv 2505.19115, section 4): with
// gradient g and an unbiased stochastic-rounding noise e of per-coordinate
// variance s^2 over d coordinates, gradient descent at its best step size
// is most sensitive to the noise where ||g|| = sqrt(3) * s * sqrt(d), i.e.
// where the gradient's norm equals sqrt(3) times the noise's expected norm
// sqrt(E||e||^2); below it, quantized training stops improving, and their
// remedy is to finish in higher precision. They state it model-wide; this
// trigger applies it per recoverable unit, at run time, under the budget:
// a unit is a candidate while
//
//     n < c * a,      c = sqrt(3) by default,
//
// with n the unit's gradient norm and a = v.aux the norm of the noise the
// caller estimates in that gradient (step_with_aux; for the NVFP4 recipe,
// gnmr.integrations.nvfp4 computes E||e||^2 of each weight gradient from
// its stochastic rounding's own per-element variances, docs/algorithm.md,
// "Noise-floor trigger"). Risk = c * a / n (above 1 when triggered), so the
// slots go to the units deepest under their floor. The recovery meant for it
// is promotion (the preset gnmr-noise-floor): nothing is clipped, the
// target is the norm itself, so a denied-unit clip to the target is a no-op.
//
// Without aux the verdict cannot be made: the controllers refuse a step
// without it (kNeedsAux). A unit whose aux is not finite or not positive is
// never a candidate (no estimate, no verdict). The mean tracker still runs
// (the ratio in the reports); `warmup` samples of it must be in before the
// first verdict, so the first steps, whose gradients are far above any
// floor, are not judged on an estimate that has not settled.
//
// Determinism: one comparison and one division per unit on the same floats,
// the same on host and device.
#pragma once

#include <cstdint>
#include <string>

#include "gnmr/core/math.hpp"
#include "gnmr/core/numeric.hpp"
#include "gnmr/core/types.hpp"
#include "gnmr/detail/check.hpp"

namespace gnmr {

struct NoiseFloorTrigger {
  static constexpr const char* kName = "noise_floor";
  static constexpr bool kNeedsAux = true;
  float c = 1.7320508f;        // sqrt(3), Chmiel et al.'s constant
  std::uint32_t warmup = 10;   // accepted samples before the first verdict

  struct State {};
  GNMR_HOST_DEVICE static State init() { return State{}; }

  GNMR_HOST_DEVICE void evaluate(const State&, UnitView& v) const {
    v.delta = 0.0f;
    v.risk = 0.0f;
    v.target = v.norm;
    if (v.count < warmup) {
      v.flags |= kWarmup;
      return;
    }
    if (!is_finite(v.aux) || !(v.aux > 0.0f)) return;
    const float floor = math::mul(c, v.aux);
    // floor / n; n = 0 (zero_is_sample) is below any floor: risk +inf.
    v.risk = v.norm > 0.0f ? math::div(floor, v.norm) : inf_f();
    if (v.norm < floor) v.flags |= kTriggered;
  }
  GNMR_HOST_DEVICE float feed(const UnitView& v) const { return v.norm; }
  GNMR_HOST_DEVICE void update(State&, const UnitView&) const {}
  std::string check() const { return detail::positive("NoiseFloorTrigger", "c", c); }
};

}  // namespace gnmr
