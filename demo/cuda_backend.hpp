// demo/cuda_backend.hpp — gnmr-demo's GPU step: gnmr's CUDA backend on the
// model's own CUDA tensors.
//
// On --device cuda one step is, on the default stream libtorch uses:
// per-unit partial norms (gnmr::cuda::NormPlan; an operator's weight and
// bias are two segments of one unit), the arm's controller on the device
// (gnmr::cuda::make_device, or the device twin of the benchmark's own
// controllers, arms.hpp), the recipe's global clip (recipe.hpp, one-thread
// kernel), the fused guarded AdamW (gnmr::cuda::adamw_step) over the
// parameters, gradients and moments libtorch allocated, and the promotion
// mask of the next step (promotion.hpp, one-thread kernel) into a device
// byte array that the quantized layers read through torch::where. The
// promotion path therefore never waits for the host. This header has no
// CUDA and no torch include: only raw device pointers cross
// (cuda_backend.cu; cuda_backend_none.cpp when built without nvcc).
//
// The demo copies the step's summary and decisions back every step because
// its CSV and its "never above maxO" check want them (libtorch's
// loss.item() synchronises each step anyway); the library needs neither.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gnmr/core/types.hpp"
#include "gnmr/plan/adamw_plan.hpp"  // gnmr::AdamWParams (plain C++)
#include "gnmr/presets/table.hpp"
#include "promotion.hpp"

namespace demo {

struct CudaTensorRef {  // device pointers, fp32, contiguous, fixed addresses
  float* param;
  const float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  std::uint64_t numel;
  bool decay;          // weight decay applies (matrices), or not (biases, LayerNorm)
  std::uint32_t unit;  // its gnmr unit (operator: weight and bias share one)
};

struct CudaArm {
  std::string controller;  // a preset name (arms.hpp: library or bench)
  gnmr::presets::Options options;
  bool global = false;     // one unit: the sum of every partial
  std::size_t units = 0;   // per-unit controllers
  float recipe_clip = 0.0f;
  PromoteFrom promote = PromoteFrom::kNone;
  std::uint64_t seed = 0;
  std::vector<std::int32_t> op_of_unit;  // [units]
  std::uint32_t ops = 0;
  std::vector<std::uint8_t> table;       // kTable: [steps + 1][ops], row t = step t
};

class CudaBackend {
 public:
  // True when this binary has the CUDA step (built with nvcc).
  static bool built();

  CudaBackend(const CudaArm& arm, const std::vector<CudaTensorRef>& tensors);
  ~CudaBackend();
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::size_t num_units() const;  // the controller's (1 for a global preset)
  std::uint32_t max_in_recovery() const;
  // Device bytes [ops]: 1 = the operator runs in high precision this step.
  std::uint8_t* promoted_mask();

  // One guarded optimizer step (step t), then the mask for step t+1. The
  // summary and the model-unit decisions (after the recipe's clip) are
  // copied back (reports too, with_reports). *control_ms: norms +
  // controller kernels (CUDA events); *clip_factor, *total: the recipe's.
  const gnmr::StepSummary& step(const gnmr::AdamWParams& h, std::int64_t t, double* control_ms,
                                float* clip_factor, float* total, bool with_reports);

  const std::vector<gnmr::UnitDecision>& decisions() const;  // per model unit
  const std::vector<gnmr::UnitReport>& reports() const;      // per controller unit

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace demo
