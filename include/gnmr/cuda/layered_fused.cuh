// gnmr/cuda/layered_fused.cuh — FusedLayeredDeviceController: a layered
// controller whose outer rule is per unit and needs no selection (the
// default preset's stabilizer), stepped in the launches of one controller.
//
//   auto ctl = gnmr::cuda::make_device("default", units);  // fused when it can be
//   ctl->step(d_partials, stream);
//
// Why: LayeredDeviceController (layered.cuh) steps the outer, then the
// inner, then a combine kernel: five launches and every unit's decision and
// report written three times. On an H100 the default preset
// ("stabilizer+gnmr-calibrated") cost 1.82 x the inner alone at 10k units
// and 1.67 x at 1M (docs/record/performance-gpu.md, issue 32). An outer rule with
// an unlimited budget and no systemic rule grants every candidate, so its
// whole step is per unit: it needs nothing from the inner's selection, and
// nothing of it has to wait for phase 1. So the step is the inner's phase 1
// (ctrl_evaluate_select, unchanged), then one kernel, fused_commit below, a
// programmatic dependent of it: each block runs the outer's evaluate and
// commit for its units while phase 1 is still running (it reads only the
// partials and the outer's state), then the inner's commit, combines the
// two decisions per unit (layer_decision) and writes the layered decisions
// and reports; its last block writes the layered summary (the inner's, with
// the outer's skip suggestion, layer_summary) and both step counters.
//
// What it does not write: the outer's and the inner's own decisions,
// reports and summaries (nothing reads them: this class exposes the
// layered ones only). The states, step counters and save()/load() blobs are
// those of LayeredDeviceController, byte for byte.
//
// Determinism: the outer's step is the typed DeviceController's with its
// selection's outcome (rule_all over its keys, which is what
// grants_wanted gives when slots are unlimited) and its SystemicStep (none,
// warm-up scale 1) computed in place, the inner's is its own kernels' code,
// the combine is gnmr/step/layered.hpp's: the same partials give the same
// decisions, reports, summaries and states as gnmr::LayeredController on the
// host, bit for bit (tests/cuda/test_presets.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gnmr/core/types.hpp"
#include "gnmr/cuda/block.cuh"
#include "gnmr/cuda/controller.cuh"
#include "gnmr/cuda/controller_kernels.cuh"
#include "gnmr/cuda/dyn_controller.cuh"
#include "gnmr/cuda/grid.cuh"
#include "gnmr/cuda/memory.cuh"
#include "gnmr/host/controller.hpp"
#include "gnmr/host/layered.hpp"
#include "gnmr/io/state.hpp"
#include "gnmr/step/layered.hpp"
#include "gnmr/step/select.hpp"
#include "gnmr/step/step.hpp"
#include "gnmr/step/systemic.hpp"

