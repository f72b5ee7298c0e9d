// gnmr/cuda/controller.cuh — DeviceController: the CUDA backend of one GNMR
// step (step (c), docs/algorithm.md). All controller state lives on the device.
//
//   gnmr::cuda::DeviceController<> ctl(num_units);           // allocates once
//   gnmr::cuda::unit_partials(plan, d_partials, stream);      // step (a)
//   ctl.step(d_partials, stream);                             // step (c)
//   my_optimizer<<<..., stream>>>(ctl.decisions(), ctl.summary(), ...);  // step (d)
//
// A step is two kernel launches on the caller's stream, ctrl_evaluate_select
// (whose last block selects) and ctrl_commit_summarize (controller_kernels.cuh;
// on sm_90+ the second is a programmatic dependent of the first): no
// allocation, no host synchronisation, no device-to-host copy, and the
// step counter lives on the device, so the whole sequence can be captured
// in a CUDA graph and replayed. Decisions, reports and the summary are
// device arrays; read telemetry a step late with copy_summary_async() into
// pinned memory, never with a blocking copy in the training loop.
//
// Same policies, same per-unit functors (gnmr/step/step.hpp) and the same
// selection order as GnmrController: given the same norms, the decisions,
// flags, lock counters and summary are identical to the host backend's.
// The optimizer reads each unit's decision (accessors.cuh) and, when the
// recovery policy can suggest a global skip (GlobalSkip, Ladder), the
// summary's skip_step too (step_skipped(); adamw_step's d_summary).
// With the systemic rule on (ControllerOptions::systemic) the step-wide
// decision is made in the last block of the first kernel, and its global
// state (the tracker of the total norm) lives in device memory with the units
// (global_state(), copy_global_state(); gnmr::save_state / load_state below
// and in gnmr/io/state.hpp). Still two launches, no sync, no allocation.
// Two instances (or two steps of one instance) must not run concurrently on
// different streams: they share the instance's scratch.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gnmr/core/types.hpp"
#include "gnmr/cuda/controller_kernels.cuh"
#include "gnmr/cuda/error.cuh"
#include "gnmr/cuda/grid.cuh"
#include "gnmr/cuda/memory.cuh"
#include "gnmr/cuda/policy_check.cuh"
#include "gnmr/host/state_image.hpp"
#include "gnmr/io/state.hpp"
#include "gnmr/io/state_id.hpp"
#include "gnmr/policy/budget.hpp"
#include "gnmr/policy/mean.hpp"
#include "gnmr/policy/norm.hpp"
#include "gnmr/policy/recovery.hpp"
#include "gnmr/policy/trigger.hpp"
#include "gnmr/step/select.hpp"
#include "gnmr/step/step.hpp"
#include "gnmr/step/systemic.hpp"
#include "gnmr/step/validate.hpp"

namespace gnmr {
namespace cuda {

template <class Norm = L2Norm, class Mean = EmaMean, class Trigger = GnmrTrigger,
          class Recovery = ClipToMean, class Budget = MaxO>
class DeviceController {
 public:
  using Policies = gnmr::detail::PolicySet<Norm, Mean, Trigger, Recovery, Budget>;
  using UnitState = typename Policies::UnitState;

  // Validates like GnmrController (detail::validate_controller:
  // std::invalid_argument, nothing allocated), allocates every buffer the
  // steps use and uploads the initial state (synchronously).
  explicit DeviceController(std::size_t num_units, Norm norm = {}, Mean mean = {},
                            Trigger trigger = {}, Recovery recovery = {}, Budget budget = {},
                            ControllerOptions opt = {})
      : DeviceController(nullptr, 0, num_units, norm, mean, trigger, recovery, budget, opt) {}

