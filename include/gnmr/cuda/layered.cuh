// gnmr/cuda/layered.cuh — LayeredDeviceController: an outer rule (global or
// per unit) and GNMR's budgeted trigger in one device step; the CUDA twin of
// gnmr::LayeredController (gnmr/host/layered.hpp).
//
//   auto ctl = gnmr::cuda::make_device("stabilizer+gnmr", units);  // by name
//   ctl->step(d_partials, stream);     // L2 partials, one per unit, on the device
//   adamw_step(..., ctl->decisions(), stream, nullptr, ctl->summary());
//
// A step enqueues, on the caller's stream: the inner controller's step; for
// a global outer, two kernels that sum the squares of the inner's finite
// norms in detail::total_sq_tree's order (the host's tree: every 256-unit
// leaf block in parallel, then the upper levels in one block) into the
// global norm, then the outer's step on it; for a
// per-unit outer, its step on the same input; one combine kernel that writes the layered decisions,
// reports and summary with gnmr/step/layered.hpp's functors. No allocation
// (every buffer is made at construction), no host synchronisation, no
// device-to-host copy: the sequence can be captured in a CUDA graph.
//
// Determinism: the same functors and the same fixed-order sum as the host
// LayeredController, over controllers that are bit-identical to their host
// twins: the same partials give the same decisions on host and device.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gnmr/core/math.hpp"
#include "gnmr/core/types.hpp"
#include "gnmr/cuda/block.cuh"
#include "gnmr/cuda/dyn_controller.cuh"
#include "gnmr/cuda/error.cuh"
#include "gnmr/cuda/grid.cuh"
#include "gnmr/cuda/memory.cuh"
#include "gnmr/host/layered.hpp"
#include "gnmr/step/layered.hpp"
#include "gnmr/step/systemic.hpp"

namespace gnmr {
namespace cuda {
namespace detail {

// The global outer rule's norm (layer_global_norm) from the inner's
// reports: detail::total_sq_tree over their norms, in one launch. Each of
// the ceil(n / 256) blocks sums the squares of its 256 norms (0 past n) by
// tree_256 into blocks[b]; the block that finishes last (last_block_done,
// the backend's integer handoff) folds the leaf sums by the upper levels of
// the same tree and writes *out. Why not one block for everything: walking
// all 3,907 leaf blocks of 10^6 units one after another took 3.6 ms per
// step on an H200; why one launch and not two (as before issue 32): a
// launch is a fixed cost on every step, the fold a few short passes. The trees are the host's, so the bits are
// too. (Templates, like every kernel in these headers: a header's kernel
// must not be defined once per translation unit.)
template <class Report = UnitReport>
__global__ void __launch_bounds__(kTreeThreads) layered_global_norm(const Report* rep, std::uint32_t n,
                                                                    double* blocks, unsigned int* counter,
                                                                    float* out) {
  __shared__ double x[kTreeThreads];
  __shared__ int s_last;
  const std::uint32_t i = blockIdx.x * kTreeThreads + threadIdx.x;
  x[threadIdx.x] = i < n ? gnmr::detail::total_square(rep[i].norm) : 0.0;
  __syncthreads();
  block_tree_256(x);
  if (threadIdx.x == 0) blocks[blockIdx.x] = x[0];
  if (!last_block_done(counter, gridDim.x, &s_last)) return;
  __syncthreads();  // x[0] was read above
  const double total = block_sums_tree(blocks, gridDim.x, x);
  if (threadIdx.x == 0) *out = layer_global_norm(total);
}

// The layered decisions, reports and summary from the two controllers'.
template <bool kGlobal>
__global__ void layered_combine(const UnitDecision* od, const UnitDecision* id, const UnitReport* ir,
                                const StepSummary* os, const StepSummary* is, std::uint32_t n, ScaleCombine c,
                                UnitDecision* dec, UnitReport* rep, StepSummary* sum) {
  const std::uint32_t u = blockIdx.x * blockDim.x + threadIdx.x;
  if (u < n) {
    const UnitDecision d = layer_decision(od[kGlobal ? 0u : u], id[u], c);
    dec[u] = d;
    UnitReport r = ir[u];
    r.scale = d.scale;
    r.flags = d.flags;
    rep[u] = r;
  }
  if (u == 0) *sum = layer_summary(*os, *is);
}

}  // namespace detail

class LayeredDeviceController final : public DynDeviceController {
 public:
  // outer: 1 unit (a global rule) or as many as inner. Allocates its
  // buffers (setup time). Throws std::invalid_argument for a null controller
  // or mismatched unit counts, gnmr::cuda::Error when an allocation fails.
  LayeredDeviceController(std::unique_ptr<DynDeviceController> outer, std::unique_ptr<DynDeviceController> inner,
                          ScaleCombine combine = ScaleCombine::kProduct, std::string name = {})
      : outer_(std::move(outer)),
        inner_(std::move(inner)),
        combine_(combine),
        name_(std::move(name)),
        global_(gnmr::detail::layered_setup(outer_.get(), inner_.get(), combine_, name_, "LayeredDeviceController")) {
    n_ = inner_->num_units();
    if (n_ > 0xffffffffu) throw std::invalid_argument("gnmr: LayeredDeviceController: too many units");
    dec_ = DeviceBuffer(n_ * sizeof(UnitDecision), "LayeredDeviceController: cudaMalloc");
    rep_ = DeviceBuffer(n_ * sizeof(UnitReport), "LayeredDeviceController: cudaMalloc");
    sum_ = DeviceBuffer(sizeof(StepSummary), "LayeredDeviceController: cudaMalloc");
    total_ = DeviceBuffer(sizeof(float), "LayeredDeviceController: cudaMalloc");
    blocks_ = DeviceBuffer((gnmr::detail::total_scratch_size(n_) + 1) * sizeof(double),
                           "LayeredDeviceController: cudaMalloc");
    counter_ = DeviceBuffer(sizeof(unsigned int), "LayeredDeviceController: cudaMalloc");
    check(cudaMemset(counter_.get(), 0, sizeof(unsigned int)), "LayeredDeviceController: init");
    const StepSummary zero{};
    upload(sum_.as<StepSummary>(), &zero, 1, "LayeredDeviceController: upload");
  }

