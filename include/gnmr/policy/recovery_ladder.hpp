// gnmr/policy/recovery_ladder.hpp — escalation ladder for units that keep triggering.
//
// Users ask for graded answers (llm.c #711, Megatron #5395): a unit that is
// granted again within `horizon` steps of its previous grant climbs a rung,
// one that stays quiet for longer starts again at rung 0.
//   rung 0  clip to kappa * mu for the lock
//   rung 1  + skip the unit's update on the grant step and on every lock
//           step where it triggers again (the clip covers the others)
//   rung 2  + reset its optimizer moments on the grant step
//   rung 3  + suggest a global skip on the grant step
// `top` caps the climb (top = 0 is plain clipping).
#pragma once

#include <cstdint>
#include <string>

#include "gnmr/core/math.hpp"
#include "gnmr/core/types.hpp"
#include "gnmr/detail/check.hpp"
#include "gnmr/policy/recovery.hpp"

namespace gnmr {

struct Ladder {
  static constexpr const char* kName = "ladder";
  float kappa = 1.0f;
  std::int32_t horizon = 16;  // steps from one grant to the next that count as "again"
  std::uint32_t top = 3;

  struct State {
    std::int64_t last_grant;  // 0 = never
    std::uint32_t rung;
    std::uint32_t pad_;  // explicit, always 0: no hole in a state blob (gnmr/detail/canonical.hpp)
  };
  GNMR_HOST_DEVICE static State init() { return State{0, 0u, 0u}; }

  GNMR_HOST_DEVICE void apply(State& s, const UnitView& v, UnitDecision& d,
                              std::uint32_t& global_skip) const {
    if (v.flags & kGranted) {
      const bool again = s.last_grant > 0 && v.step - s.last_grant <= horizon;
      s.rung = again ? (s.rung < top ? s.rung + 1 : top) : 0u;
      s.last_grant = v.step;
    }
    if (!(v.flags & kInRecovery)) return;
    d.scale = detail::clip_scale(v.norm, math::mul(kappa, v.mean), 0.0f);
    const bool hot = (v.flags & (kGranted | kTriggered)) != 0u;
    if (s.rung >= 1 && hot) detail::set_skip(d);
    if (s.rung >= 2 && (v.flags & kGranted)) d.flags |= kResetMoments;
    if (s.rung >= 3 && (v.flags & kGranted)) global_skip = 1u;
  }
  std::string check() const {
    if (horizon < 1) return "gnmr: Ladder: horizon must be >= 1, got " + std::to_string(horizon);
    if (top > 3) return "gnmr: Ladder: top must be in [0, 3], got " + std::to_string(top);
    return detail::positive("Ladder", "kappa", kappa);
  }
};

}  // namespace gnmr