  // Two-phase form: the device workspace the controller needs for num_units
  // units under this budget; pass a buffer of at least that size to the
  // constructor below (it must outlive the controller).
  static std::size_t workspace_bytes(std::size_t num_units, const Budget& budget = {}) {
    return carve(nullptr, num_units, budget).bytes;
  }
  DeviceController(void* d_workspace, std::size_t ws_bytes, std::size_t num_units, Norm norm = {},
                   Mean mean = {}, Trigger trigger = {}, Recovery recovery = {}, Budget budget = {},
                   ControllerOptions opt = {})
      : p_{norm, mean, trigger, recovery, budget, opt}, n_(num_units) {
    detail::require_device_policies<Policies>();  // members GNMR_HOST_DEVICE, trivially copyable
    gnmr::detail::validate_controller("DeviceController", n_, p_);
    const std::size_t need = carve(nullptr, n_, budget).bytes;
    void* base = acquire_workspace(own_, d_workspace, ws_bytes, need, "DeviceController");
    b_ = carve(base, n_, budget);
    threshold_ = gnmr::detail::systemic_threshold(opt.systemic, n_, budget.slots());
    check(cudaMemset(b_.counters, 0, 2 * sizeof(unsigned int)), "DeviceController: init");
    check(cudaMemset(b_.dec, 0, n_ * sizeof(UnitDecision)), "DeviceController: init");
    check(cudaMemset(b_.rep, 0, n_ * sizeof(UnitReport)), "DeviceController: init");
    if (b_.aux_norm) check(cudaMemset(b_.aux_norm, 0, n_ * sizeof(float)), "DeviceController: init");
    pdl_ = pdl_supported(detail::ctrl_commit_summarize<Policies>);
    reset();
  }

  // A controller's policies and options (its policies(), host or device),
  // fresh state.
  DeviceController(std::size_t num_units, const Policies& p)
      : DeviceController(num_units, p.norm, p.mean, p.trigger, p.recovery, p.budget, p.opt) {}

  DeviceController(const DeviceController&) = delete;
  DeviceController& operator=(const DeviceController&) = delete;

  std::size_t num_units() const { return n_; }
  // The members every controller kind shares (DynDeviceController's names):
  // the policy names, the budget's slot count, how partials combine across
  // ranks, the state blob (blocking: checkpoint time).
  std::string name() const { return policy_names<Policies>(); }
  std::uint32_t max_in_recovery() const { return p_.budget.slots(); }
  static constexpr Combine partial_combine() { return Norm::kCombine; }
  std::vector<std::uint8_t> save() const { return save_state(*this); }
  void load(const void* data, std::size_t size, const StateLoadOptions& opt = {}) {
    load_state(*this, data, size, opt);
  }
  void load(const std::vector<std::uint8_t>& blob, const StateLoadOptions& opt = {}) {
    load_state(*this, blob.data(), blob.size(), opt);
  }
  // Whether the commit kernel is launched as a programmatic dependent of the
  // evaluate kernel (sm_90+, see pdl_supported); the decisions are the same
  // either way.
  bool programmatic_launch() const { return pdl_; }
  const Policies& policies() const { return p_; }

  // One step from per-unit partials in device memory (Norm's sum of squares
  // or max, e.g. from gnmr::cuda::unit_partials or after an all-reduce).
  // Throws std::invalid_argument / std::logic_error on misuse detectable on
  // the host; returns the launch error otherwise. Enqueue only.
  cudaError_t step(const float* d_partials, cudaStream_t stream = 0) {
    check_no_aux("step", "step_with_aux");
    if (d_partials == nullptr) throw std::invalid_argument("gnmr: DeviceController::step: null partials");
    check_numel();
    return launch<true>(d_partials, nullptr, stream);
  }
  // One step from finished norms (one per unit) in device memory.
  cudaError_t step_norms(const float* d_norms, cudaStream_t stream = 0) {
    check_no_aux("step_norms", "step_norms_with_aux");
    if (d_norms == nullptr) throw std::invalid_argument("gnmr: DeviceController::step_norms: null norms");
    return launch<false>(d_norms, nullptr, stream);
  }
  // The same with each unit's aux signal (UnitView::aux; the noise-floor
  // trigger's quantization noise): its partials, finished by the NormPolicy
  // in the evaluate kernel as the norms are (or its norms, for
  // step_norms_with_aux), in device memory. Nothing more is allocated or
  // synchronised; a trigger that does not read aux ignores it.
  cudaError_t step_with_aux(const float* d_partials, const float* d_aux_partials, cudaStream_t stream = 0) {
    if (d_partials == nullptr || d_aux_partials == nullptr)
      throw std::invalid_argument("gnmr: DeviceController::step_with_aux: null partials");
    check_numel();
    return launch<true>(d_partials, d_aux_partials, stream);
  }
  cudaError_t step_norms_with_aux(const float* d_norms, const float* d_aux_norms, cudaStream_t stream = 0) {
    if (d_norms == nullptr || d_aux_norms == nullptr)
      throw std::invalid_argument("gnmr: DeviceController::step_norms_with_aux: null norms");
    return launch<false>(d_norms, d_aux_norms, stream);
  }
  // Does the trigger read the aux signal (so that step() and step_norms() refuse)?
  static constexpr bool needs_aux() { return gnmr::detail::needs_aux<Trigger>::value; }
  // The finished aux norms the last step evaluated, one per unit, in device
  // memory (zeros before the first step; reset() and load() keep the last
  // step's, as the host's aux_norms() does): what an aux trace records, the device
  // twin of GnmrController::aux_norms(), the same bits. Null for a trigger
  // that reads no aux (nothing is kept). Valid until the next step is
  // enqueued; copy it on the step's stream.
  const float* aux_norms() const { return b_.aux_norm; }
  // The same, copied to the host (blocking; empty for no aux).
  std::vector<float> copy_aux_norms() const {
    std::vector<float> v(b_.aux_norm ? n_ : 0);
    if (b_.aux_norm) check(cudaMemcpy(v.data(), b_.aux_norm, n_ * sizeof(float), cudaMemcpyDeviceToHost),
                           "DeviceController::copy_aux_norms");
    return v;
  }

