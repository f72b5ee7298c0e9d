// gnmr/cuda/presets.cuh — the presets by name on the device, and a host
// controller's policies moved to a DeviceController.
//
//   auto ctl = gnmr::cuda::make_device("zclip", 1);           // setup
//   ctl->step(d_partials, stream);                            // every step
//   gnmr::cuda::adamw_step(opt, h, ctl->decisions(), stream, nullptr, ctl->summary());
//
// make_device() goes through the same table as presets::make()
// (gnmr/presets/table.hpp): same names, same overrides, same checks, same
// policy values, so a run moved from the CPU to the GPU keeps its method.
// DynDeviceController is the runtime-polymorphic face of every
// DeviceController<...>; its step is the typed controller's (enqueue only,
// no allocation, no synchronisation); the virtual call is once per step.
// save()/load() use the host state blob (gnmr/io/state.hpp), so a checkpoint
// taken on the device loads into the host controller of the same preset and
// back.
//
// Determinism: a DynDeviceController's decisions are the typed
// DeviceController's, which are bit-identical to GnmrController's on the
// same partials (tests/cuda/test_controller.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <string>
#include <utility>
#include <vector>

#include "gnmr/core/types.hpp"
#include "gnmr/cuda/controller.cuh"
#include "gnmr/cuda/dyn_controller.cuh"
#include "gnmr/cuda/layered.cuh"
#include "gnmr/cuda/layered_fused.cuh"
#include "gnmr/host/controller.hpp"
#include "gnmr/host/dyn_controller.hpp"
#include "gnmr/io/state.hpp"
#include "gnmr/presets/table.hpp"

namespace gnmr {
namespace cuda {

template <class N, class M, class T, class R, class B>
class DeviceDynAdapter final : public DynDeviceController {
 public:
  using Device = DeviceController<N, M, T, R, B>;
  using Host = GnmrController<N, M, T, R, B>;

  // The device controller gets the host controller's policies, options and
  // state (unit states and step count; not unit sizes: call set_unit_numel
  // for RmsNorm). Setup time: allocates and uploads.
  DeviceDynAdapter(const Host& host, std::string name)
      : dev_(host.num_units(), host.policies()), name_(std::move(name)) {
    if (host.steps_done() != 0) dev_.restore(host.unit_states(), host.steps_done(), host.global_state());
  }

  using DynDeviceController::load;
  // The default stream is restated: a default argument binds to the static
  // type, and code holding this class itself must be able to omit it.
  cudaError_t step(const float* d, cudaStream_t s = 0) override { return dev_.step(d, s); }
  cudaError_t step_norms(const float* d, cudaStream_t s = 0) override { return dev_.step_norms(d, s); }
  cudaError_t step_with_aux(const float* d, const float* a, cudaStream_t s = 0) override {
    return dev_.step_with_aux(d, a, s);
  }
  cudaError_t step_norms_with_aux(const float* d, const float* a, cudaStream_t s = 0) override {
    return dev_.step_norms_with_aux(d, a, s);
  }
  bool needs_aux() const override { return Device::needs_aux(); }
  const float* aux_norms() const override { return dev_.aux_norms(); }
  std::vector<float> copy_aux_norms() const override { return dev_.copy_aux_norms(); }
  const UnitDecision* decisions() const override { return dev_.decisions(); }
  const UnitReport* reports() const override { return dev_.reports(); }
  const StepSummary* summary() const override { return dev_.summary(); }
  cudaError_t copy_summary_async(StepSummary* h, cudaStream_t s = 0) const override {
    return dev_.copy_summary_async(h, s);
  }
  std::vector<UnitDecision> copy_decisions() const override { return dev_.copy_decisions(); }
  std::vector<UnitReport> copy_reports() const override { return dev_.copy_reports(); }
  StepSummary copy_summary() const override { return dev_.copy_summary(); }
  std::int64_t steps_done() const override { return dev_.steps_done(); }
  const std::int64_t* steps_done_device() const override { return dev_.steps_done_device(); }
  std::size_t num_units() const override { return dev_.num_units(); }
  std::string name() const override { return name_; }
  std::uint32_t max_in_recovery() const override { return dev_.policies().budget.slots(); }
  Combine partial_combine() const override { return N::kCombine; }
  void set_unit_numel(const std::uint64_t* numel, std::size_t n) override { dev_.set_unit_numel(numel, n); }
  void reset() override { dev_.reset(); }

  std::unique_ptr<StateImage> state_image() override { return dev_.state_image(); }
  // The typed overloads of gnmr/cuda/controller.cuh: one blocking copy.
  std::vector<std::uint8_t> save() const override { return save_state(dev_); }
  void load(const void* data, std::size_t size, const StateLoadOptions& opt) override {
    load_state(dev_, data, size, opt);
  }

  Device& controller() { return dev_; }
  const Device& controller() const { return dev_; }

