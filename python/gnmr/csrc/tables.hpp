// python/gnmr/csrc/tables.hpp — torch tensors as gnmr's raw segments.
//
// GradTable turns the controller's parameters into the gnmr::Segment list
// of their .grad storage (zero-copy: the pointers are torch's own), checks
// every gradient before anything changes, says whether the layout moved
// since the plan was built, and applies host decisions to the gradients.
// AdamWTable does the same for one parameter group of gnmr.optim.AdamW:
// param, grad and both moments as gnmr::AdamWTensor.
//
// Both re-read .grad every step: autograd may allocate a new gradient (after
// grad = None, or a set_to_none zero_grad), and the CUDA plans bake the
// addresses in, so a moved buffer must be noticed, not trusted.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gnmr/core/types.hpp"
#include "gnmr/host/unit_norms.hpp"
#include "gnmr/plan/adamw_plan.hpp"

namespace gnmr_py {

class GradTable {
 public:
  // params[i] belongs to unit units[i]; labels[i] names it in messages.
  GradTable(std::vector<at::Tensor> params, std::vector<std::uint32_t> units,
            std::vector<std::string> labels, std::size_t num_units);

  std::size_t size() const { return params_.size(); }
  std::size_t num_units() const { return num_units_; }

  // Reads every .grad and rebuilds segments(): one segment per gradient
  // (fp32, bf16 or fp16, dense), and for a unit none of whose tensors has a
  // gradient, one element at `zero` (its norm is then 0, "not a sample").
  // Throws std::invalid_argument naming the tensor, before anything is
  // changed. Returns true when the layout differs from the last commit().
  // grads: read these (one per tensor, undefined = no gradient) instead of
  // each parameter's .grad: the sharded path's local shards of DTensor
  // gradients, which have no storage of their own on the parameter.
  bool gather(const void* zero, const std::vector<at::Tensor>* grads = nullptr);
  void commit() { planned_ = segs_; }
  const std::vector<gnmr::Segment>& segments() const { return segs_; }

  // Skip as a select: a skipped unit's tensors (every tensor when
  // global_skip) get grad = None, so a torch optimizer leaves them alone;
  // a unit with scale != 1 has its gradients scaled in place.
  void apply(const gnmr::UnitDecision* decisions, bool global_skip);

 private:
  std::vector<at::Tensor> params_;
  std::vector<std::uint32_t> units_;
  std::vector<std::string> labels_;
  std::size_t num_units_;
  std::vector<gnmr::Segment> segs_;
  std::vector<gnmr::Segment> planned_;
  std::vector<std::uint8_t> covered_;
};

class AdamWTable {
 public:
  AdamWTable(std::vector<at::Tensor> params, std::vector<std::uint32_t> units,
             std::vector<at::Tensor> exp_avg, std::vector<at::Tensor> exp_avg_sq,
             std::vector<std::string> labels);

  // The tensors that have a gradient this step (torch's rule: a parameter
  // without one is not updated). Throws std::invalid_argument naming the
  // tensor before anything is changed; true when the layout moved.
  // grads: as GradTable::gather's (the params are then the local shards).
  bool gather(const std::vector<at::Tensor>* grads = nullptr);
  void commit() { planned_ = tensors_; }
  const std::vector<gnmr::AdamWTensor>& tensors() const { return tensors_; }

 private:
  std::vector<at::Tensor> params_, exp_avg_, exp_avg_sq_;
  std::vector<std::uint32_t> units_;
  std::vector<std::string> labels_;
  std::vector<gnmr::AdamWTensor> tensors_;
  std::vector<gnmr::AdamWTensor> planned_;
};

}  // namespace gnmr_py
