// demo/optim.hpp — the recipe's optimizer, schedule and evaluation.
//
// AdamW is written out per parameter tensor (not torch::optim::AdamW)
// because the decisions are per unit: kSkip must leave that tensor's
// weights, moments and step counter exactly as they were (we do not touch
// them: a select, never a multiply by zero), kResetMoments zeroes its
// moments and its own bias-correction step counter, and `scale` (the arm's
// rule times the recipe's clip) multiplies its gradient.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "gnmr/core/types.hpp"
#include "model.hpp"

namespace demo {

struct AdamWHyper {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, wd = 0.1;
};

// Linear warm-up, then cosine decay to 10% of the peak.
inline double lr_at(double peak, int warmup, int steps, int step) {
  if (step <= warmup) return peak * step / warmup;
  const double p = static_cast<double>(step - warmup) / std::max(1, steps - warmup);
  return peak * (0.1 + 0.9 * 0.5 * (1.0 + std::cos(3.14159265358979323846 * p)));
}

class AdamW {
 public:
  AdamW(std::vector<torch::Tensor> params, std::vector<bool> decay, const AdamWHyper& h)
      : p_(std::move(params)), decay_(std::move(decay)), h_(h), step_(p_.size(), 0) {
    for (auto& p : p_) {
      m_.push_back(torch::zeros_like(p));
      v_.push_back(torch::zeros_like(p));
    }
  }

  // The moment buffers, for the fused CUDA AdamW that updates them in place.
  torch::Tensor& exp_avg(std::size_t i) { return m_[i]; }
  torch::Tensor& exp_avg_sq(std::size_t i) { return v_[i]; }

  // d: the decision of tensor i's unit; global_skip: skip the whole step.
  void step(const std::vector<gnmr::UnitDecision>& d, const std::vector<std::uint32_t>& unit_of_tensor,
            bool global_skip, double lr) {
    torch::NoGradGuard ng;
    if (global_skip) return;
    for (std::size_t i = 0; i < p_.size(); ++i) {
      const gnmr::UnitDecision di = d[unit_of_tensor[i]];
      if (di.flags & gnmr::kResetMoments) {
        m_[i].zero_();
        v_[i].zero_();
        step_[i] = 0;
      }
      if (di.flags & gnmr::kSkip) continue;  // weights, m, v, step untouched
      auto g = p_[i].grad();
      if (di.scale != 1.0f) g = g * static_cast<double>(di.scale);
      const auto t = ++step_[i];
      m_[i].mul_(h_.beta1).add_(g, 1.0 - h_.beta1);
      v_[i].mul_(h_.beta2).addcmul_(g, g, 1.0 - h_.beta2);
      const double bc1 = 1.0 - std::pow(h_.beta1, static_cast<double>(t));
      const double bc2 = 1.0 - std::pow(h_.beta2, static_cast<double>(t));
      if (decay_[i]) p_[i].mul_(1.0 - lr * h_.wd);
      p_[i].addcdiv_(m_[i], (v_[i] / bc2).sqrt_().add_(h_.eps), -lr / bc1);
    }
  }

 private:
  std::vector<torch::Tensor> p_, m_, v_;
  std::vector<bool> decay_;
  AdamWHyper h_;
  std::vector<std::int64_t> step_;
};

// Mean loss over the fixed validation windows, in chunks.
inline double eval_loss(Gpt& model, const std::pair<torch::Tensor, torch::Tensor>& vs, int chunk) {
  torch::NoGradGuard ng;
  double sum = 0;
  const auto n = vs.first.size(0);
  for (std::int64_t o = 0; o < n; o += chunk) {
    const auto e = std::min<std::int64_t>(n, o + chunk);
    sum += model->loss(vs.first.slice(0, o, e), vs.second.slice(0, o, e)).item<double>() *
           static_cast<double>(e - o);
  }
  return sum / static_cast<double>(n);
}

}  // namespace demo
