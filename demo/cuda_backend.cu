// demo/cuda_backend.cu — the GPU step of gnmr-demo (see cuda_backend.hpp):
// NormPlan -> the arm's device controller -> recipe clip -> fused guarded
// AdamW -> next step's promotion mask, on the default stream, over
// libtorch's own device buffers. One AdamW plan covers both of PyTorch's
// usual parameter groups: matrices with weight decay, biases and LayerNorm
// gains without (AdamWTensor::weight_decay), in one launch.
//
// The two small kernels run the host trainer's own functions (recipe.hpp,
// promotion.hpp) in one thread: a few dozen units, fixed order, the same
// arithmetic as the CPU run; nothing of them reaches the host.
#include "cuda_backend.hpp"

#include <cuda_runtime.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gnmr/cuda/adamw.cuh"
#include "gnmr/cuda/error.cuh"
#include "gnmr/cuda/memory.cuh"
#include "gnmr/cuda/presets.cuh"
#include "gnmr/cuda/unit_norms.cuh"

#include "arms.hpp"
#include "recipe.hpp"

namespace demo {

namespace {

// Model-unit partials -> the global controller's one partial.
__global__ void global_partial_kernel(const float* partials, std::uint32_t n, float* out) {
  if (threadIdx.x == 0 && blockIdx.x == 0) *out = global_partial(partials, n);
}

struct ClipOut {
  float factor, total;
};

// Controller decisions -> model-unit decisions with the recipe's clip, and
// the next step's promoted operators.
__global__ void finish_kernel(const gnmr::UnitDecision* ctl, bool global, const float* partials, std::uint32_t n,
                              float clip, gnmr::UnitDecision* raw, gnmr::UnitDecision* fin, ClipOut* co,
                              PromoteFrom kind, const std::int32_t* op_of_unit, std::uint32_t n_ops,
                              std::int64_t step, std::uint64_t seed, std::int32_t* redirect,
                              const std::uint8_t* table_row, std::uint8_t* mask) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  expand_decisions(ctl, global, n, raw);
  co->factor = recipe_clip(raw, partials, n, clip, fin, &co->total);
  next_promoted(kind, raw, op_of_unit, n, n_ops, step, seed, redirect, table_row, mask);
}

}  // namespace

struct CudaBackend::Impl {
  CudaArm arm;
  std::unique_ptr<gnmr::cuda::DynDeviceController> ctl;
  std::unique_ptr<gnmr::cuda::NormPlan> norms;
  std::unique_ptr<gnmr::cuda::AdamWPlan> adamw;
  gnmr::cuda::DeviceBuffer partials, global, raw, fin, clip_out, op_of_unit, redirect, table, mask;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  gnmr::StepSummary summary{};
  ClipOut co{};
  std::vector<gnmr::UnitDecision> dec;  // host copies, sized once
  std::vector<gnmr::UnitReport> rep;

  ~Impl() {
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
  }
};

bool CudaBackend::built() { return true; }

CudaBackend::CudaBackend(const CudaArm& arm, const std::vector<CudaTensorRef>& tensors) : impl_(new Impl) {
  using gnmr::cuda::check;
  using gnmr::cuda::DeviceBuffer;
  Impl& I = *impl_;
  I.arm = arm;
  const std::size_t n = arm.units;
  I.ctl = gnmr::cuda::make_device(arm.controller, arm.global ? 1 : n, arm.options);
  I.dec.resize(n);
  std::vector<gnmr::Segment> segs;
  std::vector<gnmr::AdamWTensor> ts;
  for (const CudaTensorRef& t : tensors) {
    segs.push_back({t.grad, t.numel, gnmr::DType::kF32, t.unit});
    ts.push_back({t.param, t.grad, t.exp_avg, t.exp_avg_sq, t.numel, gnmr::DType::kF32, t.unit, t.decay});
  }
  I.norms.reset(new gnmr::cuda::NormPlan(segs, n));
  I.adamw.reset(new gnmr::cuda::AdamWPlan(ts, n));
  I.partials = DeviceBuffer(n * sizeof(float));
  I.global = DeviceBuffer(sizeof(float));
  I.raw = DeviceBuffer(n * sizeof(gnmr::UnitDecision));
  I.fin = DeviceBuffer(n * sizeof(gnmr::UnitDecision));
  I.clip_out = DeviceBuffer(sizeof(ClipOut));
  I.op_of_unit = DeviceBuffer(n * sizeof(std::int32_t));
  I.redirect = DeviceBuffer(n * sizeof(std::int32_t));
  I.mask = DeviceBuffer(arm.ops > 0 ? arm.ops : 1);
  I.table = DeviceBuffer(arm.table.empty() ? 1 : arm.table.size());
  const std::vector<std::int32_t> minus1(n, -1);
  const auto up = [](DeviceBuffer& d, const void* h, std::size_t bytes) {
    if (bytes) check(cudaMemcpy(d.get(), h, bytes, cudaMemcpyHostToDevice), "gnmr-demo: upload");
  };
  up(I.op_of_unit, arm.op_of_unit.data(), n * sizeof(std::int32_t));
  up(I.redirect, minus1.data(), n * sizeof(std::int32_t));
  up(I.table, arm.table.data(), arm.table.size());
  // Step 1's mask: the table's row 1, or nothing promoted.
  check(cudaMemset(I.mask.get(), 0, arm.ops), "gnmr-demo: mask");
  if (!arm.table.empty())
    check(cudaMemcpy(I.mask.get(), arm.table.data() + arm.ops, arm.ops, cudaMemcpyHostToDevice), "gnmr-demo: mask");
  check(cudaEventCreate(&I.e0), "gnmr-demo: cudaEventCreate");
  check(cudaEventCreate(&I.e1), "gnmr-demo: cudaEventCreate");
}

