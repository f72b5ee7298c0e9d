// demo/qlinear.hpp — a linear layer whose three GEMMs run in emulated low
// precision, one operator (one gnmr unit) at a time.
//
//   forward  y  = q(x) q(W)^T + b        x: fwd_x format, W: fwd_w
//   dgrad    dx = q(dy) q(W)             dy: bwd format; W as in the forward
//   wgrad    dW = dy^T x                 high precision, or with wgrad on:
//                                        q(dy)^T q(x) in the bwd / fwd_x formats
//   db = sum dy                          always from the unquantized dy
//
// A custom torch::autograd::Function, because the backward must quantize
// the output gradient, which a straight-through estimator cannot express.
// With per-tensor scaling an operand is quantized once and reused by both
// GEMMs that read it (Transformer Engine does the same); with NVFP4 block
// scaling each GEMM quantizes along its own reduction dimension (W and dy
// are re-quantized transposed). Under --format nvfp4-recipe (NVIDIA's
// recipe, CPU only: nvfp4_recipe.hpp) the weight is quantized once in 16x16
// blocks for both the forward and the dgrad, dy is rounded stochastically,
// and the wgrad's inputs pass through the random Hadamard transform along
// the tokens first, and with QuantContext::want_noise the layer adds the
// expected squared norm of the noise that rounding put into dW to
// OpState::noise (the noise-floor trigger's aux). A pinned operator (the
// recipe's head) is never quantized. Each operator keeps three amax histories
// (x, W, dy). A promoted operator runs all three GEMMs unquantized and still
// feeds its histories, so its scales are fresh when it drops back.
//
// The operator's outlier injection (stress.hpp) multiplies chosen input
// channels as a detached perturbation: the forward and the weight gradient
// see the large activation, the gradient sent upstream is the ordinary one
// (a large activation does not scale dL/dx of the layer below).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "nvfp4_recipe.hpp"
#include "quant.hpp"

namespace demo {

// Per operator: identity, histories, this step's outlier gain.
struct OpState {
  std::string name;
  int index = 0;
  std::int64_t in = 0, out = 0;
  AmaxHistory hx, hw, hdy;
  torch::Tensor gain;  // [in], defined while an outlier event is active
  bool pinned = false;  // never quantized (the NVFP4 recipe's head): a plain linear
  double noise = 0.0;   // this step's E||e||^2 in dW from stochastic rounding (QuantContext::want_noise)
};

// Shared by every QLinear of a model.
struct QuantContext {
  QuantConfig cfg;
  bool enabled = true;  // false: every GEMM in high precision, histories untouched (evaluation)
  // nvfp4-recipe: the run's seed and this step (the stochastic rounding's
  // draws), the Hadamard transform's signs (fixed for the run).
  std::uint64_t seed = 0;
  std::int64_t step = 0;
  float rht[16] = {};
  bool want_noise = false;  // nvfp4-recipe: add each weight gradient's rounding noise to OpState::noise
  std::vector<std::uint8_t> promoted;  // CPU: per operator, this step
  torch::Tensor promoted_dev;           // CUDA: bool [ops], written on the device

