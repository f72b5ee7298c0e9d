// demo/recipe.hpp — the training recipe's global norm clip, applied after
// the arm's own rule.
//
// Order of a step (docs/record/stability.md, "Recipe"): the arm's controller sees
// the raw per-unit partials and decides per unit (scale, skip, reset,
// promote); then the recipe clips the gradient that will actually be
// applied: its total norm is taken over the units that are not skipped,
// each with its own scale, and if it exceeds `clip` every applied unit's
// scale is multiplied by clip / (total + 1e-6), torch's clip_grad_norm_
// formula. A per-unit rule that has already clipped a spiking unit thus
// keeps the recipe from also shrinking every other unit for that spike.
//
// GNMR_HOST_DEVICE: the CPU trainer calls it, and on --device cuda a
// one-thread kernel runs the same code on the device decisions.
//
// Determinism: the total is a double sum in unit order through gnmr::math
// (correctly rounded, never contracted), the scale is computed once; skipped units keep kSkip (a select: never multiplied).
#pragma once

#include <cmath>
#include <cstdint>

#include "gnmr/core/math.hpp"
#include "gnmr/core/types.hpp"

namespace demo {

// A global preset's one partial: the L2 partials of every unit add (a
// double sum in unit order, rounded once; a NaN/Inf makes it non-finite).
GNMR_HOST_DEVICE float global_partial(const float* partials, std::uint32_t n) {
  double s = 0.0;
  for (std::uint32_t u = 0; u < n; ++u) s = gnmr::math::dadd(s, static_cast<double>(partials[u]));
  return static_cast<float>(s);
}

// The controller's decisions on the model's units: a global preset's one
// decision applies to every unit.
GNMR_HOST_DEVICE void expand_decisions(const gnmr::UnitDecision* ctl, bool global, std::uint32_t n,
                                       gnmr::UnitDecision* out) {
  for (std::uint32_t u = 0; u < n; ++u) out[u] = ctl[global ? 0u : u];
}

// out[u] = in[u] with the recipe's clip folded into the scale; returns the
// clip factor (1 when the total is within clip or clip <= 0). A non-finite
// total (only reachable through finite partials beyond double's range) skips
// every unit.
GNMR_HOST_DEVICE float recipe_clip(const gnmr::UnitDecision* in, const float* partials, std::uint32_t n,
                                   float clip, gnmr::UnitDecision* out, float* total_out) {
  double sq = 0.0;
  for (std::uint32_t u = 0; u < n; ++u) {
    out[u] = in[u];
    if (in[u].flags & gnmr::kSkip) continue;
    const double s = static_cast<double>(in[u].scale);
    sq = gnmr::math::dadd(sq, gnmr::math::dmul(gnmr::math::dmul(s, s), static_cast<double>(partials[u])));
  }
  const double total = sqrt(sq);
  if (total_out) *total_out = static_cast<float>(total);
  if (!(clip > 0.0f)) return 1.0f;
  if (!(total <= 1e300)) {
    for (std::uint32_t u = 0; u < n; ++u) {
      out[u].flags |= gnmr::kSkip;
      out[u].scale = 0.0f;
    }
    return 0.0f;
  }
  if (total <= static_cast<double>(clip)) return 1.0f;
  const float c = static_cast<float>(gnmr::math::ddiv(static_cast<double>(clip), gnmr::math::dadd(total, 1e-6)));
  for (std::uint32_t u = 0; u < n; ++u)
    if (!(out[u].flags & gnmr::kSkip)) out[u].scale = gnmr::math::mul(out[u].scale, c);
  return c;
}

}  // namespace demo