CudaBackend::~CudaBackend() = default;

std::size_t CudaBackend::num_units() const { return impl_->ctl->num_units(); }
std::uint32_t CudaBackend::max_in_recovery() const { return impl_->ctl->max_in_recovery(); }
std::uint8_t* CudaBackend::promoted_mask() { return static_cast<std::uint8_t*>(impl_->mask.get()); }

const gnmr::StepSummary& CudaBackend::step(const gnmr::AdamWParams& h, std::int64_t t, double* control_ms,
                                           float* clip_factor, float* total, bool with_reports) {
  using gnmr::cuda::check;
  Impl& I = *impl_;
  const CudaArm& a = I.arm;
  const auto n = static_cast<std::uint32_t>(a.units);
  float* partials = static_cast<float*>(I.partials.get());
  auto* raw = static_cast<gnmr::UnitDecision*>(I.raw.get());
  auto* fin = static_cast<gnmr::UnitDecision*>(I.fin.get());
  check(cudaEventRecord(I.e0, 0), "gnmr-demo: event");
  check(gnmr::cuda::unit_partials<gnmr::L2Norm>(*I.norms, partials, 0), "gnmr-demo: unit_partials");
  if (a.global) {
    global_partial_kernel<<<1, 1>>>(partials, n, static_cast<float*>(I.global.get()));
    check(cudaGetLastError(), "gnmr-demo: global partial");
  }
  check(I.ctl->step(a.global ? static_cast<const float*>(I.global.get()) : partials, 0), "gnmr-demo: controller step");
  check(cudaEventRecord(I.e1, 0), "gnmr-demo: event");
  // The next step's table row (the last row again after the last step).
  const std::size_t row = static_cast<std::size_t>(t + 1 < static_cast<std::int64_t>(a.table.size() / (a.ops ? a.ops : 1))
                                                       ? t + 1 : t) * a.ops;
  finish_kernel<<<1, 1>>>(I.ctl->decisions(), a.global, partials, n, a.recipe_clip, raw, fin,
                          static_cast<ClipOut*>(I.clip_out.get()), a.promote,
                          static_cast<const std::int32_t*>(I.op_of_unit.get()), a.ops, t, a.seed,
                          static_cast<std::int32_t*>(I.redirect.get()),
                          a.table.empty() ? nullptr : static_cast<const std::uint8_t*>(I.table.get()) + row,
                          static_cast<std::uint8_t*>(I.mask.get()));
  check(cudaGetLastError(), "gnmr-demo: finish");
  // The summary carries a suggested global skip (skip-step, the ladder's top rung).
  check(gnmr::cuda::adamw_step(*I.adamw, h, fin, 0, nullptr, I.ctl->summary()), "gnmr-demo: AdamW");
  // Plain cudaMemcpy: ordered after the work above on the legacy stream, and
  // synchronous — the demo's CSV needs it, the library does not.
  const auto back = [](void* hst, const void* d, std::size_t bytes) {
    check(cudaMemcpy(hst, d, bytes, cudaMemcpyDeviceToHost), "gnmr-demo: copy back");
  };
  back(&I.summary, I.ctl->summary(), sizeof I.summary);
  back(I.dec.data(), fin, I.dec.size() * sizeof(gnmr::UnitDecision));
  back(&I.co, I.clip_out.get(), sizeof I.co);
  if (with_reports) {
    I.rep.resize(I.ctl->num_units());
    back(I.rep.data(), I.ctl->reports(), I.rep.size() * sizeof(gnmr::UnitReport));
  }
  float ms = 0.0f;
  check(cudaEventElapsedTime(&ms, I.e0, I.e1), "gnmr-demo: event time");
  if (control_ms) *control_ms = ms;
  if (clip_factor) *clip_factor = I.co.factor;
  if (total) *total = I.co.total;
  return I.summary;
}

const std::vector<gnmr::UnitDecision>& CudaBackend::decisions() const { return impl_->dec; }
const std::vector<gnmr::UnitReport>& CudaBackend::reports() const { return impl_->rep; }

}  // namespace demo
