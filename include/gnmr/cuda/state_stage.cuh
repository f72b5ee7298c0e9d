// gnmr/cuda/state_stage.cuh — StateStage: a device controller's state
// loaded from, and saved into, a state blob that lives in device memory,
// enqueued on a stream: no host synchronisation and no allocation per call.
//
//   gnmr::cuda::StateStage stage(*ctl);               // setup: pinned buffers, a blocking copy
//   stage.load_async(d_blob, bytes, stream);          // the blob's state into the controller
//   ctl->step(d_partials, stream);
//   stage.save_async(d_blob, bytes, stream);          // the new state into the blob
//
// Why: a framework that keeps gnmr's state in its own array (gnmr_jax keeps
// the blob in a JAX uint8 array and passes it through every step) needs the
// blob in device memory each step; the controllers' save()/load() copy
// through the host and synchronise the device, which stalls the host's
// queue of work every step.
//
// How: the controller's state is a few device regions (its unit states,
// global state and step counter; a layered controller's two sets:
// DynDeviceController::state_image()). On the stream, in order:
//   load: the blob is copied to pinned memory; a host function
//         (cudaLaunchHostFunc) compares it with the last blob this stage
//         wrote or loaded and, only if it differs, checks and decodes it
//         (gnmr::StageCore, gnmr/host/state_image.hpp); a kernel copies the
//         decoded image into the regions.
//   save: a kernel copies the regions into the pinned image; a host
//         function encodes the blob (save_state's bytes, checksum
//         included); a kernel copies it into the caller's blob.
// The pinned buffers are mapped into the device's address space, so the
// copy kernels read a status word the host function wrote: a blob that does
// not load sets it, nothing is copied either way (the controller and the
// caller's blob keep their bytes), and take_error() returns load_state's
// message once the stream has run that far. The controller's step still runs
// after a failed load, on the state the controller held: its decisions and
// summary must not be applied then. Gate them on status_device() in your
// kernels (gnmr_jax's handler turns every unit's decision into SKIP); the
// next good load puts the controller back to that blob's state.
// The host functions run on the CUDA driver's thread: they delay the
// stream by their run time (a compare of the blob in a loop; a checksum of
// it in a save), but the calling thread never waits.
//
// Determinism: the blob saved is save_state's for the same state, bit for
// bit (the same encoder), and a load is load_state's checks and values
// (the summary is not zeroed as restore() does: the next step writes it).
// Setup (the constructor) allocates and synchronises; load_async and
// save_async only enqueue. Cost: the state crosses the bus four times a step
// (mapped copies, 16 bytes a thread) and the host encodes the blob once.
// Streams: a stage may be used from several streams; each call waits (on
// the device) for the stage's previous call. The controller's step must be
// ordered by the caller, as always.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "gnmr/cuda/dyn_controller.cuh"
#include "gnmr/cuda/error.cuh"
#include "gnmr/cuda/memory.cuh"
#include "gnmr/host/state_image.hpp"