  Promoted promoted_of(int op) const {
    Promoted p;
    if (promoted_dev.defined()) p.dev = promoted_dev.select(0, op);
    else p.host = promoted[static_cast<std::size_t>(op)] != 0;
    return p;
  }
};

// --- nvfp4-recipe (nvfp4_recipe.hpp), CPU tensors -------------------------

inline torch::Tensor cpu_contig(const torch::Tensor& x) {
  if (!x.is_cpu()) throw std::logic_error("nvfp4-recipe runs on the CPU only");
  return x.contiguous();
}

// The weight [N, K] in 16x16 blocks: the forward's and the dgrad's operand.
inline torch::Tensor recipe_weight(const torch::Tensor& w, const Promoted& pro) {
  if (pro.host) return w;
  const auto wc = cpu_contig(w);
  auto y = torch::empty_like(wc);
  qdq_nvfp4_2d(wc.data_ptr<float>(), y.data_ptr<float>(), static_cast<std::size_t>(wc.size(0)),
               static_cast<std::size_t>(wc.size(1)));
  return y;
}

// (dx, dW) of the recipe: dgrad = sr(dy along N) q2d(W); wgrad =
// sr(rht(dy^T) along M) rne(rht(x^T) along M)^T. A promoted operator: both
// unquantized.
inline std::pair<torch::Tensor, torch::Tensor> recipe_backward(const torch::Tensor& x2, const torch::Tensor& qw,
                                                               const torch::Tensor& dy2, OpState* op,
                                                               const QuantContext* qc, const Promoted& pro) {
  if (pro.host) return {dy2.mm(qw), dy2.t().mm(x2)};
  const auto dyc = cpu_contig(dy2);
  const auto M = static_cast<std::size_t>(dyc.size(0)), N = static_cast<std::size_t>(dyc.size(1));
  const auto K = static_cast<std::size_t>(x2.size(1));
  auto qdy = torch::empty_like(dyc);
  qdq_nvfp4_sr(dyc.data_ptr<float>(), qdy.data_ptr<float>(), M, N, sr_key(qc->seed, qc->step, op->index, 0));
  const auto dx = qdy.mm(qw);
  auto dyt = dyc.t().contiguous();       // [N, M]
  auto xt = cpu_contig(x2).t().contiguous();  // [K, M]
  rht16_rows(dyt.data_ptr<float>(), N, M, qc->rht);
  rht16_rows(xt.data_ptr<float>(), K, M, qc->rht);
  auto qdyt = torch::empty_like(dyt), qxt = torch::empty_like(xt);
  torch::Tensor var;
  if (qc->want_noise) var = torch::empty_like(dyt);
  qdq_nvfp4_sr(dyt.data_ptr<float>(), qdyt.data_ptr<float>(), N, M, sr_key(qc->seed, qc->step, op->index, 1),
               qc->want_noise ? var.data_ptr<float>() : nullptr);
  qdq_nvfp4(xt.data_ptr<float>(), qxt.data_ptr<float>(), K, M);
  // The noise of dW = q(dy^T) q(x^T)^T: only dy^T is rounded stochastically
  // (x^T rounds to nearest: a bias, not noise), so its variances times the
  // squares of q(x^T), per token (nvfp4_recipe.hpp, sr_product_noise).
  if (qc->want_noise) op->noise += sr_product_noise(var.data_ptr<float>(), N, qxt.data_ptr<float>(), K, M);
  return {dx, qdyt.mm(qxt.t())};
}

struct QLinearFn : public torch::autograd::Function<QLinearFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& w, const torch::Tensor& b, OpState* op,
                               QuantContext* qc) {
    const QuantConfig& c = qc->cfg;
    const Promoted pro = qc->promoted_of(op->index);
    const auto shape = x.sizes().vec();
    const auto x2 = x.reshape({-1, op->in}).contiguous();
    const bool recipe = c.scaling == Scaling::kNvfp4Recipe;
    const auto qx = operand(x2, c.fwd_x, recipe ? Scaling::kBlock16 : c.scaling, &op->hx, pro);
    const auto qw = recipe ? recipe_weight(w, pro) : operand(w, c.fwd_w, c.scaling, &op->hw, pro);
    ctx->save_for_backward({x2, qx, w, qw});
    ctx->saved_data["op"] = reinterpret_cast<std::int64_t>(op);
    ctx->saved_data["qc"] = reinterpret_cast<std::int64_t>(qc);
    auto y = torch::addmm(b, qx, qw.t());
    auto out_shape = shape;
    out_shape.back() = op->out;
    return y.view(out_shape);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* op = reinterpret_cast<OpState*>(ctx->saved_data["op"].toInt());
    auto* qc = reinterpret_cast<QuantContext*>(ctx->saved_data["qc"].toInt());
    const QuantConfig& c = qc->cfg;
    const Promoted pro = qc->promoted_of(op->index);
    const auto saved = ctx->get_saved_variables();
    const auto &x2 = saved[0], &qx = saved[1], &w = saved[2], &qw = saved[3];
    const auto& dy = grads[0];
    const auto shape = dy.sizes().vec();
    const auto dy2 = dy.reshape({-1, op->out}).contiguous();
    const bool block = c.scaling == Scaling::kBlock16;
    if (c.scaling == Scaling::kNvfp4Recipe) {
      auto r = recipe_backward(x2, qw, dy2, op, qc, pro);
      auto in_shape = shape;
      in_shape.back() = op->in;
      return {r.first.view(in_shape), r.second, dy2.sum(0), torch::Tensor(), torch::Tensor()};
    }

    const auto qdy = operand(dy2, c.bwd, c.scaling, &op->hdy, pro);
    // dgrad: dx[M,K] = dy[M,N] W[N,K]; with blocks, W along N (transposed).
    const auto w_dgrad = block ? operand(w.t().contiguous(), c.fwd_w, c.scaling, nullptr, pro).t() : qw;
    auto dx = qdy.mm(w_dgrad);
    // wgrad: dW[N,K] = dy^T[N,M] x[M,K]; with blocks, both along M.
    torch::Tensor dw;
    if (!c.wgrad) {
      dw = dy2.t().mm(x2);
    } else if (block) {
      const auto dyt = operand(dy2.t().contiguous(), c.bwd, c.scaling, nullptr, pro);
      const auto xt = operand(x2.t().contiguous(), c.fwd_x, c.scaling, nullptr, pro);
      dw = dyt.mm(xt.t());
    } else {
      dw = qdy.t().mm(qx);
    }
    auto in_shape = shape;
    in_shape.back() = op->in;
    return {dx.view(in_shape), dw, dy2.sum(0), torch::Tensor(), torch::Tensor()};
  }
};

// nn::Linear's parameters (weight [out, in], bias [out]) with QLinearFn.
struct QLinearImpl : torch::nn::Module {
  QLinearImpl(int in, int out, OpState* op, QuantContext* qc) : op_(op), qc_(qc) {
    weight = register_parameter("weight", torch::empty({out, in}));
    bias = register_parameter("bias", torch::zeros({out}));
    op->in = in;
    op->out = out;
  }
  torch::Tensor forward(torch::Tensor x) {
    if (op_->gain.defined()) x = x + (x * (op_->gain - 1.0)).detach();
    if (!qc_->enabled || !qc_->cfg.any() || op_->pinned) return torch::addmm(bias, x.reshape({-1, op_->in}), weight.t())
                                               .view(out_shape(x));
    return QLinearFn::apply(x, weight, bias, op_, qc_);
  }
  std::vector<std::int64_t> out_shape(const torch::Tensor& x) const {
    auto s = x.sizes().vec();
    s.back() = op_->out;
    return s;
  }
  torch::Tensor weight, bias;
  OpState* op_;
  QuantContext* qc_;
};
TORCH_MODULE(QLinear);

}  // namespace demo
