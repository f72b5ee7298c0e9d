// gnmr/policy/trigger_zscore.hpp — z-score TriggerPolicy (ZClip, OLMo-core skip-step).
//
// Needs a MeanTracker with a spread (EmaMeanVar, WindowMean): the controller
// puts stddev into the view. The verdict is (n - mu) > z * (sd + eps), which
// is ZClip's z > z_thresh without the division (no 0/0 when sd = 0) and
// OLMo-core's (x - mu) > k*sigma when eps = 0. An optional absolute cap
// (ZClip's max_grad_norm) also triggers, at any k. The report's delta
// column holds the z-score for this trigger.
//
// What the tracker is fed on a z-triggered step depends on what the preset
// does with the spike: a clipping preset (ZClip) feeds its clip value; a
// skip-step preset (OLMo-core) has no clipped value, so it feeds the z rule's
// acceptance bound mu + z (sd + eps) — docs/algorithm.md's min(n, threshold) for the
// z rule. That bounds how much one spike widens the window (a raw 20-sigma
// sample in a 128-sample window roughly doubles sigma; the bound adds ~13%),
// the blindness llm.c PR #711 asks to remove. clamp_feed = false feeds the
// raw norm, as the peers do.
#pragma once

#include <cstdint>
#include <string>

#include "gnmr/core/math.hpp"
#include "gnmr/core/types.hpp"
#include "gnmr/detail/check.hpp"

namespace gnmr {

struct ZScoreTrigger {
  static constexpr const char* kName = "zscore";
  static constexpr bool kNeedsStddev = true;
  enum class Clip : std::uint32_t {
    kAdaptive,  // ZClip "adaptive_scaling": mu + z_t^2 * sd / z, times clip_factor
    kMean,      // ZClip "mean": clip to mu
  };
  float z = 2.5f;
  std::uint32_t warmup = 25;
  float eps = 1e-6f;
  float max_norm = inf_f();  // absolute cap; +inf = none
  Clip clip = Clip::kAdaptive;
  float clip_factor = 1.0f;
  enum class Feed : std::uint32_t {
    kClipValue,  // ZClip: the clip value z_target()
    kThreshold,  // skip-step: mu + z (sd + eps)
  };
  bool clamp_feed = true;  // clamp what is fed on z-triggered steps ...
  Feed feed_rule = Feed::kClipValue;  // ... to this

  struct State {};
  GNMR_HOST_DEVICE static State init() { return State{}; }

  // ZClip's clip value for a z-triggered step (z_t^2 sd / z == z_t sd / eta).
  GNMR_HOST_DEVICE float z_target(const UnitView& v) const {
    if (clip == Clip::kMean) return v.mean;
    const float zs = math::div(math::sub(v.norm, v.mean), math::add(v.stddev, eps));
    return math::mul(math::add(v.mean, math::div(math::mul(z, v.stddev), math::div(zs, z))), clip_factor);
  }

  GNMR_HOST_DEVICE void evaluate(const State&, UnitView& v) const {
    v.delta = 0.0f;
    v.risk = 0.0f;
    v.target = v.norm;
    bool z_fired = false;
    if (v.count >= warmup && v.count > 0) {
      const float dev = math::sub(v.norm, v.mean);
      const float sde = math::add(v.stddev, eps);
      const float zs = math::div(dev, sde);
      if (!is_nan(zs)) {
        v.delta = zs;
        v.risk = math::max(math::div(zs, z), 0.0f);
      }
      z_fired = z_rule(v);
      if (z_fired) {
        v.flags |= kTriggered;
        v.target = z_target(v);
      }
    } else {
      v.flags |= kWarmup;
    }
    if (v.norm > max_norm) {
      v.flags |= kTriggered;
      v.target = z_fired ? math::min(v.target, max_norm) : max_norm;
      v.risk = math::max(v.risk, math::div(v.norm, max_norm));
    }
  }
  GNMR_HOST_DEVICE bool z_rule(const UnitView& v) const {
    return v.count >= warmup && v.count > 0 &&
           math::sub(v.norm, v.mean) > math::mul(z, math::add(v.stddev, eps));
  }
  GNMR_HOST_DEVICE float feed(const UnitView& v) const {
    // ZClip feeds its clip value, before the max_grad_norm cap.
    if (!clamp_feed || !z_rule(v)) return v.norm;
    const float bound = feed_rule == Feed::kThreshold
                            ? math::add(v.mean, math::mul(z, math::add(v.stddev, eps)))
                            : z_target(v);
    return math::min(v.norm, bound);
  }
  GNMR_HOST_DEVICE void update(State&, const UnitView&) const {}
  std::string check() const {
    return detail::first_error({detail::positive("ZScoreTrigger", "z", z),
                                detail::non_negative("ZScoreTrigger", "eps", eps),
                                detail::positive_or_inf("ZScoreTrigger", "max_norm", max_norm),
                                detail::positive("ZScoreTrigger", "clip_factor", clip_factor)});
  }
};

}  // namespace gnmr
