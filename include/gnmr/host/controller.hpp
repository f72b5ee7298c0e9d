// gnmr/host/controller.hpp — GnmrController: the host backend of one GNMR step.
//
// Call step() once per optimizer step with the N per-unit partial norms (or
// step_norms() with finished norms); read decisions() for the optimizer and
// reports()/summary() for telemetry. Every buffer is allocated at
// construction: a step allocates nothing. The per-unit work is the shared
// functors of step/step.hpp, so this backend is also the reference that
// the CUDA backend is tested against.
//
// Determinism: the result of a step is a function of the state and the
// norms alone. The slot selection is a total order (risk descending, ties
// to the lower index), all decision arithmetic is correctly rounded fp32
// (gnmr::math) with FP contraction off, the systemic test compares integers
// and the one reduction over units (the total norm of the global-clip
// action) is the fixed tree of detail::total_sq_tree, which the CUDA
// backend runs too.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "gnmr/config.hpp"
#include "gnmr/core/types.hpp"
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

template <class Norm = L2Norm, class Mean = EmaMean, class Trigger = GnmrTrigger,
          class Recovery = ClipToMean, class Budget = MaxO>
class GnmrController {
 public:
  using Policies = detail::PolicySet<Norm, Mean, Trigger, Recovery, Budget>;
  using UnitState = typename Policies::UnitState;

  explicit GnmrController(std::size_t num_units, Norm norm = {}, Mean mean = {},
                          Trigger trigger = {}, Recovery recovery = {}, Budget budget = {},
                          ControllerOptions opt = {})
      : p_{norm, mean, trigger, recovery, budget, opt} {
    detail::validate_controller("GnmrController", num_units, p_);
    state_.assign(num_units, Policies::init_unit());
    reports_.assign(num_units, UnitReport{});
    decisions_.assign(num_units, UnitDecision{1.0f, 0u});
    norms_.assign(num_units, 0.0f);
    aux_.assign(num_units, 0.0f);
    verdicts_.assign(num_units, detail::UnitVerdict{});
    numel_.assign(num_units, 1.0);
    candidates_.reserve(num_units);
    promoted_.reserve(num_units);
    threshold_ = detail::systemic_threshold(opt.systemic, num_units, budget.slots());
    if (detail::needs_total(opt.systemic, opt.warmup_clip))
      total_scratch_.assign(detail::total_scratch_size(num_units), 0.0);
  }

  // Another controller's policies and options (policies()), fresh state.
  GnmrController(std::size_t num_units, const Policies& p)
      : GnmrController(num_units, p.norm, p.mean, p.trigger, p.recovery, p.budget, p.opt) {}

  std::size_t num_units() const { return state_.size(); }
  std::int64_t steps_done() const { return step_; }
  const Policies& policies() const { return p_; }
  // The members every controller kind shares (DynController's names, so
  // one piece of code drives a typed, a preset or a layered controller):
  // the policy names ("l2/ema/gnmr/clip_to_mean/maxo"), the budget's slot
  // count, how partials combine across ranks (comm/reducer.hpp), and the
  // state blob (io/state.hpp: save_state / load_state).
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

  // Element count per unit; RmsNorm needs it (others ignore it).
  void set_unit_numel(const std::uint64_t* numel, std::size_t n) {
    check_size(numel, n, "set_unit_numel");
    for (std::size_t i = 0; i < n; ++i)
      if (numel[i] == 0)
        throw std::invalid_argument("gnmr: set_unit_numel: unit " + std::to_string(i) +
                                    " has 0 elements");
    for (std::size_t i = 0; i < n; ++i) numel_[i] = static_cast<double>(numel[i]);
    numel_set_ = true;
  }

  // One step from per-unit *partials* (Norm's sum of squares / max).
  const StepSummary& step(const float* partials, std::size_t n) {
    check_no_aux("step", "step_with_aux");
    finish_into(norms_, partials, n, "step");
    return run_step(false);
  }
  // One step from per-unit partials and the partials of each unit's aux
  // signal (UnitView::aux; the noise-floor trigger's quantization noise:
  // its sum of squares, reduced over ranks like the partials), both
  // finished by the NormPolicy. A trigger that does not read aux ignores it.
  const StepSummary& step_with_aux(const float* partials, const float* aux_partials, std::size_t n) {
    finish_into(norms_, partials, n, "step_with_aux");
    finish_into(aux_, aux_partials, n, "step_with_aux (aux)");
    return run_step(true);
  }
  const StepSummary& step(const std::vector<float>& partials) {
    return step(partials.data(), partials.size());
  }

