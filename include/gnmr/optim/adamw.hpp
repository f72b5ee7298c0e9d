// gnmr/optim/adamw.hpp — the guarded AdamW's public types and its
// per-element and per-unit arithmetic, as plain C++.
//
// The CUDA kernel (gnmr/cuda/adamw.cuh) and the host optimizer
// (gnmr/host/adamw.hpp) both call exactly these functions, so a CPU test can
// check the update against a double-precision AdamW and the GPU test can
// demand the same bits as the host. Every operation is a correctly rounded
// gnmr::math operation (no FMA contraction), hence host == device.
//
// How a UnitDecision acts (docs/algorithm.md, Recovery):
//   kSkip          the unit's param and moments are not written at all, and
//                  its bias-correction step does not advance; a select, so a
//                  NaN gradient in a skipped unit never reaches anything;
//   kResetMoments  m = v = 0 before the update (a select, not a multiply,
//                  so NaN moments are cleared too) and the unit's step
//                  restarts at 1, as for a fresh optimizer;
//   scale          multiplies the gradient before both moments.
// Weight decay is decoupled (torch.optim.AdamW): p <- p*(1 - lr*wd) first.
#pragma once

#include <cstdint>
#include <string>

#include "gnmr/core/dtype.hpp"
#include "gnmr/core/math.hpp"
#include "gnmr/core/types.hpp"
#include "gnmr/detail/check.hpp"

namespace gnmr {

struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 1e-2f;
  std::string check() const {
    return detail::first_error(
        {detail::non_negative("AdamW", "lr", lr),
         detail::in_range_open_hi("AdamW", "beta1", beta1, 0.0f, 1.0f),
         detail::in_range_open_hi("AdamW", "beta2", beta2, 0.0f, 1.0f),
         detail::positive("AdamW", "eps", eps),
         detail::non_negative("AdamW", "weight_decay", weight_decay)});
  }
};

// One parameter tensor: fp32 master weights and moments, grads of any dtype.
struct AdamWTensor {
  float* param;
  const void* grad;
  float* exp_avg;
  float* exp_avg_sq;
  std::uint64_t numel;
  DType grad_dtype;
  std::uint32_t unit;  // whose UnitDecision applies
  // false: no weight decay on this tensor (biases, norm gains: PyTorch's
  // usual second parameter group), in the same launch as the others.
  bool weight_decay = true;
};

// Per-unit optimizer state (what a checkpoint of the optimizer keeps besides
// the moments): the bias-correction step and beta^step as
// running double products (powf's last bit differs between libm and CUDA).
struct AdamWUnitState {
  std::int64_t step;
  double beta1_pow;
  double beta2_pow;
};

namespace detail {

GNMR_HOST_DEVICE AdamWUnitState adamw_unit_init() { return AdamWUnitState{0, 1.0, 1.0}; }

GNMR_HOST_DEVICE double dsqrt(double x) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(x);
#else
  return std::sqrt(x);
#endif
}

// The unit's state after this step's decision.
GNMR_HOST_DEVICE AdamWUnitState adamw_advance(const AdamWParams& h, AdamWUnitState s,
                                              std::uint32_t flags) {
  if (flags & kSkip) return s;
  if (flags & kResetMoments) s = adamw_unit_init();
  s.step += 1;
  s.beta1_pow = math::dmul(s.beta1_pow, static_cast<double>(h.beta1));
  s.beta2_pow = math::dmul(s.beta2_pow, static_cast<double>(h.beta2));
  return s;
}

// Everything an element update needs, computed once per unit and step.
struct AdamWCoef {
  std::uint32_t flags;
  float scale;
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
  float step_size;  // lr / (1 - beta1^t)
  float bc2_sqrt;   // sqrt(1 - beta2^t)
  float decay;      // 1 - lr * wd
};

// s is the state *after* adamw_advance; lr may come from device memory.
GNMR_HOST_DEVICE AdamWCoef adamw_coef(const AdamWParams& h, float lr, const AdamWUnitState& s,
                                      UnitDecision d) {
  AdamWCoef c;
  c.flags = d.flags;
  c.scale = d.scale;
  c.beta1 = h.beta1;
  c.beta2 = h.beta2;
  c.one_minus_beta1 = math::sub(1.0f, h.beta1);
  c.one_minus_beta2 = math::sub(1.0f, h.beta2);
  c.eps = h.eps;
  const double bc1 = math::dadd(1.0, -s.beta1_pow);
  const double bc2 = math::dadd(1.0, -s.beta2_pow);
  c.step_size = static_cast<float>(math::ddiv(static_cast<double>(lr), bc1));
  c.bc2_sqrt = static_cast<float>(dsqrt(bc2));
  c.decay = math::sub(1.0f, math::mul(lr, h.weight_decay));
  return c;
}

// One element. Callers skip the call (and every memory access) for kSkip;
// the check here keeps the function safe on its own.
GNMR_HOST_DEVICE void adamw_element(const AdamWCoef& c, float& p, float g_raw, float& m, float& v) {
  if (c.flags & kSkip) return;
  const bool reset = (c.flags & kResetMoments) != 0u;
  const float g = math::mul(g_raw, c.scale);
  const float m0 = reset ? 0.0f : m;
  const float v0 = reset ? 0.0f : v;
  m = math::add(math::mul(c.beta1, m0), math::mul(c.one_minus_beta1, g));
  v = math::add(math::mul(c.beta2, v0), math::mul(math::mul(c.one_minus_beta2, g), g));
  const float denom = math::add(math::div(math::sqrt(v), c.bc2_sqrt), c.eps);
  p = math::sub(math::mul(p, c.decay), math::mul(c.step_size, math::div(m, denom)));
}

}  // namespace detail
}  // namespace gnmr