namespace gnmr {
namespace cuda {

namespace detail {

struct StageRegions {
  void* dev[StateImage::kMaxRegions];
  std::size_t off[StateImage::kMaxRegions];
  std::size_t bytes[StateImage::kMaxRegions];
  unsigned count;
};

// n bytes from src to dst by the whole grid: 16 bytes at a time where both
// are 16-byte aligned (the image's regions, cudaMalloc'd state, pinned
// buffers), the tail and any unaligned pair byte by byte.
__device__ inline void stage_copy_bytes(std::uint8_t* dst, const std::uint8_t* src, std::size_t n) {
  const std::size_t tid = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  std::size_t done = 0;
  if (((reinterpret_cast<std::uintptr_t>(dst) | reinterpret_cast<std::uintptr_t>(src)) & 15u) == 0) {
    const std::size_t words = n / 16;
    uint4* d = reinterpret_cast<uint4*>(dst);
    const uint4* s = reinterpret_cast<const uint4*>(src);
    for (std::size_t i = tid; i < words; i += stride) d[i] = s[i];
    done = words * 16;
  }
  for (std::size_t i = done + tid; i < n; i += stride) dst[i] = src[i];
}

// image <-> regions (to_device: image into the regions), if *status is kOk.
// (Templates, as every kernel of this header-only library: one definition
// however many translation units include it.)
template <class = void>
__global__ void stage_copy_regions(StageRegions r, std::uint8_t* image, const volatile std::uint32_t* status,
                                   bool to_device) {
  if (*status != StageCore::kOk) return;
  for (unsigned k = 0; k < r.count; ++k) {
    std::uint8_t* d = static_cast<std::uint8_t*>(r.dev[k]);
    std::uint8_t* h = image + r.off[k];
    if (to_device)
      stage_copy_bytes(d, h, r.bytes[k]);
    else
      stage_copy_bytes(h, d, r.bytes[k]);
  }
}

template <class = void>
__global__ void stage_copy_blob(const std::uint8_t* src, std::uint8_t* dst, std::size_t n,
                                const volatile std::uint32_t* status) {
  if (*status != StageCore::kOk) return;
  stage_copy_bytes(dst, src, n);
}

// Pinned host memory mapped into the device's address space.
class MappedBuffer {
 public:
  MappedBuffer() = default;
  explicit MappedBuffer(std::size_t bytes) : bytes_(bytes) {
    check(cudaHostAlloc(reinterpret_cast<void**>(&host_), bytes ? bytes : 1, cudaHostAllocMapped),
          "StateStage: cudaHostAlloc");
    check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev_), host_, 0), "StateStage: cudaHostGetDevicePointer");
  }
  ~MappedBuffer() {
    if (host_) cudaFreeHost(host_);
  }
  MappedBuffer(const MappedBuffer&) = delete;
  MappedBuffer& operator=(const MappedBuffer&) = delete;
  std::uint8_t* host() const { return host_; }
  std::uint8_t* dev() const { return dev_; }

 private:
  std::uint8_t* host_ = nullptr;
  std::uint8_t* dev_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace detail

class StateStage {
 public:
  // Setup: allocates the pinned buffers and takes the controller's state as
  // it is now (a blocking copy after a device barrier). `ctl` must outlive
  // the stage. Throws std::logic_error for a controller kind without a state
  // image.
  explicit StateStage(DynDeviceController& ctl, const StateLoadOptions& opt = {})
      : image_(ctl.state_image()), opt_(opt) {
    if (!image_) throw std::logic_error("gnmr: StateStage: " + ctl.name() + " has no state image");
    const std::size_t ib = image_->image_bytes(), bb = image_->blob_bytes();
    img_ = std::make_unique<detail::MappedBuffer>(ib);
    in_ = std::make_unique<detail::MappedBuffer>(bb);
    out_ = std::make_unique<detail::MappedBuffer>(bb);
    status_ = std::make_unique<detail::MappedBuffer>(sizeof(std::uint32_t));
    if (image_->regions() > StateImage::kMaxRegions)
      throw std::logic_error("gnmr: StateStage: " + ctl.name() + ": more than " +
                             std::to_string(StateImage::kMaxRegions) + " state regions");
    regions_.count = static_cast<unsigned>(image_->regions());
    std::size_t most = 0;
    for (unsigned k = 0; k < regions_.count; ++k) {
      const ImageRegion r = image_->region(k);
      if (r.device == nullptr) throw std::logic_error("gnmr: StateStage: " + ctl.name() + ": a region not on the device");
      regions_.dev[k] = r.device;
      regions_.off[k] = r.offset;
      regions_.bytes[k] = r.bytes;
      most = r.bytes > most ? r.bytes : most;
    }
    blocks_ = static_cast<unsigned>(((most > bb ? most : bb) + 255) / 256);
    blocks_ = blocks_ < 1 ? 1 : (blocks_ > 256 ? 256 : blocks_);
    core_ = std::make_unique<StageCore>(*image_, img_->host(), in_->host(), out_->host(),
                                        reinterpret_cast<volatile std::uint32_t*>(status_->host()));
    device_barrier("StateStage: setup");
    for (unsigned k = 0; k < regions_.count; ++k)
      check(cudaMemcpy(img_->host() + regions_.off[k], regions_.dev[k], regions_.bytes[k], cudaMemcpyDeviceToHost),
            "StateStage: setup copy");
    core_->start();
    check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "StateStage: cudaEventCreate");
  }
  ~StateStage() {
    if (done_) {
      cudaEventSynchronize(done_);  // no copy or host function may still use the buffers
      cudaEventDestroy(done_);
    }
  }
  StateStage(const StateStage&) = delete;
  StateStage& operator=(const StateStage&) = delete;

