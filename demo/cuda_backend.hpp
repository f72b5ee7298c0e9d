// demo/cuda_backend.hpp — gnmr-demo's GPU step: gnmr's CUDA backend on the
// model's own CUDA tensors.
//
// On --device cuda the demo does what the library is for: per-unit partial
// norms (gnmr::cuda::NormPlan), the controller step on the device
// (gnmr::cuda::make_device, same preset table as the CPU run) and the fused
// guarded AdamW (gnmr::cuda::adamw_step) over the parameters, gradients and
// moments that libtorch allocated — three launches on the default stream,
// the one libtorch uses. This header has no CUDA and no torch include: the
// .cu side is compiled by nvcc, the torch side by the host compiler, and
// only raw device pointers cross (cuda_backend.cu; cuda_backend_none.cpp
// when the demo is built without nvcc).
//
// The library needs no host synchronisation; the demo reads the step's
// summary back every step because its CSV and its "never above maxO" check
// want it (libtorch's loss.item() synchronises each step anyway).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gnmr/detail/adamw.hpp"  // gnmr::AdamWParams (plain C++)
#include "gnmr/preset_select.hpp"
#include "gnmr/types.hpp"

namespace demo {

struct CudaTensorRef {  // device pointers, fp32, contiguous, fixed addresses
  float* param;
  const float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  std::uint64_t numel;
  bool decay;  // weight decay applies (matrices), or not (biases, LayerNorm)
};

class CudaBackend {
 public:
  // True when this binary has the CUDA step (built with nvcc).
  static bool built();

  // preset/options as for gnmr::presets::make; global presets get one unit
  // that every tensor maps to, the others one unit per tensor.
  CudaBackend(const std::string& preset, const gnmr::presets::Options& options, bool global,
              const std::vector<CudaTensorRef>& tensors);
  ~CudaBackend();
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::size_t num_units() const;
  std::uint32_t max_in_recovery() const;

  // One guarded optimizer step: partials, controller, fused AdamW. Then the
  // summary and the decisions (and the reports, with_reports) are copied
  // back into buffers reused every step (see above). *control_ms gets the
  // time of the norms + controller kernels (CUDA events), the CPU run's
  // definition.
  const gnmr::StepSummary& step(const gnmr::AdamWParams& h, double* control_ms, bool with_reports);

  // The last step's host copies (reports: empty unless asked for).
  const std::vector<gnmr::UnitDecision>& decisions() const;
  const std::vector<gnmr::UnitReport>& reports() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace demo
