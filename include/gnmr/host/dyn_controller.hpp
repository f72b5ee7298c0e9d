// gnmr/host/dyn_controller.hpp — DynController: one runtime-polymorphic face for every
// controller type.
//
// GnmrController is a template over five policies, which is what lets the
// CUDA kernels inline them; a framework binding, a CLI or a replay tool
// instead wants to pick a method by name at run time (gnmr::presets::make)
// and hold it behind one pointer. DynAdapter<C> wraps any GnmrController
// instantiation behind that interface. The virtual call costs one indirect
// call per *step*, not per unit, so it is free next to the step itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gnmr/core/types.hpp"
#include "gnmr/io/state.hpp"
#include "gnmr/policy/norm.hpp"

namespace gnmr {

class DynController {
 public:
  virtual ~DynController() = default;

  // One step from per-unit partials (the NormPolicy's sum of squares / max).
  virtual const StepSummary& step(const float* partials, std::size_t n) = 0;
  // One step from finished norms, one per unit.
  virtual const StepSummary& step_norms(const float* norms, std::size_t n) = 0;
  // One step with each unit's aux signal too (GnmrController::step_with_aux,
  // UnitView::aux). Every typed controller takes it (a trigger that does not
  // read aux ignores it); the layered controllers do not (they throw
  // std::logic_error).
  virtual const StepSummary& step_with_aux(const float* partials, const float* aux_partials, std::size_t n) {
    (void)partials, (void)aux_partials, (void)n;
    throw std::logic_error("gnmr: " + name() + ": this controller kind takes no aux signal");
  }
  virtual const StepSummary& step_norms_with_aux(const float* norms, const float* aux_norms, std::size_t n) {
    (void)norms, (void)aux_norms, (void)n;
    throw std::logic_error("gnmr: " + name() + ": this controller kind takes no aux signal");
  }
  // Does the trigger need the aux signal (step() and step_norms() refuse)?
  virtual bool needs_aux() const { return false; }
  // The last aux-taking step's finished aux norms (GnmrController::aux_norms:
  // zeros before any); empty for the layered kinds, which take no aux.
  virtual const std::vector<float>& aux_norms() const {
    static const std::vector<float> none;
    return none;
  }
  const StepSummary& step(const std::vector<float>& partials) {
    return step(partials.data(), partials.size());
  }
  const StepSummary& step_norms(const std::vector<float>& norms) {
    return step_norms(norms.data(), norms.size());
  }

  virtual const std::vector<UnitDecision>& decisions() const = 0;
  virtual const std::vector<UnitReport>& reports() const = 0;
  virtual const StepSummary& summary() const = 0;
  // The units with kPromote this step, ascending (GnmrController::promoted_units).
  virtual const std::vector<std::uint32_t>& promoted_units() const = 0;
  virtual std::size_t num_units() const = 0;
  virtual std::int64_t steps_done() const = 0;
  // The preset name for make()'s products; the policy names otherwise
  // ("l2/ema/gnmr/clip_to_mean/maxo").
  virtual std::string name() const = 0;
  // The budget's slot count: how many units may be in recovery at once
  // (0xffffffff for an unlimited budget).
  virtual std::uint32_t max_in_recovery() const = 0;
  // How this controller's partials combine across ranks: Combine::kSum for
  // sums of squares (L2, RMS), kMax for Linf's max (reduce_and_step and
  // ReducedController read it, gnmr/comm/reducer.hpp).
  virtual Combine partial_combine() const = 0;

  // Versioned state blob (gnmr/io/state.hpp). load() throws gnmr::StateError
  // on a truncated, corrupted or mismatched blob and then changes nothing.
  virtual std::vector<std::uint8_t> save() const = 0;
  virtual void load(const void* data, std::size_t size, const StateLoadOptions& opt) = 0;
  // The size of save()'s blob (fixed for a controller), and save() into a
  // caller's buffer of exactly that size: the same bytes, and for every
  // controller kind the library builds (typed, layered) no allocation, so a
  // framework that keeps the state in its own buffer can save it every step
  // (gnmr_jax does). A size other than state_bytes() throws
  // std::invalid_argument and writes nothing.
  virtual std::size_t state_bytes() const { return save().size(); }
  virtual void save_into(void* out, std::size_t size) const {
    const std::vector<std::uint8_t> blob = save();
    detail::check_save_size(blob.size(), size, name());
    std::memcpy(out, blob.data(), blob.size());
  }
  void load(const void* data, std::size_t size) { load(data, size, StateLoadOptions{}); }
  void load(const std::vector<std::uint8_t>& blob, const StateLoadOptions& opt = {}) {
    load(blob.data(), blob.size(), opt);
  }

