// python/gnmr/csrc/cores.hpp — what gnmr.Controller and gnmr.optim.AdamW
// hold: one controller over torch tensors, on the CPU (HostCore) or on a
// CUDA device (CudaCore), and one guarded AdamW per parameter group
// (HostAdamW, CudaAdamW).
//
// The library is the single implementation: HostCore is
// gnmr::presets::make + host_unit_partials + EventLog/TraceWriter, CudaCore
// is the glue of device.hpp (NormPlan + make_device + TelemetryDrain), the
// AdamWs are gnmr::HostAdamW (the same update as the CUDA kernel, bit for
// bit) and gnmr::cuda::adamw_step. The cores add only what
// torch needs: reading .grad in place, re-planning when a gradient buffer
// moved, and applying host decisions to the gradients.
//
// Determinism: decisions are the library's (same norms, same decisions on
// host and device); the host norms are host_unit_partials over the tensors
// in unit order, the device ones NormPlan's fixed-order reduction.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device.hpp"
#include "gnmr/core/types.hpp"
#include "gnmr/host/adamw.hpp"
#include "gnmr/host/dyn_controller.hpp"
#include "gnmr/plan/adamw_plan.hpp"
#include "gnmr/presets/table.hpp"
#include "logs.hpp"
#include "tables.hpp"

namespace gnmr_py {

using AdamWStates = std::vector<gnmr::AdamWUnitState>;

// Refuses a blob whose step count is behind an open trace (its rows must
// keep increasing): checked before the controller is touched.
void check_trace_order(bool tracing, std::int64_t last_trace_step, const std::string& blob);

class HostCore {
 public:
  HostCore(const std::string& preset, const gnmr::presets::Options& options, GradTable grads,
           std::vector<std::string> names);

  // Norms from .grad, one controller step, the event log and trace rows,
  // and (apply) the decisions applied to the gradients. Throws before
  // anything changes when a gradient is unusable.
  // aux: each unit's aux partials (float32, num_units; the noise-floor
  // trigger's quantization noise as a sum of squares), or null.
  const gnmr::StepSummary& step(bool apply, const float* aux = nullptr);

  // step()'s two halves, which the sharded path (gnmr/sharded.py) calls
  // around its cross-rank reduction: local_partials() writes the per-unit
  // sums of squares of `grads` (the local shards, one per tensor, undefined =
  // none or not counted here; null: each parameter's .grad) into out
  // (float32, num_units); step_reduced() runs one controller step on
  // (reduced) sums and writes the logs. The sharded caller applies the
  // decisions itself (the gradients are DTensors).
  void local_partials(const std::vector<at::Tensor>* grads, float* out);
  const gnmr::StepSummary& step_reduced(const float* partials, const float* aux = nullptr);
  bool needs_aux() const { return ctl_->needs_aux(); }

  std::size_t num_units() const { return ctl_->num_units(); }
  std::string name() const { return ctl_->name(); }
  std::uint32_t max_in_recovery() const { return ctl_->max_in_recovery(); }
  std::int64_t steps_done() const { return ctl_->steps_done(); }
  const gnmr::StepSummary& summary() const { return ctl_->summary(); }
  const std::vector<gnmr::UnitDecision>& decisions() const { return ctl_->decisions(); }
  const std::vector<gnmr::UnitReport>& reports() const { return ctl_->reports(); }
  std::vector<std::uint8_t> save() const { return ctl_->save(); }
  void load(const std::string& blob);
  void reset() { ctl_->reset(); }
  Logs& logs() { return logs_; }

 private:
  std::unique_ptr<gnmr::DynController> ctl_;
  GradTable grads_;
  std::vector<float> partials_;
  Logs logs_;
};

class CudaCore {
 public:
  CudaCore(const std::string& preset, const gnmr::presets::Options& options, GradTable grads,
           const std::vector<std::string>& names, int device);

  bool capturing(std::uintptr_t stream) const;
  // Gathers the gradients and re-plans the norms if a buffer moved (setup
  // work: allocates and synchronises; refused under graph capture).
  void prepare(std::uintptr_t stream);
  // prepare() + one enqueued step; returns the readback slot (-1 while
  // capturing). apply: waits for this step's decisions (a sync with the
  // stream) and applies them to the gradients; refused under capture.
  int step(std::uintptr_t stream, bool apply, const float* aux = nullptr);
  // The sharded path's halves (HostCore's), enqueued on `stream`: the local
  // partials into the device float array out, then a step on the reduced
  // device array (the readback slot, as step()).
  void local_partials(const std::vector<at::Tensor>& grads, float* out, std::uintptr_t stream);
  int step_reduced(const float* partials, std::uintptr_t stream, const float* aux = nullptr);
  std::uint64_t replans() const { return replans_; }
  DeviceController& device() { return dev_; }
  const DeviceController& device() const { return dev_; }
  // The latest step's decisions on the host: its readback slot (waited
  // for), or a blocking copy after a captured step.
  std::vector<gnmr::UnitDecision> decisions();
  void load(const std::string& blob);

 private:
  void gather(std::uintptr_t stream, const std::vector<at::Tensor>* grads);
  DeviceController dev_;
  GradTable grads_;
  std::uint64_t replans_ = 0;
  int last_slot_ = -1;
};

class HostAdamW {
 public:
  HostAdamW(AdamWTable table, std::size_t num_units);
  // Gathers and checks; rebuilds the layout if it moved. grads: the local
  // shards' gradients (sharded path), else each parameter's .grad.
  void prepare(const std::vector<at::Tensor>* grads = nullptr);
  void step(const HostCore& ctl, const gnmr::AdamWParams& h);
  const AdamWStates& states() const { return opt_.unit_states(); }
  void set_states(const AdamWStates& s) { opt_.set_unit_states(s); }

 private:
  AdamWTable table_;
  gnmr::HostAdamW opt_;
};

class CudaAdamW {
 public:
  CudaAdamW(AdamWTable table, std::size_t num_units, int device);
  // Re-plans if a buffer moved (not under capture); grads as HostAdamW's.
  void prepare(std::uintptr_t stream, const std::vector<at::Tensor>* grads = nullptr);
  void step(const CudaCore& ctl, const gnmr::AdamWParams& h, const float* d_lr, std::uintptr_t stream);
  AdamWStates states() const;
  void set_states(const AdamWStates& s);

 private:
  AdamWTable table_;
  std::size_t num_units_;
  int device_;
  std::unique_ptr<DeviceAdamW> plan_;  // null while no tensor has a gradient
  AdamWStates pending_;                // the unit states while there is no plan
};

}  // namespace gnmr_py