  using DynDeviceController::load;
  // Default streams restated: a default argument binds to the static type.
  cudaError_t step(const float* d_partials, cudaStream_t s = 0) override { return run<false>(d_partials, s); }
  cudaError_t step_norms(const float* d_norms, cudaStream_t s = 0) override { return run<true>(d_norms, s); }

  const UnitDecision* decisions() const override { return dec_.as<UnitDecision>(); }
  const UnitReport* reports() const override { return rep_.as<UnitReport>(); }
  const StepSummary* summary() const override { return sum_.as<StepSummary>(); }
  cudaError_t copy_summary_async(StepSummary* host, cudaStream_t s = 0) const override {
    if (host == nullptr) throw std::invalid_argument("gnmr: LayeredDeviceController::copy_summary_async: null host");
    return cudaMemcpyAsync(host, summary(), sizeof(StepSummary), cudaMemcpyDeviceToHost, s);
  }
  std::vector<UnitDecision> copy_decisions() const override { return download(decisions(), n_, kCopy); }
  std::vector<UnitReport> copy_reports() const override { return download(reports(), n_, kCopy); }
  StepSummary copy_summary() const override { return download(summary(), 1, kCopy)[0]; }
  std::int64_t steps_done() const override { return inner_->steps_done(); }
  const std::int64_t* steps_done_device() const override { return inner_->steps_done_device(); }
  std::size_t num_units() const override { return n_; }
  std::string name() const override { return name_; }
  std::uint32_t max_in_recovery() const override { return inner_->max_in_recovery(); }
  Combine partial_combine() const override { return inner_->partial_combine(); }
  void set_unit_numel(const std::uint64_t* numel, std::size_t n) override {
    if (n != n_) throw std::invalid_argument("gnmr: LayeredDeviceController::set_unit_numel: wrong unit count");
    gnmr::detail::layered_set_unit_numel(*outer_, *inner_, global_, numel, n);
  }
  void reset() override {
    outer_->reset();
    inner_->reset();
  }
  // The host LayeredController's container: a checkpoint moves between the
  // backends. All or nothing, as on the host.
  std::unique_ptr<StateImage> state_image() override {
    return std::unique_ptr<StateImage>(new NestedStateImage(outer_->state_image(), inner_->state_image()));
  }
  std::vector<std::uint8_t> save() const override {
    return gnmr::detail::nest_blobs(outer_->save(), inner_->save());
  }
  void load(const void* data, std::size_t size, const StateLoadOptions& opt) override {
    gnmr::detail::layered_load(*outer_, *inner_, data, size, opt);
  }

  const DynDeviceController& outer() const { return *outer_; }
  const DynDeviceController& inner() const { return *inner_; }
  bool outer_is_global() const { return global_; }

 private:
  static constexpr const char* kCopy = "LayeredDeviceController: download";

  template <bool kNorms>
  cudaError_t run(const float* d_in, cudaStream_t s) {
    if (d_in == nullptr) throw std::invalid_argument("gnmr: LayeredDeviceController::step: null input");
    const auto n = static_cast<std::uint32_t>(n_);
    cudaError_t e;
    if ((e = kNorms ? inner_->step_norms(d_in, s) : inner_->step(d_in, s)) != cudaSuccess) return e;
    if (global_) {
      // At least one block: n = 0 gives G = 0 as the host's tree does.
      const std::uint32_t m = n ? (n + detail::kTreeThreads - 1) / detail::kTreeThreads : 1u;
      detail::layered_global_norm<UnitReport><<<m, detail::kTreeThreads, 0, s>>>(
          inner_->reports(), n, blocks_.as<double>(), counter_.as<unsigned int>(), total_.as<float>());
      if ((e = cudaGetLastError()) != cudaSuccess) return e;
      e = outer_->step_norms(total_.as<float>(), s);
    } else {
      e = kNorms ? outer_->step_norms(d_in, s) : outer_->step(d_in, s);
    }
    if (e != cudaSuccess) return e;
    const std::uint32_t threads = 256, blocks = n ? (n + threads - 1) / threads : 1;
    const auto combine = global_ ? detail::layered_combine<true> : detail::layered_combine<false>;
    combine<<<blocks, threads, 0, s>>>(outer_->decisions(), inner_->decisions(), inner_->reports(), outer_->summary(),
                                       inner_->summary(), n, combine_, dec_.as<UnitDecision>(), rep_.as<UnitReport>(),
                                       sum_.as<StepSummary>());
    return cudaGetLastError();
  }

  std::unique_ptr<DynDeviceController> outer_, inner_;
  ScaleCombine combine_;
  std::string name_;
  std::size_t n_ = 0;
  bool global_;  // set from the pair in the constructor's initialiser
  DeviceBuffer dec_, rep_, sum_, total_, blocks_, counter_;
};

}  // namespace cuda
}  // namespace gnmr