  std::size_t blob_bytes() const { return image_->blob_bytes(); }

  // Enqueue the load of d_blob's state (bytes == blob_bytes(), else
  // std::invalid_argument before anything is enqueued). Returns the first
  // enqueue error.
  cudaError_t load_async(const void* d_blob, std::size_t bytes, cudaStream_t stream) {
    check_size(bytes, "load_async");
    cudaError_t e;
    if ((e = cudaStreamWaitEvent(stream, done_, 0)) != cudaSuccess) return e;
    if ((e = cudaMemcpyAsync(in_->host(), d_blob, bytes, cudaMemcpyDeviceToHost, stream)) != cudaSuccess) return e;
    if ((e = cudaLaunchHostFunc(stream, &StateStage::on_loaded, this)) != cudaSuccess) return e;
    // From here on the stream holds a call into this stage: done_ marks it
    // whatever fails next, so the destructor waits for it.
    detail::stage_copy_regions<><<<blocks_, 256, 0, stream>>>(regions_, img_->dev(), status_word_dev(), true);
    e = cudaGetLastError();
    const cudaError_t r = cudaEventRecord(done_, stream);
    return e != cudaSuccess ? e : r;
  }
  // Enqueue the save of the controller's state into d_blob (same size
  // rule). After a load that failed it writes nothing.
  cudaError_t save_async(void* d_blob, std::size_t bytes, cudaStream_t stream) {
    check_size(bytes, "save_async");
    cudaError_t e;
    if ((e = cudaStreamWaitEvent(stream, done_, 0)) != cudaSuccess) return e;
    detail::stage_copy_regions<><<<blocks_, 256, 0, stream>>>(regions_, img_->dev(), status_word_dev(), false);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    if ((e = cudaLaunchHostFunc(stream, &StateStage::on_saved, this)) != cudaSuccess) return e;
    detail::stage_copy_blob<><<<blocks_, 256, 0, stream>>>(out_->dev(), static_cast<std::uint8_t*>(d_blob), bytes,
                                                         status_word_dev());
    e = cudaGetLastError();
    const cudaError_t r = cudaEventRecord(done_, stream);
    return e != cudaSuccess ? e : r;
  }
  // Marks the work enqueued on `stream` so far as the stage's last use: the
  // next load or save (on any stream) and the destructor wait for it. Call it
  // after your kernels that read status_device(), if another stream may load
  // next.
  cudaError_t record_use(cudaStream_t stream) { return cudaEventRecord(done_, stream); }

  // StageCore::kOk or kFailed after the last load, for kernels enqueued
  // after it on the same stream.
  const std::uint32_t* status_device() const { return reinterpret_cast<const std::uint32_t*>(status_->dev()); }
  // The message of the first load that failed since the last call (""
  // if none), once the stream has run it.
  std::string take_error() { return core_->take_error(); }
  // Loads that found the blob this stage last wrote or loaded (no decode).
  std::uint64_t fast_loads() const { return core_->fast_loads(); }

 private:
  static void CUDART_CB on_loaded(void* self) {
    auto* s = static_cast<StateStage*>(self);
    s->core_->loaded(s->opt_);
  }
  static void CUDART_CB on_saved(void* self) { static_cast<StateStage*>(self)->core_->saved(); }
  const volatile std::uint32_t* status_word_dev() const {
    return reinterpret_cast<const volatile std::uint32_t*>(status_->dev());
  }
  void check_size(std::size_t bytes, const char* what) const {
    if (bytes != image_->blob_bytes())
      throw std::invalid_argument(std::string("gnmr: StateStage::") + what + ": the blob has " +
                                  std::to_string(bytes) + " bytes, this controller's state " +
                                  std::to_string(image_->blob_bytes()));
  }

  std::unique_ptr<StateImage> image_;
  StateLoadOptions opt_;
  std::unique_ptr<detail::MappedBuffer> img_, in_, out_, status_;
  detail::StageRegions regions_{};
  unsigned blocks_ = 1;
  std::unique_ptr<StageCore> core_;
  cudaEvent_t done_ = nullptr;
};

}  // namespace cuda
}  // namespace gnmr