  // Element count per unit (host array); RmsNorm needs it. Setup time:
  // synchronous upload.
  void set_unit_numel(const std::uint64_t* numel, std::size_t n) {
    if (n != n_ || numel == nullptr)
      throw std::invalid_argument("gnmr: DeviceController::set_unit_numel: expected " +
                                  std::to_string(n_) + " values");
    std::vector<double> d(n);
    for (std::size_t i = 0; i < n; ++i) {
      if (numel[i] == 0)
        throw std::invalid_argument("gnmr: set_unit_numel: unit " + std::to_string(i) + " has 0 elements");
      d[i] = static_cast<double>(numel[i]);
    }
    device_barrier("DeviceController::set_unit_numel");  // no step may be reading numel
    upload(b_.numel, d.data(), n, "DeviceController::set_unit_numel");
    device_barrier("DeviceController::set_unit_numel");
    numel_set_ = true;
  }
  void set_unit_numel(const std::vector<std::uint64_t>& numel) { set_unit_numel(numel.data(), numel.size()); }

  // Device arrays, valid after the step that wrote them has run.
  const UnitDecision* decisions() const { return b_.dec; }  // num_units, 8-byte aligned
  const UnitReport* reports() const { return b_.rep; }
  const StepSummary* summary() const { return b_.summary; }
  const std::int64_t* steps_done_device() const { return b_.step; }
  const UnitState* unit_states() const { return b_.state; }
  const GlobalState* global_state() const { return b_.global; }  // the systemic tracker
  // The state's device regions and their codec (gnmr/cuda/state_stage.cuh).
  std::unique_ptr<StateImage> state_image() {
    return std::unique_ptr<StateImage>(new TypedStateImage<Policies>(p_, n_, b_.state, b_.global, b_.step));
  }
  // The systemic threshold C (systemic iff more than C units trigger).
  std::uint32_t systemic_threshold() const { return threshold_; }

  // Telemetry without a sync: enqueue a copy of the summary into host
  // memory (pinned, for it to be truly asynchronous); read it after a later
  // event or step has completed. A null `host` throws std::invalid_argument;
  // a copy error is returned.
  cudaError_t copy_summary_async(StepSummary* host, cudaStream_t stream = 0) const {
    if (host == nullptr)
      throw std::invalid_argument("gnmr: DeviceController::copy_summary_async: null host pointer");
    return cudaMemcpyAsync(host, b_.summary, sizeof(StepSummary), cudaMemcpyDeviceToHost, stream);
  }