namespace gnmr {
namespace cuda {
namespace detail {

template <class PO, class PI>
struct FusedArgs {
  CtrlArgs<PO> o;  // the outer's buffers (state, step counter, unit sizes)
  CtrlArgs<PI> i;  // the inner's, as its own kernels see them
  ScaleCombine combine;
  UnitDecision* dec;  // the layered outputs
  UnitReport* rep;
  StepSummary* sum;
  std::uint32_t* block_skip;  // per block: did an outer unit suggest skipping the step
};

using gnmr::detail::selection_free;  // gnmr/step/layered.hpp

template <class State>
constexpr std::size_t kStageOnly = kStageState<State> ? (sizeof(State) * kSelectThreads + 15u) / 16u : 1u;

// Phase 3 of the pair and the combine, one thread per unit (see the file's
// comment). The inner's part is the controller's commit body, commit_block.
template <class PO, class PI, bool kFinish>
__global__ void __launch_bounds__(kSelectThreads) fused_commit(FusedArgs<PO, PI> f, const float* __restrict__ in) {
  using Acc = gnmr::detail::SummaryAcc;
  using SO = typename PO::UnitState;
  using SI = typename PI::UnitState;
  constexpr bool kStageO = kStageState<SO>;
  constexpr std::size_t kWords = kStageWords<SI> > kStageOnly<SO> ? kStageWords<SI> : kStageOnly<SO>;
  __shared__ Acc s_acc[kSelectThreads];
  __shared__ uint4 s_stage[kWords];
  __shared__ int s_last;
  const CtrlArgs<PO>& b = f.o;
  const CtrlArgs<PI>& a = f.i;
  const std::uint32_t base = blockIdx.x * kSelectThreads;
  const std::uint32_t count = a.n - base < kSelectThreads ? a.n - base : kSelectThreads;
  const std::uint32_t i = base + threadIdx.x;
  const bool active = i < a.n;

  // 1. The outer's whole step for these units, overlapping phase 1: it reads
  // the partials (complete before phase 1 began) and its own state only.
  const std::int64_t to = *b.step + 1;
  UnitDecision dout{1.0f, 0u};
  std::uint32_t oskip = 0;
  {
    SO* s_o = reinterpret_cast<SO*>(s_stage);
    if constexpr (kStageO) {
      stage_in(s_stage, b.state + base, count);
      __syncthreads();
    }
    SO so;
    if (active) {
      so = kStageO ? s_o[threadIdx.x] : b.state[i];
      const float x = in[i];
      const float norm = kFinish ? b.p.norm.finish(x, b.numel ? b.numel[i] : 1.0) : x;
      const UnitView v0 = gnmr::detail::evaluate_unit(b.p, so, norm, to, i);
      const std::uint64_t key = gnmr::detail::is_candidate(v0.flags) ? gnmr::detail::rank_key(v0.risk, i) : 0u;
      const bool granted = gnmr::detail::rule_grants(gnmr::detail::rule_all(), key);
      SystemicStep sy = systemic_none();
      sy.warm_scale = gnmr::detail::warmup_clip_scale(b.p.opt.warmup_clip, to, 0.0f);  // 1: no warm-up clip
      gnmr::detail::commit_unit(b.p, so, v0, granted, sy, dout, static_cast<UnitReport*>(nullptr), oskip);
      if constexpr (!kStageO) b.state[i] = so;
    }
    if constexpr (kStageO) {
      __syncthreads();  // every thread has read its state from the stage
      if (active) s_o[threadIdx.x] = so;
      __syncthreads();
      stage_out(b.state + base, s_stage, count);
    }
    const int any = __syncthreads_or(oskip != 0u);  // also: the stage is free again
    if (threadIdx.x == 0) f.block_skip[blockIdx.x] = any ? 1u : 0u;
  }

  // 2. The inner's commit (the controller's commit body) and the combine.
  const std::int64_t t = *a.step + 1;
  SystemicStep sys;
  const auto combine = [&](UnitDecision& d, UnitReport& r) {
    d = layer_decision(dout, d, f.combine);
    r.scale = d.scale;
    r.flags = d.flags;
  };
  if (!commit_block(a, t, f.dec, f.rep, s_stage, s_acc, &s_last, sys, combine)) return;
  Acc acc = Acc::zero();
  std::uint32_t skip = 0;
  for (std::uint32_t k = threadIdx.x; k < gridDim.x; k += blockDim.x) {
    acc.merge(load_cg(a.block_acc + k));
    skip |= __ldcg(f.block_skip + k);
  }
  const int outer_skip = __syncthreads_or(skip != 0u);  // s_acc[0] was read above
  const Acc& total = block_merge_tree<kSelectThreads>(acc, s_acc);
  if (threadIdx.x == 0) {
    const StepSummary is = total.finish(t, sys);
    StepSummary os{};  // layer_summary reads the outer's skip suggestion only
    os.skip_step = outer_skip ? 1u : 0u;
    *a.summary = is;
    *f.sum = layer_summary(os, is);
    *a.step = t;
    *b.step = to;
  }
}

}  // namespace detail

// DevO, DevI: DeviceController<...> types. The outer must be per unit and
// selection-free (detail::selection_free): the constructor throws
// std::invalid_argument otherwise; cuda::make_device falls back to
// LayeredDeviceController for every other pair.
template <class DevO, class DevI>
class FusedLayeredDeviceController final : public DynDeviceController {
  using PO = typename DevO::Policies;
  using PI = typename DevI::Policies;

