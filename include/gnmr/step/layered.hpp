// gnmr/step/layered.hpp — an outer rule and GNMR's budgeted trigger in one
// step: how the two controllers' decisions on the same raw norms combine.
//
// Every real recipe runs a global clip and, more and more, an always-on
// per-unit rule (Stable-SPAM's AdaGN, AdaGC) beside anything else; GNMR's
// budgeted trigger is meant to sit inside such a recipe, not replace it. A
// layered controller (gnmr::LayeredController on the host,
// gnmr::cuda::LayeredDeviceController on the device, "outer+inner" by name
// in presets::make / cuda::make_device) steps both controllers on the same
// raw partials, each with its own state, and combines their decisions per
// unit with layer_decision() below. These functors are the one definition
// both backends run; docs/algorithm.md ("Layered controllers") states them.
//
//   * scale:  outer.scale * inner.scale (ScaleCombine::kProduct, the
//             default: each rule's bound holds, a unit both clip is clipped
//             twice) or min(outer.scale, inner.scale) (kMin: the least
//             clipping that still meets both bounds);
//   * flags:  the inner's flags (its trigger, grants, locks, promotion),
//             plus the outer's kSkip, kResetMoments and kNonFinite;
//   * promotion comes from the inner (GNMR's signal on the raw norms) only;
//   * the summary is the inner's, with skip_step set when either suggests
//             skipping the step.
//
// A global outer rule (clip, zclip, skip-step: presets::is_global) is one
// unit fed the global norm G = sqrt(fp32(sum of the finite n_i^2)) of the
// inner's finished per-unit norms, in detail::total_sq_tree's fixed order
// (the systemic rule's total): a non-finite unit is skipped by the inner
// rule, not allowed to take the whole step with it, and the same norms give
// the same G whether the step came from partials or from a norm trace. Its
// one decision applies to every unit.
//
// Determinism: integer flag arithmetic and one fp32 multiply (or compare)
// per unit; the global input is a fixed-shape tree of doubles rounded once.
// Same partials, same decisions, on host and device.
#pragma once

#include <cstdint>

#include "gnmr/config.hpp"
#include "gnmr/core/math.hpp"
#include "gnmr/core/types.hpp"
#include "gnmr/step/systemic.hpp"

namespace gnmr {

enum class ScaleCombine : std::uint32_t {
  kProduct = 0,  // outer.scale * inner.scale
  kMin = 1,      // min(outer.scale, inner.scale)
};

// The flags an outer rule contributes to a layered decision.
constexpr std::uint32_t kOuterFlags = kSkip | kResetMoments | kNonFinite;

GNMR_HOST_DEVICE UnitDecision layer_decision(UnitDecision outer, UnitDecision inner, ScaleCombine c) {
  UnitDecision d;
  d.flags = inner.flags | (outer.flags & kOuterFlags);
  if (c == ScaleCombine::kMin)
    d.scale = outer.scale < inner.scale ? outer.scale : inner.scale;
  else
    d.scale = math::mul(outer.scale, inner.scale);
  return d;
}

// The layered step's summary: the inner's (its budget, triggers, grants),
// with the outer's suggestion to skip the step.
GNMR_HOST_DEVICE StepSummary layer_summary(const StepSummary& outer, const StepSummary& inner) {
  StepSummary s = inner;
  s.skip_step = (inner.skip_step | outer.skip_step) ? 1u : 0u;
  return s;
}

// The global outer rule's norm from the fixed-order sum of the finite
// norms' squares (detail::total_sq_tree; the device's tree is the same).
GNMR_HOST_DEVICE float layer_global_norm(double total_sq) { return math::sqrt(static_cast<float>(total_sq)); }

namespace detail {

// Whether a controller's selection is the identity on every step: every
// candidate granted (unlimited slots: grants_wanted gives all candidates),
// no systemic rule and no warm-up clip (both need the step's total). Such a
// rule's whole step is per unit, so an outer rule of this kind can be
// stepped without its phase 2, inside the inner's kernels
// (gnmr/cuda/layered_fused.cuh): its commit with rule_all() and
// systemic_none() (warm-up scale 1) is its step.
template <class PS>
bool selection_free(const PS& p) {
  return p.budget.slots() == 0xffffffffu && p.opt.systemic.action == SystemicAction::kOff &&
         !needs_total(p.opt.systemic, p.opt.warmup_clip);
}

}  // namespace detail

}  // namespace gnmr