  // Blocking host copies (tests, checkpoints, debugging): they synchronise
  // the whole device first, so they see a step enqueued on any stream.
  std::vector<UnitDecision> copy_decisions() const { return download(b_.dec, n_, kCopy); }
  std::vector<UnitReport> copy_reports() const { return download(b_.rep, n_, kCopy); }
  std::vector<UnitState> copy_unit_states() const { return download(b_.state, n_, kCopy); }
  GlobalState copy_global_state() const { return download(b_.global, 1, kCopy)[0]; }
  StepSummary copy_summary() const { return download(b_.summary, 1, kCopy)[0]; }
  std::int64_t steps_done() const { return download(b_.step, 1, kCopy)[0]; }

  // Back to the state at construction (unit sizes are kept). Synchronous.
  void reset() { restore(std::vector<UnitState>(n_, Policies::init_unit()), 0, init_global()); }

  // Replace the whole state (e.g. from a checkpoint or a host controller's
  // unit_states() and global_state()). Synchronous.
  void restore(const std::vector<UnitState>& st, std::int64_t step, const GlobalState& global = init_global()) {
    if (st.size() != n_) throw std::invalid_argument("gnmr: DeviceController::restore: unit count mismatch");
    device_barrier("DeviceController::restore");  // no step in flight may still use the state
    upload(b_.state, st.data(), n_, "DeviceController::restore");
    upload(b_.global, &global, 1, "DeviceController::restore");
    upload(b_.step, &step, 1, "DeviceController::restore");
    const StepSummary zero{};
    upload(b_.summary, &zero, 1, "DeviceController::restore");
    device_barrier("DeviceController::restore");
  }

 private:
  struct Bufs {
    UnitState* state = nullptr;
    UnitDecision* dec = nullptr;
    UnitReport* rep = nullptr;
    StepSummary* summary = nullptr;
    std::int64_t* step = nullptr;
    double* numel = nullptr;
    float* norm = nullptr;
    gnmr::detail::UnitVerdict* verdict = nullptr;
    std::uint64_t* key = nullptr;
    std::uint32_t* block_counts = nullptr;
    std::uint64_t* block_top = nullptr;
    double* block_sq = nullptr;
    gnmr::detail::SelectRule* rule = nullptr;
    SystemicStep* sys = nullptr;
    GlobalState* global = nullptr;
    gnmr::detail::SummaryAcc* block_acc = nullptr;
    unsigned int* counters = nullptr;
    float* aux_norm = nullptr;  // only for a trigger that reads aux
    std::size_t bytes = 0;
  };

  static std::size_t blocks_for(std::size_t n) {
    return (n + gnmr::detail::kSelectThreads - 1) / gnmr::detail::kSelectThreads;
  }
  static Bufs carve(void* base, std::size_t n, const Budget& budget) {
    const std::size_t nb = blocks_for(n);
    const std::uint32_t k = gnmr::detail::topk_per_block(budget.slots());
    Carver c(base);
    Bufs b;
    b.state = c.take<UnitState>(n);
    b.dec = c.take<UnitDecision>(n);
    b.rep = c.take<UnitReport>(n);
    b.summary = c.take<StepSummary>(1);
    b.step = c.take<std::int64_t>(1);
    b.numel = norm_needs_numel<Norm>() ? c.take<double>(n) : nullptr;
    b.norm = c.take<float>(n);
    b.verdict = c.take<gnmr::detail::UnitVerdict>(n);
    b.key = c.take<std::uint64_t>(n);
    b.block_counts = c.take<std::uint32_t>(3 * nb);
    b.block_top = k ? c.take<std::uint64_t>(nb * k) : nullptr;
    // 8 bytes per 256 units, so always carved: workspace_bytes() does not
    // depend on the options.
    b.block_sq = c.take<double>(nb);
    b.rule = c.take<gnmr::detail::SelectRule>(1);
    b.sys = c.take<SystemicStep>(1);
    b.global = c.take<GlobalState>(1);
    b.block_acc = c.take<gnmr::detail::SummaryAcc>(nb);
    b.counters = c.take<unsigned int>(2);
    b.aux_norm = gnmr::detail::needs_aux<Trigger>::value ? c.take<float>(n) : nullptr;
    b.bytes = c.bytes();
    return b;
  }

  void check_no_aux(const char* what, const char* instead) const {
    if (needs_aux())
      throw std::logic_error(std::string("gnmr: DeviceController::") + what + ": the " + Trigger::kName +
                             " trigger needs each unit's aux signal: call " + instead + "()");
  }
  void check_numel() const {
    if (norm_needs_numel<Norm>() && !numel_set_)
      throw std::logic_error(std::string("gnmr: ") + Norm::kName +
                             " norm needs unit sizes: call set_unit_numel() first");
  }

