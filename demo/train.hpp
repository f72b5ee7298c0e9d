// demo/train.hpp — one training run: (scenario, arm, seed, settings) -> its
// losses, decisions, promotions and ground truth.
//
// A step: set this step's promoted operators and outlier gains; forward,
// backward; inject gradient faults; per-unit partials; the arm's controller
// (a preset, or a layered "outer+inner" controller of the library); the
// recipe's global clip over what the rule lets through (recipe.hpp); AdamW;
// then the promotion mask of the next step (promotion.hpp). On the CPU the
// partials come from gnmr::host_unit_partials (each parameter tensor a
// Segment of its unit) and a host controller decides; on CUDA the whole
// guarded step is gnmr's CUDA backend (cuda_backend.hpp) over libtorch's
// buffers.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "gnmr/host/dyn_controller.hpp"
#include "gnmr/host/unit_norms.hpp"
#include "gnmr/policy/trigger_noise.hpp"
#include "gnmr/presets/make.hpp"

#include "cuda_backend.hpp"
#include "data.hpp"
#include "optim.hpp"
#include "recipe.hpp"
#include "settings.hpp"

namespace demo {

struct StepRow {
  int step = 0;
  double lr = 0, train_loss = 0, val_loss = NAN;  // val: NaN when not evaluated
  std::uint32_t triggered = 0, granted = 0, in_recovery = 0, denied = 0, nonfinite = 0;
  std::uint32_t skip_step = 0, skipped_units = 0, reset_units = 0, hp_ops = 0;
  int fault_unit = -1, outlier_op = -1;
  const char* fault = "";
  float total_norm = 0, clip_factor = 1;
  double control_ms = 0, step_ms = 0;
};

struct Act {  // a unit acted on at a step (a grant, or where a promotion went)
  int step;
  std::uint32_t unit;
};
struct TruthEvent {  // an injected event on a unit
  int step, len;
  std::uint32_t unit;
};

struct RunResult {
  std::string label, controller;
  std::vector<StepRow> rows;
  std::vector<std::string> unit_names, op_names;
  std::vector<int> op_of_unit;
  std::vector<double> op_weight;  // GEMM FLOPs per step of each operator (relative: in x out)
  std::vector<std::vector<std::uint8_t>> masks;  // [step-1][op]: ran in high precision
  std::vector<Act> acts;
  std::vector<TruthEvent> truth;
  std::vector<std::vector<float>> norms, ratios;          // [step][controller unit], if kept
  std::vector<std::vector<std::uint32_t>> granted_units;  // [step], if kept
  std::vector<float> snr;  // an aux arm: n / a of each judged operator unit-step (noise_c's choice)
  std::size_t controller_units = 0;
  std::uint32_t max_in_recovery_limit = 0xffffffffu;
  double initial_loss = NAN, final_train = NAN, final_val = NAN;
  bool nonfinite_loss = false;
};

inline std::unique_ptr<gnmr::DynController> make_controller(const std::string& name, std::size_t units,
                                                            const gnmr::presets::Options& o) {
  return gnmr::presets::make(name, units, o);  // a preset or a layered "outer+inner"
}

// The mask table of a table arm ([steps + 1][ops]), given what it depends on.
struct RunInputs {
  std::vector<Episode> episodes;  // random: gnmr-promote's promotion episodes
  double hp_share = 0;            // fixed-list: gnmr-promote's high-precision share
};

inline RunResult train_one(const Corpus& data, const RunConfig& rc, const RunInputs& in = {}) {
  using clk = std::chrono::steady_clock;
  const auto ms = [](clk::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  const torch::Device dev = rc.device == "cuda" ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  RunResult R;
  R.controller = rc.arm.controller;
  R.label = rc.name();

  torch::manual_seed(rc.seed);  // same init for every arm
  ModelConfig mc = rc.model;
  mc.vocab = data.vocab;
  OpTable ops;
  QuantContext qc;
  qc.cfg = rc.quant;
  qc.cfg.check();
  if (rc.arm.high) qc.cfg.fwd_x = qc.cfg.fwd_w = qc.cfg.bwd = Fmt::kNone;
  if (qc.cfg.scaling == Scaling::kNvfp4Recipe && qc.cfg.any() && dev.is_cuda())
    throw std::invalid_argument("--format nvfp4-recipe runs on the CPU only (its rounding loops are host code)");
  qc.seed = rc.seed;
  rht_signs(rc.seed, qc.rht);
  Gpt model(mc, ops, &qc);
  model->to(dev);
  const int n_ops = static_cast<int>(ops.ops.size());
  std::vector<std::uint8_t> eligible(static_cast<std::size_t>(n_ops), 1);  // can run in low precision
  for (auto& o : ops.ops)
    if (rc.quant.head_high && o.name == "head") o.pinned = true, eligible[static_cast<std::size_t>(o.index)] = 0;
  std::vector<torch::Tensor> params;
  std::vector<std::string> tnames;
  std::vector<bool> decay;
  for (auto& p : model->named_parameters()) {
    tnames.push_back(p.key());
    params.push_back(p.value());
    decay.push_back(p.value().dim() >= 2);  // no decay on biases, LayerNorm
  }
  UnitMap um = unit_map(tnames, ops);
  // A pinned operator's unit is no operator unit: a grant on it promotes
  // nothing, as for LayerNorm or the embeddings.
  for (const auto& o : ops.ops)
    if (o.pinned) um.op_of_unit[um.unit_of_op[static_cast<std::size_t>(o.index)]] = -1;
  const std::size_t nt = params.size(), nu = um.unit_names.size();
  R.unit_names = um.unit_names;
  R.op_of_unit = um.op_of_unit;
  std::vector<std::int64_t> op_in;
  for (auto& o : ops.ops) {
    R.op_names.push_back(o.name);
    R.op_weight.push_back(o.pinned ? 0.0 : static_cast<double>(o.in * o.out));  // a pinned op is no share
    op_in.push_back(o.in);
    o.hx.init(rc.quant.history, dev);
    o.hw.init(rc.quant.history, dev);
    o.hdy.init(rc.quant.history, dev);
  }
  AdamW opt(params, decay, {rc.beta1, rc.beta2, rc.eps, rc.wd});

  // --- the arm: controller(s), recipe clip, promotion source ---------------
  const bool global = gnmr::presets::is_global(rc.arm.controller);
  const float clip = rc.arm.replaces_recipe_clip ? 0.0f : static_cast<float>(rc.recipe_clip);
  std::vector<std::vector<std::uint8_t>> table;
  if (rc.arm.table == Table::kRandom) table = random_table(in.episodes, n_ops, rc.steps, rc.seed, eligible);
  if (rc.arm.table == Table::kEnds) table = ends_table(R.op_names, mc.layers, rc.steps);
  if (rc.arm.table == Table::kLate) table = late_table(ends_share(R.op_names, mc.layers, eligible), eligible, rc.steps);
  const int n_low = static_cast<int>(std::count(eligible.begin(), eligible.end(), 1));
  if (rc.arm.table == Table::kFixed)
    table = fixed_table(fixed_list_count(in.hp_share, n_low), n_ops, rc.steps, eligible);
  if (rc.arm.table == Table::kAll) table = fixed_table(n_ops, n_ops, rc.steps);
  const bool on_cpu = dev.is_cpu();
  // The noise-floor trigger compares each weight gradient with the noise its
  // stochastic rounding added, which only the recipe's CPU layer measures.
  const bool wants_aux = make_controller(rc.arm.controller, 1, rc.arm.overrides)->needs_aux();  // once a run
  if (wants_aux) {
    if (qc.cfg.scaling != Scaling::kNvfp4Recipe || !qc.cfg.any() || !on_cpu)
      throw std::invalid_argument("arm " + rc.arm.name + " needs --format nvfp4-recipe on the CPU (its stochastic "
                                  "rounding gives the noise the trigger compares with)");
    qc.want_noise = true;
  }
  std::unique_ptr<gnmr::DynController> ctrl;
  std::unique_ptr<CudaBackend> gpu;
  if (on_cpu) {
    ctrl = make_controller(rc.arm.controller, global ? 1 : nu, rc.arm.overrides);
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
      refs.push_back({p.data_ptr<float>(), p.grad().data_ptr<float>(), opt.exp_avg(i).data_ptr<float>(),
                      opt.exp_avg_sq(i).data_ptr<float>(), static_cast<std::uint64_t>(p.numel()),
                      static_cast<bool>(decay[i]), um.unit_of_tensor[i]});
    }
    CudaArm a{rc.arm.controller, rc.arm.overrides, global, nu, clip, rc.arm.promote, rc.seed,
              std::vector<std::int32_t>(um.op_of_unit.begin(), um.op_of_unit.end()),
              static_cast<std::uint32_t>(n_ops), {}};
    for (const auto& row : table) a.table.insert(a.table.end(), row.begin(), row.end());
    gpu.reset(new CudaBackend(a, refs));
    R.controller_units = gpu->num_units();
    R.max_in_recovery_limit = gpu->max_in_recovery();
    qc.promoted_dev = torch::from_blob(gpu->promoted_mask(), {n_ops},
                                       torch::TensorOptions().dtype(torch::kBool).device(dev));
  }

  // --- stressors and their ground truth ------------------------------------
  const auto faults = fault_schedule(rc.steps, rc.fault_rate, rc.fault_kind, static_cast<int>(nu), rc.seed);
  const auto outliers = outlier_schedule(rc.outliers, rc.steps, op_in, rc.seed);
  for (const auto& e : outliers) R.truth.push_back({e.start, e.len, um.unit_of_op[static_cast<std::size_t>(e.op)]});
  for (int s = 1; s <= rc.steps; ++s) {
    const Fault& f = faults[static_cast<std::size_t>(s - 1)];
    if (f.unit >= 0 && !f.nonfinite) R.truth.push_back({s, 1, static_cast<std::uint32_t>(f.unit)});
  }
  std::vector<std::vector<torch::Tensor>> unit_grads(nu);

  std::mt19937_64 batch_rng(rc.seed);
  auto vs = val_set(data.val, rc.val_windows, mc.ctx);
  vs.first = vs.first.to(dev);
  vs.second = vs.second.to(dev);

  std::vector<float> partials(nu), aux(nu, 0.0f);
  const std::uint32_t aux_warmup = rc.arm.overrides.warmup ? *rc.arm.overrides.warmup : gnmr::NoiseFloorTrigger{}.warmup;
  std::vector<gnmr::Segment> segs(nt);
  std::vector<gnmr::UnitDecision> raw(nu), fin(nu);
  std::vector<std::int32_t> redirect(nu, -1);
  std::vector<std::uint8_t> mask(static_cast<std::size_t>(n_ops), 0);
  if (!table.empty()) mask = table[1];
  const auto unpin = [&](std::vector<std::uint8_t>& m) {  // a pinned operator is never "promoted"
    for (int o = 0; o < n_ops; ++o)
      if (!eligible[static_cast<std::size_t>(o)]) m[static_cast<std::size_t>(o)] = 0;
  };
  unpin(mask);

  for (int step = 1; step <= rc.steps; ++step) {
    const auto t0 = clk::now();
    StepRow row;
    row.step = step;
    row.lr = lr_at(rc.lr, rc.warmup, rc.steps, step);
    for (auto& o : ops.ops) {
      o.gain = outlier_gain(outliers, o.index, o.in, step, dev);
      if (o.gain.defined()) row.outlier_op = o.index;
    }
    qc.promoted = mask;  // CPU; on CUDA the device holds the same mask (promotion.hpp)
    qc.step = step;      // the stochastic rounding's draws (nvfp4-recipe)
    for (auto& o : ops.ops) o.noise = 0.0;
    R.masks.push_back(mask);
    auto batch = sample_batch(data.train, rc.batch, mc.ctx, batch_rng);
    model->zero_grad(/*set_to_none=*/false);
    auto loss = model->loss(batch.first.to(dev), batch.second.to(dev));
    row.train_loss = loss.item<double>();
    if (step == 1) R.initial_loss = row.train_loss;
    if (!std::isfinite(row.train_loss)) {  // the weights are already non-finite
      R.nonfinite_loss = true;
      R.rows.push_back(row);
      break;
    }
    loss.backward();

    const Fault& f = faults[static_cast<std::size_t>(step - 1)];
    if (f.unit >= 0) {
      auto& g = unit_grads[static_cast<std::size_t>(f.unit)];
      g.clear();
      for (std::size_t i = 0; i < nt; ++i)
        if (um.unit_of_tensor[i] == static_cast<std::uint32_t>(f.unit)) g.push_back(params[i].grad());
      inject(g, f, rc.fault_factor);
      row.fault_unit = f.unit;
      row.fault = f.nonfinite ? (f.inf ? "inf" : "nan") : "scale";
    }

    // --- the arm's rule, the recipe's clip, the optimizer ------------------
    const gnmr::StepSummary* sum = nullptr;
    const std::vector<gnmr::UnitReport>* reps = nullptr;
    if (on_cpu) {
      const auto c0 = clk::now();
      for (std::size_t i = 0; i < nt; ++i) {
        const auto& g = params[i].grad();
        segs[i] = gnmr::Segment{g.data_ptr<float>(), static_cast<std::uint64_t>(g.numel()), gnmr::DType::kF32,
                                um.unit_of_tensor[i]};
      }
      gnmr::host_unit_partials(segs.data(), nt, partials.data(), nu);
      const float total = global_partial(partials.data(), static_cast<std::uint32_t>(nu));
      if (wants_aux) {
        for (std::size_t u = 0; u < nu; ++u) {
          const int op = um.op_of_unit[u];
          aux[u] = op >= 0 ? static_cast<float>(ops.ops[static_cast<std::size_t>(op)].noise) : 0.0f;
          const float r = std::sqrt(partials[u]) / std::sqrt(aux[u]);
          if (aux[u] > 0.0f && static_cast<std::uint32_t>(step) > aux_warmup && std::isfinite(r)) R.snr.push_back(r);
        }
        sum = &ctrl->step_with_aux(partials.data(), aux.data(), nu);
      } else {
        sum = global ? &ctrl->step(&total, 1) : &ctrl->step(partials.data(), nu);
      }
      row.control_ms = ms(clk::now() - c0);
      expand_decisions(ctrl->decisions().data(), global, static_cast<std::uint32_t>(nu), raw.data());
      row.clip_factor = recipe_clip(raw.data(), partials.data(), static_cast<std::uint32_t>(nu), clip, fin.data(),
                                    &row.total_norm);
      reps = &ctrl->reports();
      opt.step(fin, um.unit_of_tensor, sum->skip_step != 0, row.lr);
    } else {
      gnmr::AdamWParams h;
      h.lr = static_cast<float>(row.lr);
      h.beta1 = static_cast<float>(rc.beta1);
      h.beta2 = static_cast<float>(rc.beta2);
      h.eps = static_cast<float>(rc.eps);
      h.weight_decay = static_cast<float>(rc.wd);
      sum = &gpu->step(h, step, &row.control_ms, &row.clip_factor, &row.total_norm, rc.keep_unit_trace);
      fin = gpu->decisions();
      raw = fin;  // flags are the controller's; only scales differ
      reps = &gpu->reports();
    }
    // The next step's promoted operators. On CUDA the device has computed
    // the same mask with the same function; this is the host's record of it.
    next_promoted(rc.arm.promote, raw.data(), um.op_of_unit.data(), static_cast<std::uint32_t>(nu),
                  static_cast<std::uint32_t>(n_ops), step, rc.seed, redirect.data(),
                  table.empty() ? nullptr : table[static_cast<std::size_t>(std::min(step + 1, rc.steps))].data(),
                  mask.data());
    unpin(mask);
    if (sum->in_recovery > R.max_in_recovery_limit)
      throw std::logic_error("gnmr-demo: " + R.label + " has " + std::to_string(sum->in_recovery) +
                             " units in recovery, above its maxO of " + std::to_string(R.max_in_recovery_limit));

    // --- the step's record ---------------------------------------------------
    row.triggered = sum->triggered;
    row.granted = sum->granted;
    row.in_recovery = sum->in_recovery;
    row.denied = sum->denied;
    row.nonfinite = sum->nonfinite;
    row.skip_step = sum->skip_step;
    for (const auto& d : fin) {
      row.skipped_units += (sum->skip_step || (d.flags & gnmr::kSkip)) ? 1u : 0u;
      row.reset_units += (d.flags & gnmr::kResetMoments) ? 1u : 0u;
    }
    for (auto m : R.masks.back()) row.hp_ops += m;
    if (!global) {
      for (std::uint32_t u = 0; u < nu; ++u) {
        if (!(raw[u].flags & gnmr::kGranted)) continue;
        const bool moved = rc.arm.promote == PromoteFrom::kRedirect && um.op_of_unit[u] >= 0 && redirect[u] >= 0;
        R.acts.push_back({step, moved ? um.unit_of_op[static_cast<std::size_t>(redirect[u])] : u});
      }
    }
    if (rc.arm.table == Table::kRandom)  // an episode starting at step+1 was "decided" at step
      for (int o = 0; o < n_ops && step < rc.steps; ++o)
        if (table[static_cast<std::size_t>(step + 1)][static_cast<std::size_t>(o)] &&
            !table[static_cast<std::size_t>(step)][static_cast<std::size_t>(o)])
          R.acts.push_back({step, um.unit_of_op[static_cast<std::size_t>(o)]});
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
      std::vector<AmaxHistory> keep;  // an evaluation must not feed the histories
      for (auto& o : ops.ops) keep.insert(keep.end(), {o.hx, o.hw, o.hdy});
      for (auto& k : keep) k.h = k.h.clone();
      qc.enabled = rc.eval_train_format;
      for (auto& o : ops.ops) o.gain = torch::Tensor();
      row.val_loss = eval_loss(model, vs, 32);
      qc.enabled = true;
      for (std::size_t i = 0; i < ops.ops.size(); ++i) {
        ops.ops[i].hx = keep[3 * i];
        ops.ops[i].hw = keep[3 * i + 1];
        ops.ops[i].hdy = keep[3 * i + 2];
      }
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
