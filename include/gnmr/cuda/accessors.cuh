// gnmr/cuda/accessors.cuh — what a user's own optimizer kernel needs to
// apply a controller's decisions (step (d), docs/algorithm.md).
//
//   const gnmr::UnitDecision d = gnmr::cuda::decision(decisions, unit);  // one 8-byte load
//   if (gnmr::cuda::step_skipped(summary)) return;  // a suggested global skip
//   if (gnmr::cuda::should_skip(d)) return;      // select: nothing is read or written
//   if (gnmr::cuda::reset_moments(d)) { m = 0; v = 0; }
//   g *= gnmr::cuda::grad_scale(d);
//
// and what a quantization or cast kernel of the *next* forward needs:
//
//   const bool hp = gnmr::cuda::unit_promoted(decisions, unit);  // one 4-byte load
//
// Skipping must be a branch or a select, never a multiply by the scale: a
// skipped unit's scale is 0 and its gradient may be NaN (0 * NaN = NaN).
// apply_guarded() is that select for an already computed update.
//
// Determinism: the accessors only read. The decisions they read are
// GnmrController's, bit for bit (tests/cuda/test_controller.cu), so a kernel
// that branches on them takes the same branch on every rank and every run.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gnmr/core/types.hpp"

namespace gnmr {
namespace cuda {

// The decision of `unit` in one 8-byte read-only load. The array must be
// 8-byte aligned (DeviceController::decisions() is) and must not be written
// by the kernel that reads it.
__device__ __forceinline__ UnitDecision decision(const UnitDecision* d, std::uint32_t unit) {
  const uint2 u = __ldg(reinterpret_cast<const uint2*>(d) + unit);
  UnitDecision r;
  r.scale = __uint_as_float(u.x);
  r.flags = u.y;
  return r;
}

__device__ __forceinline__ bool should_skip(const UnitDecision& d) { return (d.flags & kSkip) != 0u; }
__device__ __forceinline__ bool should_skip(const UnitDecision* d, std::uint32_t unit) {
  return should_skip(decision(d, unit));
}
__device__ __forceinline__ float grad_scale(const UnitDecision& d) { return d.scale; }
__device__ __forceinline__ float grad_scale(const UnitDecision* d, std::uint32_t unit) {
  return decision(d, unit).scale;
}
__device__ __forceinline__ bool reset_moments(const UnitDecision& d) {
  return (d.flags & kResetMoments) != 0u;
}
__device__ __forceinline__ bool promote(const UnitDecision& d) { return (d.flags & kPromote) != 0u; }

// Whether `unit` runs its operators on the higher-precision path in the
// next forward and backward: the kPromote bit of its decision, read with
// one 4-byte read-only load of the flags word (the scale is not fetched).
// Precision promotion (docs/algorithm.md): the decisions written by step s
// carry kPromote for the units in recovery at s under a promoting recovery
// (PromotePrecision, e.g. the gnmr-promote preset), so a grant at step t
// promotes the forward/backward of steps t+1 .. t+lock. Launch the kernel
// after step s's controller step and before step s+1's on the same stream
// (stream order is all it takes; the next step overwrites the array).
// Same alignment and no-writer rule as decision().
__device__ __forceinline__ bool unit_promoted(const UnitDecision* d, std::uint32_t unit) {
  return (__ldg(&d[unit].flags) & kPromote) != 0u;
}

// The step's global skip suggestion (GlobalSkip, Ladder's top rung), read
// from the controller's device summary: an optimizer that honours it
// returns before touching anything, whatever the unit's own decision.
__device__ __forceinline__ bool step_skipped(const StepSummary* s) {
  return __ldg(&s->skip_step) != 0u;
}

// old value if the unit is skipped, else the update: a select, so a NaN in
// `updated` never escapes a skipped unit.
template <class T>
__device__ __forceinline__ T apply_guarded(const UnitDecision& d, T old_value, T updated) {
  return should_skip(d) ? old_value : updated;
}

}  // namespace cuda
}  // namespace gnmr