  // Element count per unit (RmsNorm needs it; other norms ignore it).
  virtual void set_unit_numel(const std::uint64_t* numel, std::size_t n) = 0;
  void set_unit_numel(const std::vector<std::uint64_t>& numel) {
    set_unit_numel(numel.data(), numel.size());
  }
  // Back to the state at construction (unit sizes are kept).
  virtual void reset() = 0;
};

// Any GnmrController behind the DynController interface.
template <class C>
class DynAdapter final : public DynController {
 public:
  explicit DynAdapter(C controller,
                      std::string name = policy_names<typename C::Policies>())
      : c_(std::move(controller)), name_(std::move(name)) {}

  using DynController::load;
  using DynController::set_unit_numel;
  using DynController::step;
  using DynController::step_norms;

  const StepSummary& step(const float* partials, std::size_t n) override {
    return c_.step(partials, n);
  }
  const StepSummary& step_norms(const float* norms, std::size_t n) override {
    return c_.step_norms(norms, n);
  }
  const StepSummary& step_with_aux(const float* partials, const float* aux_partials, std::size_t n) override {
    return c_.step_with_aux(partials, aux_partials, n);
  }
  const StepSummary& step_norms_with_aux(const float* norms, const float* aux_norms, std::size_t n) override {
    return c_.step_norms_with_aux(norms, aux_norms, n);
  }
  bool needs_aux() const override { return C::needs_aux(); }
  const std::vector<float>& aux_norms() const override { return c_.aux_norms(); }
  const std::vector<UnitDecision>& decisions() const override { return c_.decisions(); }
  const std::vector<UnitReport>& reports() const override { return c_.reports(); }
  const StepSummary& summary() const override { return c_.summary(); }
  const std::vector<std::uint32_t>& promoted_units() const override { return c_.promoted_units(); }
  std::size_t num_units() const override { return c_.num_units(); }
  std::int64_t steps_done() const override { return c_.steps_done(); }
  std::string name() const override { return name_; }
  std::uint32_t max_in_recovery() const override { return c_.policies().budget.slots(); }
  Combine partial_combine() const override { return C::Policies::NormT::kCombine; }
  std::vector<std::uint8_t> save() const override { return save_state(c_); }
  std::size_t state_bytes() const override {
    return writer_.num_units() == c_.num_units() ? writer_.bytes() : DynController::state_bytes();
  }
  void save_into(void* out, std::size_t size) const override {
    // The writer is the constructed controller's: if controller() was
    // assigned one over another unit count, the generic (allocating) path.
    if (writer_.num_units() != c_.num_units()) return DynController::save_into(out, size);
    detail::check_save_size(writer_.bytes(), size, name_);
    writer_.write(c_.unit_states().data(), c_.steps_done(), c_.global_state(), static_cast<std::uint8_t*>(out));
  }
  void load(const void* data, std::size_t size, const StateLoadOptions& opt) override {
    load_state(c_, data, size, opt);
  }
  void set_unit_numel(const std::uint64_t* numel, std::size_t n) override {
    c_.set_unit_numel(numel, n);
  }
  void reset() override { c_.reset(); }

  // The typed controller, for code that knows what it holds. (save_into's
  // writer is built from its policies at construction: replace it only by a
  // controller with the same policies.)
  C& controller() { return c_; }
  const C& controller() const { return c_; }

 private:
  C c_;
  std::string name_;
  detail::StateBlobWriter<typename C::Policies> writer_{c_.policies(), c_.num_units()};
};

// gnmr::save_state / load_state on any DynController (make_default's,
// presets::make's, a LayeredController): its own save() / load(), so the
// typed controllers' free functions take every controller kind.
inline std::vector<std::uint8_t> save_state(const DynController& controller) { return controller.save(); }
inline void load_state(DynController& controller, const void* data, std::size_t size,
                       const StateLoadOptions& opt = {}) {
  controller.load(data, size, opt);
}
inline void load_state(DynController& controller, const std::vector<std::uint8_t>& blob,
                       const StateLoadOptions& opt = {}) {
  controller.load(blob.data(), blob.size(), opt);
}

template <class C>
std::unique_ptr<DynController> make_dyn(C controller, std::string name = {}) {
  if (name.empty()) name = policy_names<typename C::Policies>();
  return std::unique_ptr<DynController>(new DynAdapter<C>(std::move(controller), std::move(name)));
}

}  // namespace gnmr
