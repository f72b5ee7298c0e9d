// demo/train.hpp — one training run of gnmr-demo under one controller.
//
// The optimizer is AdamW written out per parameter tensor (not
// torch::optim::AdamW) because the controller's decisions are per unit:
// kSkip must leave that tensor's weights, moments and step counter exactly
// as they were (we simply do not touch them: a select, never a multiply by
// zero), kResetMoments zeroes its moments and its own bias-correction step
// counter, and `scale` multiplies its gradient.
//
// Units are the parameter tensors, in named_parameters() order. On the CPU
// their partials (sums of squares) come from gnmr::host_unit_partials (one
// segment per tensor), the host controller decides and this AdamW applies.
// On CUDA the whole guarded step is gnmr's CUDA backend (cuda_backend.hpp:
// NormPlan, the device controller, the fused AdamW over these same m and v
// buffers). Global presets (clip, zclip, skip-step) see one unit whose
// partial is the sum — L2 partials add — and their single decision applies
// to every tensor.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "gnmr/dyn.hpp"
#include "gnmr/host/norms.hpp"
#include "gnmr/presets.hpp"
#include "gnmr/types.hpp"

#include "cuda_backend.hpp"
#include "data.hpp"
#include "model.hpp"
#include "quant.hpp"

namespace demo {

struct RunConfig {
  std::string controller = "gnmr";
  std::string label;  // row name; controller name unless set
  Stress stress = Stress::kFp8;
  double fault_rate = 0.0;
  FaultKind fault_kind = FaultKind::kMixed;
  double fault_factor = 1000.0;
  int steps = 300;
  std::uint64_t seed = 1;
  int batch = 16;
  int eval_every = 50;
  int val_windows = 128;
  double lr = 1e-2, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, wd = 0.1;
  int warmup = 20;
  long max_o = 0;  // > 0: override maxO of the gnmr presets
  long gnmr_warmup = -1;  // >= 0: override the gnmr presets' trigger warm-up
  bool keep_unit_trace = false;  // per-unit norms and ratios (trace + heat map)
  torch::Device device = torch::kCPU;
};

struct StepRow {
  int step = 0;
  double lr = 0, train_loss = 0, val_loss = NAN;  // val: NaN when not evaluated
  std::uint32_t triggered = 0, granted = 0, in_recovery = 0, denied = 0, nonfinite = 0;
  std::uint32_t skip_step = 0, skipped_units = 0, reset_units = 0;
  int fault_unit = -1;
  const char* fault = "";
  double control_ms = 0, step_ms = 0;
};

struct RunResult {
  std::string label, controller;
  std::vector<StepRow> rows;
  std::vector<std::string> unit_names;             // parameter tensors
  std::vector<std::vector<float>> norms, ratios;   // [step][controller unit], if kept
  std::vector<std::vector<std::uint32_t>> granted_units;  // [step], if kept
  std::size_t controller_units = 0;
  std::uint32_t max_in_recovery_limit = 0xffffffffu;
  double initial_loss = NAN, final_train = NAN, final_val = NAN;
  bool nonfinite_loss = false;
};

// "clip+gnmr": a layered controller, the training recipe's global rule
// (outer, one unit on the global norm) with a per-unit one inside it. Both
// see the raw gradients; a tensor is skipped or reset if either rule says
// so, and its gradient gets the product of the two scales. The table's
// recovery columns count the inner rule's units.
struct Layers {
  std::string outer, inner;
};
inline Layers parse_layers(const std::string& name) {
  const auto plus = name.find('+');
  if (plus == std::string::npos) return {"", name};
  Layers l{name.substr(0, plus), name.substr(plus + 1)};
  if (!gnmr::presets::is_global(l.outer) || gnmr::presets::is_global(l.inner))
    throw std::invalid_argument("'" + name + "': a layered controller is <global preset>+<per-unit preset>, "
                                "e.g. clip+gnmr");
  return l;
}

// Cosine decay to 10% after a linear warm-up.
inline double lr_at(const RunConfig& c, int step) {
  if (step <= c.warmup) return c.lr * step / c.warmup;
  const double p = static_cast<double>(step - c.warmup) / std::max(1, c.steps - c.warmup);
  return c.lr * (0.1 + 0.9 * 0.5 * (1.0 + std::cos(3.14159265358979323846 * p)));
}

class AdamW {
 public:
  AdamW(std::vector<torch::Tensor> params, std::vector<bool> decay, const RunConfig& c)
      : p_(std::move(params)), decay_(std::move(decay)), c_(c), step_(p_.size(), 0) {
    for (auto& p : p_) {
      m_.push_back(torch::zeros_like(p));
      v_.push_back(torch::zeros_like(p));
    }
  }

