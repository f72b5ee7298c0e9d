// demo/cuda_backend.cu — the GPU step of gnmr-demo (see cuda_backend.hpp):
// NormPlan -> DynDeviceController -> fused guarded AdamW, on the default
// stream, over libtorch's own device buffers. One AdamW plan covers both of
// PyTorch's usual parameter groups: matrices with weight decay, biases and
// LayerNorm gains without (AdamWTensor::weight_decay), in one launch.
#include "cuda_backend.hpp"

#include <cuda_runtime.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gnmr/cuda/adamw.cuh"
#include "gnmr/cuda/common.cuh"
#include "gnmr/cuda/norms.cuh"
#include "gnmr/cuda/presets.cuh"

namespace demo {

struct CudaBackend::Impl {
  std::unique_ptr<gnmr::cuda::DynDeviceController> ctl;
  std::unique_ptr<gnmr::cuda::NormPlan> norms;
  std::unique_ptr<gnmr::cuda::AdamWPlan> adamw;
  gnmr::cuda::DeviceBuffer partials;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  gnmr::StepSummary summary{};
  std::vector<gnmr::UnitDecision> dec;  // host copies, sized once
  std::vector<gnmr::UnitReport> rep;

  ~Impl() {
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
  }
};

bool CudaBackend::built() { return true; }

CudaBackend::CudaBackend(const std::string& preset, const gnmr::presets::Options& options, bool global,
                         const std::vector<CudaTensorRef>& tensors)
    : impl_(new Impl) {
  using gnmr::cuda::check;
  Impl& I = *impl_;
  const std::size_t units = global ? 1 : tensors.size();
  I.ctl = gnmr::cuda::make_device(preset, units, options);
  I.dec.resize(units);
  std::vector<gnmr::Segment> segs;
  std::vector<gnmr::AdamWTensor> ts;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const CudaTensorRef& t = tensors[i];
    const std::uint32_t unit = global ? 0u : static_cast<std::uint32_t>(i);
    segs.push_back({t.grad, t.numel, gnmr::DType::kF32, unit});
    ts.push_back({t.param, t.grad, t.exp_avg, t.exp_avg_sq, t.numel, gnmr::DType::kF32, unit, t.decay});
  }
  I.norms.reset(new gnmr::cuda::NormPlan(segs, units));
  I.adamw.reset(new gnmr::cuda::AdamWPlan(ts, units));
  I.partials = gnmr::cuda::DeviceBuffer(units * sizeof(float));
  check(cudaEventCreate(&I.e0), "gnmr-demo: cudaEventCreate");
  check(cudaEventCreate(&I.e1), "gnmr-demo: cudaEventCreate");
}

CudaBackend::~CudaBackend() = default;

std::size_t CudaBackend::num_units() const { return impl_->ctl->num_units(); }
std::uint32_t CudaBackend::max_in_recovery() const { return impl_->ctl->max_in_recovery(); }

const gnmr::StepSummary& CudaBackend::step(const gnmr::AdamWParams& h, double* control_ms, bool with_reports) {
  using gnmr::cuda::check;
  Impl& I = *impl_;
  float* partials = static_cast<float*>(I.partials.get());
  check(cudaEventRecord(I.e0, 0), "gnmr-demo: event");
  check(gnmr::cuda::unit_partials<gnmr::L2Norm>(*I.norms, partials, 0), "gnmr-demo: unit_partials");
  check(I.ctl->step(partials, 0), "gnmr-demo: controller step");
  check(cudaEventRecord(I.e1, 0), "gnmr-demo: event");
  // The summary carries a suggested global skip (skip-step, the ladder's top rung).
  check(gnmr::cuda::adamw_step(*I.adamw, h, I.ctl->decisions(), 0, nullptr, I.ctl->summary()),
        "gnmr-demo: AdamW");
  // Plain cudaMemcpy: ordered after the work above on the legacy stream, and
  // synchronous — the demo's CSV needs it, the library does not.
  const auto back = [](void* h, const void* d, std::size_t bytes) {
    check(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost), "gnmr-demo: copy back");
  };
  back(&I.summary, I.ctl->summary(), sizeof I.summary);
  back(I.dec.data(), I.ctl->decisions(), I.dec.size() * sizeof(gnmr::UnitDecision));
  if (with_reports) {
    I.rep.resize(I.dec.size());
    back(I.rep.data(), I.ctl->reports(), I.rep.size() * sizeof(gnmr::UnitReport));
  }
  float ms = 0.0f;
  check(cudaEventElapsedTime(&ms, I.e0, I.e1), "gnmr-demo: event time");
  if (control_ms) *control_ms = ms;
  return I.summary;
}

const std::vector<gnmr::UnitDecision>& CudaBackend::decisions() const { return impl_->dec; }
const std::vector<gnmr::UnitReport>& CudaBackend::reports() const { return impl_->rep; }

}  // namespace demo
