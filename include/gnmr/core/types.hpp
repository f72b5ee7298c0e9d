// gnmr/core/types.hpp — the per-unit and per-step records a controller step
// produces (docs/algorithm.md, Report), shared by the host and CUDA backends.
//
// UnitReport is the full telemetry row; UnitDecision is the 8-byte record an
// optimizer kernel reads in one load. Both are trivially copyable so the
// device backend can keep them in plain device arrays.
#pragma once

#include <cstdint>

#include "gnmr/config.hpp"

namespace gnmr {

// Per-unit flags. A unit may carry several at once (TRIGGERED|GRANTED|...).
enum Flag : std::uint32_t {
  kTriggered = 1u << 0,     // the trigger fired this step
  kGranted = 1u << 1,       // a recovery slot was granted this step
  kInRecovery = 1u << 2,    // holds a slot this step (granted now or earlier)
  kDenied = 1u << 3,        // triggered, not in recovery, got no slot
  kCooldown = 1u << 4,      // not eligible for a grant this step (cool-down)
  kNonFinite = 1u << 5,     // the norm is NaN or +-Inf
  kSkip = 1u << 6,          // do not update this unit (select, never multiply)
  kResetMoments = 1u << 7,  // zero the optimizer moments of this unit
  kPromote = 1u << 8,       // route this unit to the higher-precision path
  kReleased = 1u << 9,      // its lock expired at the start of this step
  kWarmup = 1u << 10,       // too few accepted samples for a verdict
  kZeroNorm = 1u << 11,     // n = 0 exactly: no gradient, not a sample (see ControllerOptions)
  kSystemic = 1u << 12,     // the systemic action applied to this unit this step (gnmr/step/systemic.hpp)
  kRestart = 1u << 13,      // the unit's statistics started afresh this step: their history was an
                            // outlier (a trigger's restarts(), e.g. a spike at the very first step)
};

// Compact decision: what an optimizer needs, in one 8-byte load.
struct UnitDecision {
  float scale;          // gradient multiplier; 1 when not in recovery
  std::uint32_t flags;  // Flag bits
};

// Full per-unit report (telemetry, tests, the event log).
struct UnitReport {
  float norm;    // n_i(t), after the NormPolicy finish
  float mean;    // mu_i at the start of the step (0 while k_i = 0)
  float ratio;   // r_i = n / max(mu, eps); 0 while undefined
  float delta;   // d_i (Delta-GNMR); 0 while undefined
  float risk;    // rho_i >= 0; +inf for a non-finite norm
  float scale;   // same as UnitDecision::scale
  std::uint32_t flags;
  std::int32_t lock_left;  // steps of recovery left, this step included
};

struct StepSummary {
  std::int64_t step = 0;  // t, 1-based
  std::uint32_t triggered = 0;
  std::uint32_t granted = 0;
  std::uint32_t in_recovery = 0;
  std::uint32_t denied = 0;
  std::uint32_t nonfinite = 0;
  std::uint32_t released = 0;
  // Over units whose ratio is defined this step: finite norm, k >= 1, not
  // kZeroNorm. +inf only where a finite norm overflows n / max(mu, eps).
  float max_ratio = 0.0f;
  std::int32_t max_ratio_unit = -1;  // lowest index on ties; -1 if none
  std::uint32_t skip_step = 0;     // 1: the policy (or the systemic skip) suggests skipping the step
  // The systemic rule (gnmr/step/systemic.hpp): 0 on a step that is not
  // systemic, else the SystemicAction applied (1 clip-triggered,
  // 2 global-clip, 3 skip, 4 hold).
  std::uint32_t systemic = 0;
  float systemic_scale = 1.0f;  // global-clip's scale s for every finite unit; 1 otherwise
  // global-clip only, on every step: the total norm G = sqrt(sum of the finite
  // n_i^2) and its tracked mean M before this step's sample (0 while M has
  // none); both 0 under the other actions.
  float total_norm = 0.0f;
  float total_mean = 0.0f;
};

// The unit flags that make an event in the log (gnmr/io/telemetry.hpp), and
// whether a step has any event at all: its summary says so, no unit scan.
constexpr std::uint32_t kEventFlags = kTriggered | kGranted | kDenied | kReleased | kNonFinite;
GNMR_HOST_DEVICE bool step_has_events(const StepSummary& s) {
  return (s.triggered | s.granted | s.denied | s.released | s.nonfinite | s.skip_step | s.systemic) != 0u;
}

// What a Trigger / Recovery policy sees of a unit at step t.
struct UnitView {
  float norm;    // finite
  float mean;    // mu at the start of the step
  float ratio;   // defined when count >= 1
  float delta;
  float risk;
  float stddev;  // the tracker's spread, 0 for trackers without one
  float target;  // the norm the trigger's own rule would clip to
  // A second per-unit signal the caller gives with the step
  // (step_with_aux: the noise-floor trigger's quantization-noise norm,
  // finished by the NormPolicy like the norm). Seen by
  // TriggerPolicy::evaluate only: 0 in the views of the commit phase (feed,
  // update, the recovery action) and on every step without aux.
  float aux;
  std::uint32_t count;  // k_i: accepted samples in the mean
  std::uint32_t flags;  // Flag bits decided so far
  std::uint32_t unit;   // i, the unit's index (a per-unit threshold, a lookup of one's own)
  std::int64_t step;    // t
  std::int64_t granted_at;  // step of the current/last grant, 0 if never
};

}  // namespace gnmr
