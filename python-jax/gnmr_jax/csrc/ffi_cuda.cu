// python-jax/gnmr_jax/csrc/ffi_cuda.cu — the CUDA handler of gnmr_jax's
// controller step (GnmrJaxStepCuda, registered as "gnmr_jax_step" for the
// CUDA platform when setup.py built it). Compiled with nvcc here
// (tests/jax/test_cuda_build.py); it has not run yet: awaiting a GPU run.
//
// Same signature as the CPU handler (ffi_cpu.cpp): partials float32[N] and
// the state blob uint8[B] in device memory; the new blob (aliased to the
// input), the decisions (scale float32[N], flags uint32[N]) and the summary
// (int32[10], float32[4]). The step itself is the library's device
// controller (gnmr::cuda::make_device, "default" fused as
// gnmr::cuda::make_default builds it) enqueued on the stream XLA gives the
// call (PlatformStream<cudaStream_t>): its decisions are the host's bit for
// bit on the same partials (docs/cuda.md).
//
// The state, without a host synchronisation: gnmr::cuda::StateStage
// (gnmr/cuda/state_stage.cuh) loads the blob into the controller and saves
// the new state into the output blob, on the stream: the blob is copied to
// pinned memory, and a host function the stream runs in order compares it
// with the blob the slot wrote last (a training loop's case: nothing to
// decode) or checks and decodes it in full (a restore); the new blob is
// encoded by another host function (save_state's bytes). The calling
// thread never waits. A blob that does not load cannot be reported by this
// call (its check runs later, on the stream): nothing is copied into the
// controller or the output blob (which, aliased, keeps its bytes), every
// unit's decision is SKIP (so no update reaches the weights), the summary
// says skip_step, and the next call of the same slot returns the library's
// message as an error. To catch a bad restored state at once, check it on
// the host first: gnmr_jax.steps_done(state, guard) (docs/jax.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "common.hpp"
#include "gnmr/cuda/presets.cuh"
#include "gnmr/cuda/state_stage.cuh"
#include "gnmr/io/state.hpp"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace gnmr_jax {

using F32Vec = ffi::Buffer<ffi::F32, 1>;
using U8Vec = ffi::Buffer<ffi::U8, 1>;
using U32Vec = ffi::Buffer<ffi::U32, 1>;
using S32Vec = ffi::Buffer<ffi::S32, 1>;

