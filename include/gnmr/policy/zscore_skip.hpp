// gnmr/policy/zscore_skip.hpp — z-score trigger for skip-step presets.
//
// ZScoreTrigger's clamped feed is ZClip's clip value, which only makes sense
// for a preset that clips. A skip-step preset (OLMo-core, llm.c) throws the
// step away, so the spike has no "clipped" value; SPEC §1.2's rule for the
// ratio trigger is to feed min(n, threshold) instead, and this trigger does
// the same for the z rule: on a z-triggered step the window receives
// mu + z * (sd + eps), the largest norm the rule would have accepted. That
// bounds how much one spike widens the window (a raw 20-sigma sample in a
// 128-sample window roughly doubles sigma; the threshold adds ~13%), which is
// the blindness PEERS.md (c)1 (llm.c PR #711) asks to remove.
// With clamp_feed = false it feeds the raw norm, as OLMo-core does.
#pragma once

#include "gnmr/config.hpp"
#include "gnmr/policy/zscore.hpp"
#include "gnmr/types.hpp"

namespace gnmr {

struct ZScoreSkipTrigger : ZScoreTrigger {
  static constexpr const char* kName = "zscore_skip";

  // The z rule's acceptance bound: n - mu > z * (sd + eps) triggers.
  GNMR_HOST_DEVICE float threshold(const UnitView& v) const {
    return fm::add(v.mean, fm::mul(z, fm::add(v.stddev, eps)));
  }
  GNMR_HOST_DEVICE float feed(const UnitView& v) const {
    if (!clamp_feed || !z_rule(v)) return v.norm;
    return fm::min(v.norm, threshold(v));
  }
};

}  // namespace gnmr
