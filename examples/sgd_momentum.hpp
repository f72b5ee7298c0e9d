// examples/sgd_momentum.hpp — SGD with momentum (torch.optim.SGD's rule,
// dampening 0, no Nesterov) applying a gnmr decision to one element: the
// update an optimizer of one's own runs, written once for the CUDA kernel of
// sgd_momentum_cuda.cu and for its CPU reference (sgd_case.hpp), and tested
// against hand-computed values in tests/unit/test_examples_logic.cpp.
//
// What a decision asks of any optimizer (docs/algorithm.md, Recovery):
//   kSkip          leave p and the momentum buffer exactly as they are; a
//                  select, never a multiply: the gradient may be NaN
//   kResetMoments  zero the momentum buffer before this step's update
//   scale          multiply the gradient, always: the default's stabilizer
//                  sets every unit's scale on every step (GNMR's own presets
//                  leave 1 outside recovery and put the clip inside)
// A kernel normally tests kSkip once per block and returns (nothing read);
// update() tests it again so that the element rule holds on its own.
#pragma once

#include "gnmr/core/math.hpp"
#include "gnmr/core/types.hpp"

namespace sgdm {

struct Hyper {
  float lr = 0.05f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;  // L2, added to the (scaled) gradient
};

// buf <- momentum * buf + (scale * g + weight_decay * p);  p <- p - lr * buf.
// Through gnmr::math with contraction off on the host, so the device and the
// host reference produce the same bits.
GNMR_HOST_DEVICE void update(const Hyper& h, const gnmr::UnitDecision& d, float& p, float& buf, float g) {
  if (d.flags & gnmr::kSkip) return;
  const float b0 = (d.flags & gnmr::kResetMoments) ? 0.0f : buf;
  const float gs = gnmr::math::add(gnmr::math::mul(d.scale, g), gnmr::math::mul(h.weight_decay, p));
  buf = gnmr::math::add(gnmr::math::mul(h.momentum, b0), gs);
  p = gnmr::math::sub(p, gnmr::math::mul(h.lr, buf));
}

}  // namespace sgdm