  // One step from finished norms (one per unit).
  const StepSummary& step_norms(const float* norms, std::size_t n) {
    check_no_aux("step_norms", "step_norms_with_aux");
    check_size(norms, n, "step_norms");
    std::copy(norms, norms + n, norms_.begin());
    return run_step(false);
  }
  // One step from finished norms and finished aux norms (one each per unit).
  const StepSummary& step_norms_with_aux(const float* norms, const float* aux_norms, std::size_t n) {
    check_size(norms, n, "step_norms_with_aux");
    check_size(aux_norms, n, "step_norms_with_aux (aux)");
    std::copy(norms, norms + n, norms_.begin());
    std::copy(aux_norms, aux_norms + n, aux_.begin());
    return run_step(true);
  }
  // Does this controller's trigger read the aux signal (and so refuse
  // step() and step_norms())?
  static constexpr bool needs_aux() { return detail::needs_aux<Trigger>::value; }
  // The finished aux norms of the last step that took them, one per unit
  // (zeros before any): what an aux trace records, so that gnmr-replay
  // --aux steps on the same bits.
  const std::vector<float>& aux_norms() const { return aux_; }
  const StepSummary& step_norms(const std::vector<float>& norms) {
    return step_norms(norms.data(), norms.size());
  }

  const std::vector<UnitDecision>& decisions() const { return decisions_; }
  const std::vector<UnitReport>& reports() const { return reports_; }
  const StepSummary& summary() const { return summary_; }
  const std::vector<UnitState>& unit_states() const { return state_; }
  // The controller's global state (the systemic rule's tracker of the total norm).
  const GlobalState& global_state() const { return global_; }
  // The systemic threshold C (systemic iff more than C units trigger).
  std::uint32_t systemic_threshold() const { return threshold_; }

  // The units whose decision this step carries kPromote, ascending: what the
  // framework's forward pass of the next step routes to higher precision.
  // Built during the step into a buffer reserved at construction (no
  // allocation); valid until the next step, reset or restore.
  const std::vector<std::uint32_t>& promoted_units() const { return promoted_; }

  // Back to the state at construction (unit sizes are kept).
  void reset() {
    std::fill(state_.begin(), state_.end(), Policies::init_unit());
    global_ = init_global();
    step_ = 0;
    summary_ = StepSummary{};
    promoted_.clear();
  }

  // Used by the state blob (gnmr/io/state.hpp): replace the whole state at once.
  void restore(std::vector<UnitState>&& st, std::int64_t step, const GlobalState& global = init_global()) {
    if (st.size() != state_.size())
      throw std::invalid_argument("gnmr: restore: unit count mismatch");
    state_ = std::move(st);
    global_ = global;
    step_ = step;
    summary_ = StepSummary{};
    promoted_.clear();
  }

 private:
  template <class T>
  void check_size(const T* ptr, std::size_t n, const char* what) const {
    if (n != state_.size())
      throw std::invalid_argument(std::string("gnmr: ") + what + ": expected " +
                                  std::to_string(state_.size()) + " values (one per unit), got " +
                                  std::to_string(n));
    if (ptr == nullptr) throw std::invalid_argument(std::string("gnmr: ") + what + ": null input");
  }

  void check_no_aux(const char* what, const char* instead) const {
    if (needs_aux())
      throw std::logic_error(std::string("gnmr: ") + what + ": the " + Trigger::kName +
                             " trigger needs each unit's aux signal: call " + instead + "()");
  }
  void finish_into(std::vector<float>& out, const float* partials, std::size_t n, const char* what) {
    check_size(partials, n, what);
    if (norm_needs_numel<Norm>() && !numel_set_)
      throw std::logic_error(std::string("gnmr: ") + Norm::kName +
                             " norm needs unit sizes: call set_unit_numel() first");
    for (std::size_t i = 0; i < n; ++i) out[i] = p_.norm.finish(partials[i], numel_[i]);
  }

