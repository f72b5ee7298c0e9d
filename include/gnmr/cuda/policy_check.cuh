// gnmr/cuda/policy_check.cuh — the CUDA backend's compile-time check of a
// policy set: every policy member the device step calls must be
// GNMR_HOST_DEVICE, and every policy trivially copyable.
//
// Why a check of its own: the step's per-unit functors (step/step.hpp) are
// __host__ __device__ templates, and for a template nvcc only *warns* when
// one calls a __host__ function (#20011-D), then the kernel fails at run
// time. A __global__ function that calls a __host__ one is an error even in
// a template, so DeviceController instantiates (never launches) the kernel
// below, which calls each member directly. Its name is the message: nvcc
// reports "calling a __host__ function("MyTrigger::evaluate...") from a
// __global__ function("...policy_members_need_GNMR_HOST_DEVICE<...>") is not
// allowed", which names the member and what it lacks. (#pragma nv_diag_error
// 20011 would not do: the pragma acts where the call is written, inside
// step/step.hpp, which a user may have included before any .cuh.)
#pragma once

#include <cstdint>
#include <type_traits>

#include "gnmr/core/types.hpp"
#include "gnmr/step/step.hpp"

namespace gnmr {
namespace cuda {
namespace detail {

// Never launched: it exists to be compiled for the device.
template <class PS>
__global__ void __launch_bounds__(1) policy_members_need_GNMR_HOST_DEVICE(PS p, float* out) {
  using N = typename PS::NormT;
  using M = typename PS::MeanT;
  using T = typename PS::TriggerT;
  using R = typename PS::RecoveryT;
  using B = typename PS::BudgetT;
  typename M::State ms = M::init();
  typename T::State ts = T::init();
  typename R::State rs = R::init();
  typename B::State bs = B::init();
  UnitView v{};
  UnitDecision d{1.0f, 0u};
  std::uint32_t global_skip = 0;
  v.norm = p.norm.finish(N::combine(N::identity(), N::element(1.0f)), 1.0);
  v.count = M::count(ms);
  v.mean = p.mean.mean(ms);
  if constexpr (gnmr::detail::has_stddev<M>::value) v.stddev = p.mean.stddev(ms);
  v.flags = (B::Rules::in_recovery(p.budget, bs, 1) ? 1u : 0u) |
            (B::Rules::eligible(p.budget, bs, 1) ? 2u : 0u) |
            (B::Rules::released(p.budget, bs, 1) ? 4u : 0u);
  p.trigger.evaluate(ts, v);
  p.recovery.apply(rs, v, d, global_skip);
  p.mean.push(ms, p.trigger.feed(v));
  p.trigger.update(ts, v);
  *out = d.scale + static_cast<float>(B::Rules::lock_left(p.budget, bs, 1) + global_skip);
}

// Called by DeviceController's constructor: costs nothing at run time.
template <class PS>
void require_device_policies() {
  static_assert(std::is_trivially_copyable<typename PS::NormT>::value &&
                    std::is_trivially_copyable<typename PS::MeanT>::value &&
                    std::is_trivially_copyable<typename PS::TriggerT>::value &&
                    std::is_trivially_copyable<typename PS::RecoveryT>::value &&
                    std::is_trivially_copyable<typename PS::BudgetT>::value,
                "gnmr: DeviceController passes its policies to the kernels by value: each "
                "policy must be trivially copyable (plain parameters; a table per unit is a "
                "device pointer, not a std::vector; see docs/policies.md)");
  (void)&policy_members_need_GNMR_HOST_DEVICE<PS>;
}

}  // namespace detail
}  // namespace cuda
}  // namespace gnmr