 private:
  Device dev_;
  std::string name_;
};

// Any host controller's policies, options and state, on the device.
template <class N, class M, class T, class R, class B>
std::unique_ptr<DynDeviceController> make_device_dyn(const GnmrController<N, M, T, R, B>& host,
                                                     std::string name = {}) {
  if (name.empty()) name = policy_names<typename GnmrController<N, M, T, R, B>::Policies>();
  return std::unique_ptr<DynDeviceController>(new DeviceDynAdapter<N, M, T, R, B>(host, std::move(name)));
}

// presets::make() on the device: the preset `name` with the overrides in
// `o`, as a DeviceController behind DynDeviceController. Throws what
// presets::make throws, and gnmr::cuda::Error when the device allocation
// or upload fails. "outer+inner" makes a LayeredDeviceController
// (gnmr/cuda/layered.cuh), as presets::make makes a LayeredController.
namespace detail {

// The typed host controller of preset `name` when its type is C (nullopt
// otherwise): with_preset's table, without instantiating anything per type
// but a type test.
template <class C>
std::optional<C> typed_preset(const std::string& name, std::size_t n, const presets::Options& o) {
  std::optional<C> out;
  presets::with_preset(name, n, o, [&out](auto c) {
    if constexpr (std::is_same<decltype(c), C>::value) out.emplace(std::move(c));
    return 0;
  });
  return out;
}

// The layered pairs make_device steps fused (layered_fused.cuh): the
// default preset, and the pair it replaced. Others, and any pair whose
// outer is not selection-free after the overrides, get the generic
// LayeredDeviceController. Returns null when the pair is not fused.
template <class O, class I>
std::unique_ptr<DynDeviceController> try_fused(const presets::LayeredPlan& l, std::size_t n, const std::string& name) {
  if (l.outer_units != n) return nullptr;
  std::optional<O> outer = typed_preset<O>(l.names.outer, n, l.outer);
  std::optional<I> inner = typed_preset<I>(l.names.inner, n, l.inner);
  if (!outer || !inner || !selection_free(outer->policies())) return nullptr;
  using DevO = DeviceController<typename O::Policies::NormT, typename O::Policies::MeanT, typename O::Policies::TriggerT,
                                typename O::Policies::RecoveryT, typename O::Policies::BudgetT>;
  using DevI = DeviceController<typename I::Policies::NormT, typename I::Policies::MeanT, typename I::Policies::TriggerT,
                                typename I::Policies::RecoveryT, typename I::Policies::BudgetT>;
  return std::unique_ptr<DynDeviceController>(
      new FusedLayeredDeviceController<DevO, DevI>(*outer, *inner, ScaleCombine::kProduct, name));
}

}  // namespace detail

inline std::unique_ptr<DynDeviceController> make_device(const std::string& name, std::size_t num_units,
                                                        const presets::Options& o = {}) {
  if (presets::is_layered(name)) {
    const presets::LayeredPlan l = presets::plan_layered(name, num_units, o);
    if (l.names.outer == "stabilizer" && l.names.inner == "gnmr-calibrated") {
      if (auto f = detail::try_fused<presets::Stabilizer, presets::GnmrCalibrated>(l, num_units, name)) return f;
    } else if (l.names.outer == "stabilizer" && l.names.inner == "gnmr-promote") {
      if (auto f = detail::try_fused<presets::Stabilizer, presets::GnmrPromote>(l, num_units, name)) return f;
    }
    return std::unique_ptr<DynDeviceController>(
        new LayeredDeviceController(make_device(l.names.outer, l.outer_units, l.outer),
                                    make_device(l.names.inner, num_units, l.inner), ScaleCombine::kProduct, name));
  }
  return presets::with_preset(name, num_units, o, [&name](auto c) { return make_device_dyn(c, name); });
}

// The recommended controller on the device (gnmr::make_default on the
// host): the preset "default" as DefaultDeviceController, the stabilizer
// stepped per unit inside the calibrated trigger's two launches. Setup
// time: allocates and uploads; its step allocates nothing and never syncs.
using DefaultDeviceController = FusedLayeredDeviceController<
    DeviceController<presets::Stabilizer::Policies::NormT, presets::Stabilizer::Policies::MeanT,
                     presets::Stabilizer::Policies::TriggerT, presets::Stabilizer::Policies::RecoveryT,
                     presets::Stabilizer::Policies::BudgetT>,
    DeviceController<presets::GnmrCalibrated::Policies::NormT, presets::GnmrCalibrated::Policies::MeanT,
                     presets::GnmrCalibrated::Policies::TriggerT, presets::GnmrCalibrated::Policies::RecoveryT,
                     presets::GnmrCalibrated::Policies::BudgetT>>;

inline std::unique_ptr<DefaultDeviceController> make_default(std::size_t num_units, const presets::Options& o = {}) {
  const presets::LayeredPlan l = presets::plan_layered(presets::kDefaultPreset, num_units, o);
  std::optional<presets::Stabilizer> outer = detail::typed_preset<presets::Stabilizer>(l.names.outer, num_units, l.outer);
  std::optional<presets::GnmrCalibrated> inner =
      detail::typed_preset<presets::GnmrCalibrated>(l.names.inner, num_units, l.inner);
  if (!outer || !inner)
    throw std::logic_error("gnmr: cuda::make_default: the default preset is no longer stabilizer+gnmr-calibrated");
  return std::unique_ptr<DefaultDeviceController>(
      new DefaultDeviceController(*outer, *inner, ScaleCombine::kProduct, "default"));
}

}  // namespace cuda
}  // namespace gnmr