  // The moment buffers, for the fused CUDA AdamW that updates them in place.
  torch::Tensor& exp_avg(std::size_t i) { return m_[i]; }
  torch::Tensor& exp_avg_sq(std::size_t i) { return v_[i]; }

  // d: the decision for tensor i; global_skip: the controller asked to skip.
  void step(const std::vector<gnmr::UnitDecision>& d, bool global_skip, double lr) {
    torch::NoGradGuard ng;
    if (global_skip) return;
    for (std::size_t i = 0; i < p_.size(); ++i) {
      if (d[i].flags & gnmr::kResetMoments) {
        m_[i].zero_();
        v_[i].zero_();
        step_[i] = 0;
      }
      if (d[i].flags & gnmr::kSkip) continue;  // weights, m, v, step untouched
      auto g = p_[i].grad();
      if (d[i].scale != 1.0f) g = g * static_cast<double>(d[i].scale);
      const auto t = ++step_[i];
      m_[i].mul_(c_.beta1).add_(g, 1.0 - c_.beta1);
      v_[i].mul_(c_.beta2).addcmul_(g, g, 1.0 - c_.beta2);
      const double bc1 = 1.0 - std::pow(c_.beta1, static_cast<double>(t));
      const double bc2 = 1.0 - std::pow(c_.beta2, static_cast<double>(t));
      if (decay_[i]) p_[i].mul_(1.0 - lr * c_.wd);
      p_[i].addcdiv_(m_[i], (v_[i] / bc2).sqrt_().add_(c_.eps), -lr / bc1);
    }
  }