 public:
  // From the host controllers' policies, options and state (as
  // DeviceDynAdapter does). Setup time: allocates and uploads.
  template <class HostO, class HostI>
  FusedLayeredDeviceController(const HostO& outer, const HostI& inner, ScaleCombine combine, std::string name)
      : outer_(outer.num_units(), outer.policies()),
        inner_(inner.num_units(), inner.policies()),
        combine_(combine),
        name_(std::move(name)) {
    n_ = inner_.num_units();
    if (outer_.num_units() != n_)
      throw std::invalid_argument("gnmr: FusedLayeredDeviceController: the outer rule must have the inner's units");
    if (!detail::selection_free(outer_.policies()))
      throw std::invalid_argument(
          "gnmr: FusedLayeredDeviceController: the outer rule must grant every candidate (unlimited budget, no "
          "systemic rule, no warm-up clip); use LayeredDeviceController");
    if (static_cast<std::uint32_t>(combine) > 1u)
      throw std::invalid_argument("gnmr: FusedLayeredDeviceController: combine must be product or min");
    if (n_ > 0xffffffffu || n_ == 0) throw std::invalid_argument("gnmr: FusedLayeredDeviceController: unit count");
    if (outer.steps_done() != 0) outer_.restore(outer.unit_states(), outer.steps_done(), outer.global_state());
    if (inner.steps_done() != 0) inner_.restore(inner.unit_states(), inner.steps_done(), inner.global_state());
    const std::size_t nb = (n_ + kSelectThreads - 1) / kSelectThreads;
    dec_ = DeviceBuffer(n_ * sizeof(UnitDecision), "FusedLayeredDeviceController: cudaMalloc");
    rep_ = DeviceBuffer(n_ * sizeof(UnitReport), "FusedLayeredDeviceController: cudaMalloc");
    sum_ = DeviceBuffer(sizeof(StepSummary), "FusedLayeredDeviceController: cudaMalloc");
    skip_ = DeviceBuffer(nb * sizeof(std::uint32_t), "FusedLayeredDeviceController: cudaMalloc");
    check(cudaMemset(dec_.get(), 0, n_ * sizeof(UnitDecision)), "FusedLayeredDeviceController: init");
    check(cudaMemset(rep_.get(), 0, n_ * sizeof(UnitReport)), "FusedLayeredDeviceController: init");
    const StepSummary zero{};
    upload(sum_.as<StepSummary>(), &zero, 1, "FusedLayeredDeviceController: upload");
    pdl_ = pdl_supported(detail::fused_commit<PO, PI, true>);
  }

  using DynDeviceController::load;
  // The default stream is restated (a default argument binds to the static
  // type: DefaultDeviceController users call ctl->step(d)).
  cudaError_t step(const float* d, cudaStream_t s = 0) override {
    if (d == nullptr) throw std::invalid_argument("gnmr: FusedLayeredDeviceController::step: null partials");
    if (outer_.needs_unit_numel() || inner_.needs_unit_numel())
      throw std::logic_error("gnmr: " + name_ + ": its norm needs unit sizes: call set_unit_numel() first");
    return run<true>(d, s);
  }
  cudaError_t step_norms(const float* d, cudaStream_t s = 0) override {
    if (d == nullptr) throw std::invalid_argument("gnmr: FusedLayeredDeviceController::step_norms: null norms");
    return run<false>(d, s);
  }

