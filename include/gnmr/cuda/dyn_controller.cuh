// gnmr/cuda/dyn_controller.cuh — DynDeviceController: the runtime-polymorphic
// face of every device controller (DeviceController<...> behind
// DeviceDynAdapter, gnmr/cuda/presets.cuh; LayeredDeviceController,
// gnmr/cuda/layered.cuh), the device twin of gnmr::DynController.
//
// Determinism: an interface; each implementation states its own.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gnmr/core/types.hpp"
#include "gnmr/host/state_image.hpp"
#include "gnmr/io/state.hpp"
#include "gnmr/policy/norm.hpp"

namespace gnmr {
namespace cuda {

class DynDeviceController {
 public:
  virtual ~DynDeviceController() = default;

  // One step from per-unit partials / finished norms in device memory, on
  // `stream`. Enqueue only; returns the launch error.
  virtual cudaError_t step(const float* d_partials, cudaStream_t stream = 0) = 0;
  virtual cudaError_t step_norms(const float* d_norms, cudaStream_t stream = 0) = 0;
  // The same with each unit's aux signal (DeviceController::step_with_aux).
  // Every typed controller takes it; the layered ones do not (they throw
  // std::logic_error).
  virtual cudaError_t step_with_aux(const float* d_partials, const float* d_aux_partials,
                                    cudaStream_t stream = 0) {
    (void)d_partials, (void)d_aux_partials, (void)stream;
    throw std::logic_error("gnmr: " + name() + ": this device controller kind takes no aux signal");
  }
  virtual cudaError_t step_norms_with_aux(const float* d_norms, const float* d_aux_norms,
                                          cudaStream_t stream = 0) {
    (void)d_norms, (void)d_aux_norms, (void)stream;
    throw std::logic_error("gnmr: " + name() + ": this device controller kind takes no aux signal");
  }
  // Does the trigger need the aux signal (step() and step_norms() refuse)?
  virtual bool needs_aux() const { return false; }
  // The finished aux norms the last step evaluated, in device memory, one
  // per unit (DeviceController::aux_norms); null where the trigger reads no
  // aux.
  virtual const float* aux_norms() const { return nullptr; }
  // The same, copied to the host (blocking; empty where the trigger reads
  // no aux).
  virtual std::vector<float> copy_aux_norms() const { return {}; }

  // Device arrays, valid once the step that wrote them has run.
  virtual const UnitDecision* decisions() const = 0;
  virtual const UnitReport* reports() const = 0;
  virtual const StepSummary* summary() const = 0;
  virtual cudaError_t copy_summary_async(StepSummary* host, cudaStream_t stream = 0) const = 0;

  // Blocking copies (tests, logs, checkpoints): they synchronise.
  virtual std::vector<UnitDecision> copy_decisions() const = 0;
  virtual std::vector<UnitReport> copy_reports() const = 0;
  virtual StepSummary copy_summary() const = 0;
  virtual std::int64_t steps_done() const = 0;

  // The step counter on the device (the summary's step after the last
  // step ran): for kernels of yours that need it without a sync.
  virtual const std::int64_t* steps_done_device() const = 0;

  virtual std::size_t num_units() const = 0;
  virtual std::string name() const = 0;
  virtual std::uint32_t max_in_recovery() const = 0;  // 0xffffffff: unlimited
  // How partials combine across ranks (kSum: L2/RMS, kMax: Linf); the
  // device reduce_and_step (gnmr/comm/reducer.hpp) reads it.
  virtual Combine partial_combine() const = 0;
  virtual void set_unit_numel(const std::uint64_t* numel, std::size_t n) = 0;
  virtual void reset() = 0;  // synchronous

  // This controller's state as an image of its device regions and the
  // codec between it and the blob (gnmr/host/state_image.hpp): what
  // StateStage (gnmr/cuda/state_stage.cuh) loads and saves on a stream.
  // Every kind the library builds has one; the regions stay valid for the
  // controller's lifetime. Setup time.
  virtual std::unique_ptr<StateImage> state_image() {
    throw std::logic_error("gnmr: " + name() + ": this device controller kind has no state image");
  }

  // The host state blob; load() throws gnmr::StateError on a bad blob and
  // then changes nothing. Both synchronise.
  virtual std::vector<std::uint8_t> save() const = 0;
  virtual void load(const void* data, std::size_t size, const StateLoadOptions& opt) = 0;
  void load(const void* data, std::size_t size) { load(data, size, StateLoadOptions{}); }
  void load(const std::vector<std::uint8_t>& blob, const StateLoadOptions& opt = {}) {
    load(blob.data(), blob.size(), opt);
  }
};

}  // namespace cuda

// gnmr::save_state / load_state on any DynDeviceController (the typed
// DeviceController's free functions, gnmr/cuda/controller.cuh, for every
// device controller kind: make_device's, the layered and fused ones, so
// gnmr::cuda::make_default's). Both synchronise.
inline std::vector<std::uint8_t> save_state(const cuda::DynDeviceController& c) { return c.save(); }
inline void load_state(cuda::DynDeviceController& c, const void* data, std::size_t size,
                       const StateLoadOptions& opt = {}) {
  c.load(data, size, opt);
}
inline void load_state(cuda::DynDeviceController& c, const std::vector<std::uint8_t>& blob,
                       const StateLoadOptions& opt = {}) {
  c.load(blob.data(), blob.size(), opt);
}

}  // namespace gnmr