 private:
  std::vector<torch::Tensor> p_, m_, v_;
  std::vector<bool> decay_;
  RunConfig c_;
  std::vector<std::int64_t> step_;
};

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

inline RunResult train_one(const Corpus& data, ModelConfig mc, const RunConfig& rc) {
  using clk = std::chrono::steady_clock;
  const auto ms = [](clk::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  RunResult R;
  R.controller = rc.controller;
  R.label = rc.label.empty() ? rc.controller : rc.label;

  torch::manual_seed(rc.seed);  // same init for every controller
  Stress stress = rc.stress;
  mc.vocab = data.vocab;
  Gpt model(mc, &stress);
  model->to(rc.device);
  std::vector<torch::Tensor> params;
  std::vector<bool> decay;
  for (auto& p : model->named_parameters()) {
    R.unit_names.push_back(p.key());
    params.push_back(p.value());
    decay.push_back(p.value().dim() >= 2);  // no decay on biases, LayerNorm
  }
  const std::size_t nt = params.size();
  AdamW opt(params, decay, rc);

  const Layers lay = parse_layers(rc.controller);
  const std::string& inner = lay.inner;
  const bool global = gnmr::presets::is_global(inner);
  std::unique_ptr<gnmr::DynController> octrl;  // the recipe's global rule, if layered
  if (!lay.outer.empty()) {
    if (!rc.device.is_cpu())
      throw std::invalid_argument("gnmr-demo: layered controllers ('" + rc.controller +
                                  "') run on --device cpu only");
    octrl = gnmr::presets::make(lay.outer, 1);
  }
  gnmr::presets::Options opts;
  const bool is_gnmr = inner.rfind("gnmr", 0) == 0;
  if (rc.max_o > 0 && is_gnmr) opts.max_o = rc.max_o;
  if (rc.gnmr_warmup >= 0 && is_gnmr) opts.warmup = rc.gnmr_warmup;
  const bool on_cpu = rc.device.is_cpu();
  std::unique_ptr<gnmr::DynController> ctrl;
  std::unique_ptr<CudaBackend> gpu;
  std::vector<const void*> grad_at(nt);  // CUDA: the fused step baked these in
  if (on_cpu) {
    ctrl = gnmr::presets::make(inner, global ? 1 : nt, opts);
    R.controller_units = ctrl->num_units();
    R.max_in_recovery_limit = ctrl->max_in_recovery();
  } else {
    // The gradients must stay where the plans point: create them now and
    // zero them in place every step (zero_grad(false)), never set to None.
    std::vector<CudaTensorRef> refs;
    for (std::size_t i = 0; i < nt; ++i) {
      auto& p = params[i];
      p.mutable_grad() = torch::zeros_like(p);
      for (const torch::Tensor& t : {p, p.grad(), opt.exp_avg(i), opt.exp_avg_sq(i)})
        if (!t.is_contiguous() || t.scalar_type() != torch::kFloat || !t.is_cuda())
          throw std::runtime_error("gnmr-demo: --device cuda needs contiguous fp32 CUDA tensors");
      grad_at[i] = p.grad().data_ptr();
      refs.push_back({p.data_ptr<float>(), p.grad().data_ptr<float>(), opt.exp_avg(i).data_ptr<float>(),
                      opt.exp_avg_sq(i).data_ptr<float>(), static_cast<std::uint64_t>(p.numel()),
                      static_cast<bool>(decay[i])});
    }
    gpu.reset(new CudaBackend(rc.controller, opts, global, refs));
    R.controller_units = gpu->num_units();
    R.max_in_recovery_limit = gpu->max_in_recovery();
  }

  auto faults = fault_schedule(rc.steps, rc.fault_rate, rc.fault_kind, static_cast<int>(nt), rc.seed);
  std::mt19937_64 batch_rng(rc.seed);
  auto vs = val_set(data.val, rc.val_windows, mc.ctx);
  vs.first = vs.first.to(rc.device);
  vs.second = vs.second.to(rc.device);

  std::vector<float> tensor_partials(nt);
  std::vector<gnmr::Segment> segs(nt);
  std::vector<gnmr::UnitDecision> per_tensor(nt);

  for (int step = 1; step <= rc.steps; ++step) {
    const auto t0 = clk::now();
    StepRow row;
    row.step = step;
    row.lr = lr_at(rc, step);
    auto batch = sample_batch(data.train, rc.batch, mc.ctx, batch_rng);
    model->zero_grad(/*set_to_none=*/false);
    auto loss = model->loss(batch.first.to(rc.device), batch.second.to(rc.device));
    row.train_loss = loss.item<double>();
    if (step == 1) R.initial_loss = row.train_loss;
    if (!std::isfinite(row.train_loss)) {
      // The weights are already non-finite: nothing further can change.
      R.nonfinite_loss = true;
      R.rows.push_back(row);
      break;
    }
    loss.backward();

    const Fault& f = faults[static_cast<std::size_t>(step - 1)];
    if (f.unit >= 0) {
      auto g = params[static_cast<std::size_t>(f.unit)].grad();
      inject(g, f, rc.fault_factor);
      row.fault_unit = f.unit;
      row.fault = f.nonfinite ? (f.inf ? "inf" : "nan") : "scale";
    }

    // --- the controller's share: partials, one controller step ----------
    const gnmr::StepSummary* sum = nullptr;
    const std::vector<gnmr::UnitDecision>* dec = nullptr;  // the controller's units
    const std::vector<gnmr::UnitReport>* reps = nullptr;
    if (on_cpu) {
      const auto c0 = clk::now();
      for (std::size_t i = 0; i < nt; ++i) {
        const auto& g = params[i].grad();
        segs[i] = gnmr::Segment{g.data_ptr<float>(), static_cast<std::uint64_t>(g.numel()),
                                gnmr::DType::kF32, static_cast<std::uint32_t>(i)};
      }
      gnmr::host_unit_partials(segs.data(), nt, tensor_partials.data(), nt);
      double s = 0;  // global rules: L2 partials add; a NaN/Inf makes the sum non-finite
      if (global || octrl)
        for (float p : tensor_partials) s += p;
      const float total = static_cast<float>(s);
      sum = global ? &ctrl->step(&total, 1) : &ctrl->step(tensor_partials.data(), nt);
      if (octrl) octrl->step(&total, 1);  // the recipe's rule, on the same raw partials
      row.control_ms = ms(clk::now() - c0);
      dec = &ctrl->decisions();
      reps = &ctrl->reports();
    } else {
      for (std::size_t i = 0; i < nt; ++i)
        if (params[i].grad().data_ptr() != grad_at[i])
          throw std::logic_error("gnmr-demo: a gradient moved; the CUDA plans point at the old buffer");
      gnmr::AdamWParams h;
      h.lr = static_cast<float>(row.lr);
      h.beta1 = static_cast<float>(rc.beta1);
      h.beta2 = static_cast<float>(rc.beta2);
      h.eps = static_cast<float>(rc.eps);
      h.weight_decay = static_cast<float>(rc.wd);
      // partials, controller and the fused AdamW; results read back for the CSV
      sum = &gpu->step(h, &row.control_ms, rc.keep_unit_trace);
      dec = &gpu->decisions();
      reps = &gpu->reports();
    }
    for (std::size_t i = 0; i < nt; ++i) per_tensor[i] = (*dec)[global ? 0 : i];
    if (octrl) {  // both rules apply: skip or reset if either says so, scales multiply
      const gnmr::UnitDecision o = octrl->decisions()[0];
      for (auto& d : per_tensor) {
        d.flags |= o.flags & (gnmr::kSkip | gnmr::kResetMoments);
        d.scale = (d.flags & gnmr::kSkip) ? 0.0f : d.scale * o.scale;
      }
    }

    if (sum->in_recovery > R.max_in_recovery_limit)
      throw std::logic_error("gnmr-demo: " + R.label + " has " + std::to_string(sum->in_recovery) +
                             " units in recovery, above its maxO of " +
                             std::to_string(R.max_in_recovery_limit));
    if (on_cpu) opt.step(per_tensor, sum->skip_step != 0, row.lr);

    row.triggered = sum->triggered;
    row.granted = sum->granted;
    row.in_recovery = sum->in_recovery;
    row.denied = sum->denied;
    row.nonfinite = sum->nonfinite;
    row.skip_step = sum->skip_step;
    for (const auto& d : per_tensor) {
      row.skipped_units += (sum->skip_step || (d.flags & gnmr::kSkip)) ? 1u : 0u;
      row.reset_units += (d.flags & gnmr::kResetMoments) ? 1u : 0u;
    }
    if (rc.keep_unit_trace) {
      std::vector<float> n, r;
      std::vector<std::uint32_t> g;
      for (std::size_t u = 0; u < reps->size(); ++u) {
        n.push_back((*reps)[u].norm);
        r.push_back((*reps)[u].ratio);
        if ((*reps)[u].flags & gnmr::kGranted) g.push_back(static_cast<std::uint32_t>(u));
      }
      R.norms.push_back(std::move(n));
      R.ratios.push_back(std::move(r));
      R.granted_units.push_back(std::move(g));
    }
    row.step_ms = ms(clk::now() - t0);  // evaluation excluded
    if (step % rc.eval_every == 0 || step == rc.steps) {
      row.val_loss = eval_loss(model, vs, 32);
      R.final_val = row.val_loss;
    }
    R.rows.push_back(row);
  }
  // A single batch's loss is noisy: the final train loss is the mean of the
  // last (up to) 10 steps.
  double s = 0;
  int k = 0;
  for (auto it = R.rows.rbegin(); it != R.rows.rend() && k < 10; ++it, ++k) s += it->train_loss;
  R.final_train = k ? s / k : NAN;
  if (R.nonfinite_loss) R.final_train = R.final_val = NAN;
  return R;
}

}  // namespace demo