  const UnitDecision* decisions() const override { return dec_.as<UnitDecision>(); }
  const UnitReport* reports() const override { return rep_.as<UnitReport>(); }
  const StepSummary* summary() const override { return sum_.as<StepSummary>(); }
  cudaError_t copy_summary_async(StepSummary* host, cudaStream_t s = 0) const override {
    if (host == nullptr)
      throw std::invalid_argument("gnmr: FusedLayeredDeviceController::copy_summary_async: null host");
    return cudaMemcpyAsync(host, summary(), sizeof(StepSummary), cudaMemcpyDeviceToHost, s);
  }
  std::vector<UnitDecision> copy_decisions() const override { return download(decisions(), n_, kCopy); }
  std::vector<UnitReport> copy_reports() const override { return download(reports(), n_, kCopy); }
  StepSummary copy_summary() const override { return download(summary(), 1, kCopy)[0]; }
  std::int64_t steps_done() const override { return inner_.steps_done(); }
  // The inner's counter: the fused commit advances it with the summary.
  const std::int64_t* steps_done_device() const override { return inner_.steps_done_device(); }
  std::size_t num_units() const override { return n_; }
  std::string name() const override { return name_; }
  std::uint32_t max_in_recovery() const override { return inner_.policies().budget.slots(); }
  Combine partial_combine() const override { return PI::NormT::kCombine; }
  void set_unit_numel(const std::uint64_t* numel, std::size_t n) override {
    if (n != n_) throw std::invalid_argument("gnmr: FusedLayeredDeviceController::set_unit_numel: wrong unit count");
    inner_.set_unit_numel(numel, n);
    outer_.set_unit_numel(numel, n);
  }
  void reset() override {
    outer_.reset();
    inner_.reset();
  }
  // LayeredDeviceController's container, byte for byte; load is all or
  // nothing (gnmr::detail::layered_load).
  std::unique_ptr<StateImage> state_image() override {
    return std::unique_ptr<StateImage>(new NestedStateImage(outer_.state_image(), inner_.state_image()));
  }
  std::vector<std::uint8_t> save() const override {
    return gnmr::detail::nest_blobs(save_state(outer_), save_state(inner_));
  }
  void load(const void* data, std::size_t size, const StateLoadOptions& opt) override {
    BlobOf<DevO> o(&outer_);
    BlobOf<DevI> i(&inner_);
    gnmr::detail::layered_load(static_cast<BlobFace&>(o), static_cast<BlobFace&>(i), data, size, opt);
  }

  const DevO& outer() const { return outer_; }  // its decisions/reports/summary are not written
  const DevI& inner() const { return inner_; }
  bool programmatic_launch() const { return pdl_; }

 private:
  static constexpr const char* kCopy = "FusedLayeredDeviceController: download";
  static constexpr unsigned int kSelectThreads = gnmr::detail::kSelectThreads;

  // save()/load() faces of the two typed controllers, one type for
  // layered_load.
  struct BlobFace {
    virtual ~BlobFace() = default;
    virtual std::vector<std::uint8_t> save() const = 0;
    virtual void load(const void* data, std::size_t size, const StateLoadOptions& opt) = 0;
  };
  template <class Dev>
  struct BlobOf final : BlobFace {
    explicit BlobOf(Dev* dev) : d(dev) {}
    Dev* d;
    std::vector<std::uint8_t> save() const override { return save_state(*d); }
    void load(const void* data, std::size_t size, const StateLoadOptions& opt) override {
      load_state(*d, data, size, opt);
    }
  };

  template <bool kFinish>
  cudaError_t run(const float* in, cudaStream_t s) {
    detail::FusedArgs<PO, PI> f{};
    f.o = outer_.kernel_args();
    f.i = inner_.kernel_args();
    cudaError_t e = inner_.template launch_evaluate<kFinish>(f.i, in, s);
    if (e != cudaSuccess) return e;
    f.combine = combine_;
    f.dec = dec_.as<UnitDecision>();
    f.rep = rep_.as<UnitReport>();
    f.sum = sum_.as<StepSummary>();
    f.block_skip = skip_.as<std::uint32_t>();
    const std::size_t nb = (n_ + kSelectThreads - 1) / kSelectThreads;
    return launch_dependent(detail::fused_commit<PO, PI, kFinish>, nb, kSelectThreads, s, pdl_, f, in);
  }

  DevO outer_;
  DevI inner_;
  ScaleCombine combine_;
  std::string name_;
  std::size_t n_ = 0;
  bool pdl_ = false;
  DeviceBuffer dec_, rep_, sum_, skip_;
};

}  // namespace cuda
}  // namespace gnmr