namespace {

// A device controller, its state stage, and an event ordering the slot's
// calls across streams (the decisions buffer is the controller's).
struct DeviceSlot {
  std::unique_ptr<gnmr::cuda::DynDeviceController> ctl;
  std::unique_ptr<gnmr::cuda::StateStage> stage;
  cudaEvent_t done = nullptr;
  ~DeviceSlot() {
    if (done) {
      cudaEventSynchronize(done);
      cudaEventDestroy(done);
    }
    stage.reset();  // before the controller whose regions it copies
  }
};

Pool<DeviceSlot>& device_pool() {
  static Pool<DeviceSlot>* pool = new Pool<DeviceSlot>();  // leaked: no CUDA calls at exit
  return *pool;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Decisions (interleaved scale, flags) and the summary into the outputs;
// after a load that failed (*status != kOk) every unit SKIP and the summary
// skip_step alone.
__global__ void unpack(const gnmr::UnitDecision* d, const gnmr::StepSummary* s, std::size_t n, float* scale,
                       std::uint32_t* flags, std::int32_t* counts, float* values,
                       const volatile std::uint32_t* status) {
  const bool failed = *status != gnmr::StageCore::kOk;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    scale[i] = failed ? 1.0f : d[i].scale;
    flags[i] = failed ? static_cast<std::uint32_t>(gnmr::kSkip) : d[i].flags;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    if (failed) {
      gnmr::StepSummary z{};
      z.skip_step = 1;
      write_summary(z, counts, values);
    } else {
      write_summary(*s, counts, values);
    }
  }
}

ffi::Error step_impl(cudaStream_t stream, std::int32_t device, F32Vec partials, U8Vec state,
                     std::string_view preset_v, std::string_view options_v, ffi::Result<U8Vec> state_out,
                     ffi::Result<F32Vec> scale, ffi::Result<U32Vec> flags, ffi::Result<S32Vec> counts,
                     ffi::Result<F32Vec> values) {
  const std::size_t n = partials.element_count();
  const std::size_t bytes = state.element_count();
  if (n == 0) return ffi::Error::InvalidArgument("gnmr_jax: no units (an empty partials array)");
  if (scale->element_count() != n || flags->element_count() != n)
    return ffi::Error::InvalidArgument("gnmr_jax: the decision arrays must have one entry per unit");
  if (counts->element_count() != kCounts || values->element_count() != kValues)
    return ffi::Error::InvalidArgument("gnmr_jax: the summary arrays have the wrong size");
  if (state_out->element_count() != bytes)
    return ffi::Error::InvalidArgument("gnmr_jax: the output state must have the input state's size");
  try {
    check(cudaSetDevice(device), "cudaSetDevice");
    thread_local std::string key;
    pool_key_into(key, preset_v, options_v, n);
    key += '\0';
    key += std::to_string(device);
    Lease<DeviceSlot> slot(device_pool(), key, device_pool().take(key, [&] {
      std::unique_ptr<DeviceSlot> s(new DeviceSlot());
      s->ctl = gnmr::cuda::make_device(std::string(preset_v), n, parse_options(std::string(options_v)));
      s->stage.reset(new gnmr::cuda::StateStage(*s->ctl));
      check(cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming), "cudaEventCreate");
      return s;
    }));
    // A load that failed in an earlier call of this slot: its message now.
    const std::string failed = slot->stage->take_error();
    if (!failed.empty())
      return ffi::Error::InvalidArgument("gnmr_jax: the guard's state (an earlier step): " + failed);
    if (slot->stage->blob_bytes() != bytes)
      return ffi::Error::InvalidArgument("gnmr_jax: the guard's state: the state array has " + std::to_string(bytes) +
                                         " bytes, this guard's state " + std::to_string(slot->stage->blob_bytes()) +
                                         " (a state of another configuration or format: re-create it with the "
                                         "guard's init)");
    check(cudaStreamWaitEvent(stream, slot->done, 0), "cudaStreamWaitEvent");
    // Load before anything is written: the output may be the input's buffer.
    check(slot->stage->load_async(state.typed_data(), bytes, stream), "state load");
    check(slot->ctl->step(partials.typed_data(), stream), "device step");
    check(slot->stage->save_async(state_out->typed_data(), bytes, stream), "state save");
    const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>((n + 255) / 256, 1024));
    unpack<<<blocks, 256, 0, stream>>>(slot->ctl->decisions(), slot->ctl->summary(), n, scale->typed_data(),
                                       flags->typed_data(), counts->typed_data(), values->typed_data(),
                                       reinterpret_cast<const volatile std::uint32_t*>(slot->stage->status_device()));
    check(cudaGetLastError(), "unpack launch");
    check(cudaEventRecord(slot->done, stream), "cudaEventRecord");
  } catch (const gnmr::StateError& e) {
    return ffi::Error::InvalidArgument(std::string("gnmr_jax: the guard's state: ") + e.what());
  } catch (const std::invalid_argument& e) {
    return ffi::Error::InvalidArgument(e.what());
  } catch (const std::exception& e) {
    return ffi::Error::Internal(std::string("gnmr_jax: ") + e.what());
  }
  return ffi::Error::Success();
}

}  // namespace
}  // namespace gnmr_jax

extern "C" __attribute__((visibility("default"))) XLA_FFI_Error* GnmrJaxStepCuda(XLA_FFI_CallFrame* call_frame);

XLA_FFI_DEFINE_HANDLER_SYMBOL(GnmrJaxStepCuda, gnmr_jax::step_impl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<gnmr_jax::F32Vec>()
                                  .Arg<gnmr_jax::U8Vec>()
                                  .Attr<std::string_view>("preset")
                                  .Attr<std::string_view>("options")
                                  .Ret<gnmr_jax::U8Vec>()
                                  .Ret<gnmr_jax::F32Vec>()
                                  .Ret<gnmr_jax::U32Vec>()
                                  .Ret<gnmr_jax::S32Vec>()
                                  .Ret<gnmr_jax::F32Vec>());
