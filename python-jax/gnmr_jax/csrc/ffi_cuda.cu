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
// The state: the device controller keeps its state in its own device
// buffers and reads and writes the canonical blob only through save() and
// load(), which copy through the host and synchronise the device. So each
// call costs, besides the step's two launches: one blob download (to load),
// the step, and one save (a device barrier and a download) plus an
// asynchronous upload of the new blob. That is correct but syncs the host
// twice a step; a sync-free path needs the core to save into and load from
// a device buffer on a stream (docs/jax.md, "On the GPU"; the report that
// brought this file names the API). The decisions and the summary are
// copied device to device on the stream, no host involved.
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
#include "gnmr/io/state.hpp"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace gnmr_jax {

using F32Vec = ffi::Buffer<ffi::F32, 1>;
using U8Vec = ffi::Buffer<ffi::U8, 1>;
using U32Vec = ffi::Buffer<ffi::U32, 1>;
using S32Vec = ffi::Buffer<ffi::S32, 1>;

namespace {

// A device controller with its pinned staging buffer for the blob.
struct DeviceSlot {
  std::unique_ptr<gnmr::cuda::DynDeviceController> ctl;
  std::uint8_t* pinned = nullptr;  // cudaMallocHost, `bytes` long
  std::size_t bytes = 0;
  cudaEvent_t upload_done = nullptr;  // the last upload from `pinned` finished
  ~DeviceSlot() {
    if (upload_done) {
      cudaEventSynchronize(upload_done);
      cudaEventDestroy(upload_done);
    }
    if (pinned) cudaFreeHost(pinned);
  }
};

Pool<DeviceSlot>& device_pool() {
  static Pool<DeviceSlot>* pool = new Pool<DeviceSlot>();  // leaked: no CUDA calls at exit
  return *pool;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Decisions (interleaved scale, flags) and the summary into the outputs.
__global__ void unpack(const gnmr::UnitDecision* d, const gnmr::StepSummary* s, std::size_t n, float* scale,
                       std::uint32_t* flags, std::int32_t* counts, float* values) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    scale[i] = d[i].scale;
    flags[i] = d[i].flags;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) write_summary(*s, counts, values);
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
  const std::string preset(preset_v), options(options_v);
  try {
    check(cudaSetDevice(device), "cudaSetDevice");
    const std::string key = std::to_string(device) + '\0' + pool_key(preset, options, n);
    Lease<DeviceSlot> slot(device_pool(), key, device_pool().take(key, [&] {
      std::unique_ptr<DeviceSlot> s(new DeviceSlot());
      s->ctl = gnmr::cuda::make_device(preset, n, parse_options(options));
      check(cudaMallocHost(reinterpret_cast<void**>(&s->pinned), bytes), "cudaMallocHost");
      s->bytes = bytes;
      check(cudaEventCreateWithFlags(&s->upload_done, cudaEventDisableTiming), "cudaEventCreate");
      return s;
    }));
    if (slot->bytes != bytes) return ffi::Error::Internal("gnmr_jax: a pooled controller of another state size");
    // The staging buffer is free once its previous upload ran.
    check(cudaEventSynchronize(slot->upload_done), "cudaEventSynchronize");
    // Load: the blob to the host (the stream orders it after its producer).
    check(cudaMemcpyAsync(slot->pinned, state.typed_data(), bytes, cudaMemcpyDeviceToHost, stream), "download state");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    slot->ctl->load(slot->pinned, bytes);  // throws StateError, controller unchanged
    check(slot->ctl->step(partials.typed_data(), stream), "device step");
    // save() waits for the device (a barrier), so it sees the step.
    const std::vector<std::uint8_t> blob = slot->ctl->save();
    if (blob.size() != bytes)
      return ffi::Error::Internal("gnmr_jax: the saved state has " + std::to_string(blob.size()) +
                                  " bytes, the state array " + std::to_string(bytes));
    std::memcpy(slot->pinned, blob.data(), bytes);
    check(cudaMemcpyAsync(state_out->typed_data(), slot->pinned, bytes, cudaMemcpyHostToDevice, stream),
          "upload state");
    check(cudaEventRecord(slot->upload_done, stream), "cudaEventRecord");
    const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>((n + 255) / 256, 1024));
    unpack<<<blocks, 256, 0, stream>>>(slot->ctl->decisions(), slot->ctl->summary(), n, scale->typed_data(),
                                       flags->typed_data(), counts->typed_data(), values->typed_data());
    check(cudaGetLastError(), "unpack launch");
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