  const StepSummary& run_step(bool with_aux) {
    const std::int64_t t = step_ + 1;
    const std::size_t n = state_.size();
    // A local copy of the policies: nothing the loops store can alias it,
    // so the compiler may hoist what a policy derives from its parameters
    // alone (the calibrated trigger's K = ln(1/rate), log2(floor),
    // log2(ceiling)) out of the per-unit loops. The same values: the same bits.
    const Policies p = p_;
    // Phase 1: each unit evaluated once; its verdict kept for phase 3.
    candidates_.clear();
    std::uint32_t held = 0, triggered = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const UnitView v = detail::evaluate_unit(p, state_[i], norms_[i], t, static_cast<std::uint32_t>(i),
                                               with_aux ? aux_[i] : 0.0f);
      verdicts_[i] = detail::verdict_of(v);
      held += (v.flags & kInRecovery) ? 1u : 0u;
      triggered += (v.flags & kTriggered) ? 1u : 0u;
      if (detail::is_candidate(v.flags)) candidates_.push_back(static_cast<std::uint32_t>(i));
    }
    // Phase 2: the free slots go to the highest risks, ties to the lower index;
    // how many is the device's count (none on a held step, at most max_grants).
    const auto before = [this](std::uint32_t a, std::uint32_t b) {
      return detail::ranks_before(verdicts_[a].risk, a, verdicts_[b].risk, b);
    };
    const std::size_t n_grant = detail::step_grants(
        p_.opt.systemic, threshold_, triggered,
        detail::grants_wanted(p_.budget.slots(), held, static_cast<std::uint32_t>(candidates_.size())));
    if (n_grant > 0 && n_grant < candidates_.size())
      std::nth_element(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(n_grant), candidates_.end(),
                       before);
    for (std::size_t j = 0; j < n_grant; ++j) verdicts_[candidates_[j]].flags |= kGranted;
    // The step-wide systemic outcome (the total norm only for global-clip).
    const float total_sq = detail::needs_total(p_.opt.systemic, p_.opt.warmup_clip)
                               ? static_cast<float>(detail::total_sq_tree(norms_.data(), n, total_scratch_.data()))
                               : 0.0f;
    SystemicStep sys = detail::decide_systemic(p_.opt.systemic, threshold_, triggered, total_sq, global_);
    sys.warm_scale = detail::warmup_clip_scale(p_.opt.warmup_clip, t, total_sq);
    // Phase 3 + 4: commit every unit, then summarise.
    detail::SummaryAcc acc = detail::SummaryAcc::zero();
    promoted_.clear();
    for (std::size_t i = 0; i < n; ++i) {
      // The grant mark rode on the verdict's flags; the view gets it from
      // commit_unit, as on the device.
      const bool granted = (verdicts_[i].flags & kGranted) != 0u;
      std::uint32_t gskip = 0;
      const auto u = static_cast<std::uint32_t>(i);
      detail::UnitVerdict d = verdicts_[i];
      d.flags &= ~kGranted;
      const UnitView v = detail::commit_unit(p, state_[i], detail::view_of(d, norms_[i], t, u, state_[i].budget.granted_at),
                                             granted, sys, decisions_[i], &reports_[i], gskip);
      acc.add(v, u, gskip);
      if (v.flags & kPromote) promoted_.push_back(u);
    }
    step_ = t;
    summary_ = acc.finish(t, sys);
    return summary_;
  }

  Policies p_;
  std::vector<UnitState> state_;
  std::vector<UnitReport> reports_;
  std::vector<UnitDecision> decisions_;
  std::vector<float> norms_;
  std::vector<float> aux_;  // this step's aux norms (step_with_aux)
  std::vector<detail::UnitVerdict> verdicts_;  // phase 1's evaluation of each unit, for phase 3
  std::vector<double> numel_;
  std::vector<std::uint32_t> candidates_;
  std::vector<std::uint32_t> promoted_;
  std::vector<double> total_scratch_;  // the total norm's block sums (global-clip, warm-up clip)
  GlobalState global_ = init_global();
  std::uint32_t threshold_ = 0;
  bool numel_set_ = false;
  std::int64_t step_ = 0;
  StepSummary summary_{};
};

}  // namespace gnmr