  template <bool kFinish>
  cudaError_t launch(const float* in, const float* aux, cudaStream_t stream) {
    detail::CtrlArgs<Policies> a = kernel_args();
    a.aux = aux;
    cudaError_t e = launch_evaluate<kFinish>(a, in, stream);
    if (e != cudaSuccess) return e;
    // The commit as a programmatic dependent of the evaluation (sm_90+): its
    // launch and state staging overlap the evaluation instead of following it.
    return launch_dependent(detail::ctrl_commit_summarize<Policies>, blocks_for(n_), gnmr::detail::kSelectThreads,
                            stream, pdl_, a);
  }

 public:
  // ---- For gnmr/cuda/layered_fused.cuh, which runs this controller's
  // phases inside its own kernels; not for applications. ----
  // The kernels' arguments (device pointers into this controller's buffers).
  detail::CtrlArgs<Policies> kernel_args() const {
    detail::CtrlArgs<Policies> a{};
    a.p = p_;
    a.state = b_.state;
    a.dec = b_.dec;
    a.rep = b_.rep;
    a.summary = b_.summary;
    a.step = b_.step;
    a.numel = b_.numel;
    a.norm = b_.norm;
    a.verdict = b_.verdict;
    a.key = b_.key;
    a.block_counts = b_.block_counts;
    a.block_top = b_.block_top;
    a.block_sq = b_.block_sq;
    a.rule = b_.rule;
    a.sys = b_.sys;
    a.global = b_.global;
    a.block_acc = b_.block_acc;
    a.counters = b_.counters;
    a.aux_norm = b_.aux_norm;
    a.n = static_cast<std::uint32_t>(n_);
    a.slots = p_.budget.slots();
    a.topk = gnmr::detail::topk_per_block(p_.budget.slots());
    a.systemic_threshold = threshold_;
    return a;
  }
  // Phase 1 (and 2) alone: ctrl_evaluate_select on the stream, with the
  // arguments kernel_args() gave.
  template <bool kFinish>
  cudaError_t launch_evaluate(const detail::CtrlArgs<Policies>& a, const float* in, cudaStream_t stream) {
    const unsigned int nb = static_cast<unsigned int>(blocks_for(n_));
    // global-clip's per-block tree of squares: dynamic shared memory, so the
    // other actions (and no rule) keep the evaluate kernel's footprint as it was.
    const std::size_t sq_smem = gnmr::detail::needs_total(p_.opt.systemic, p_.opt.warmup_clip)
                                    ? gnmr::detail::kSelectThreads * sizeof(double)
                                    : 0u;
    detail::ctrl_evaluate_select<Policies, kFinish><<<nb, gnmr::detail::kSelectThreads, sq_smem, stream>>>(a, in);
    return cudaGetLastError();
  }
  // Whether a step from partials would throw for want of set_unit_numel().
  bool needs_unit_numel() const { return norm_needs_numel<Norm>() && !numel_set_; }

 private:
  static constexpr const char* kCopy = "DeviceController: download";

  Policies p_;
  std::size_t n_;
  DeviceBuffer own_;
  Bufs b_;
  bool numel_set_ = false;
  bool pdl_ = false;
  std::uint32_t threshold_ = 0;
};

}  // namespace cuda

// The state blob (gnmr/io/state.hpp) of the typed device controller: the same
// bytes as the host controller's for the same state (the blob is built from
// one blocking copy of the unit and global states), so a checkpoint moves
// between the backends. Checkpoint time only: it synchronises the device.
template <class N, class M, class T, class R, class B>
std::vector<std::uint8_t> save_state(const cuda::DeviceController<N, M, T, R, B>& c) {
  const auto st = c.copy_unit_states();
  return detail::write_state_blob(c.policies(), st.data(), st.size(), c.steps_done(), c.copy_global_state());
}

// gnmr::load_state(DeviceController&, ...) is the generic one of state.hpp:
// it validates on the host, then restore() uploads (synchronously); on any
// error it throws gnmr::StateError and the device state is unchanged.

}  // namespace gnmr
