// gnmr/cuda/memory.cuh — device memory at setup time: an owning buffer, the
// two-phase workspace rule of every plan and controller and the carving of
// a workspace into aligned arrays, and the blocking copies around them.
//
// Conventions of the backend: constructors and plan builders allocate and
// may synchronise (they run once, at setup); per-step entry points only
// enqueue work on the caller's stream, never allocate, never synchronise,
// never copy to the host, so they can be captured in a CUDA graph: nothing
// in this file belongs in a step.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "gnmr/cuda/error.cuh"

namespace gnmr {
namespace cuda {

// The barrier of every setup-time upload and blocking download. cudaMemset
// and a cudaMemcpy from pageable host memory may return before the device
// has finished them, and both are ordered only against the legacy default
// stream: without it, a step enqueued right after construction on a
// cudaStreamNonBlocking stream could read a half-written table or counter,
// and a "blocking" copy could read results of a step still running there.
// Setup and debugging paths only, never a step.
inline void device_barrier(const char* what) { check(cudaDeviceSynchronize(), what); }

// Setup-time copy of n host values to the device (synchronous; callers put
// the barriers their ordering needs around it).
template <class T>
void upload(T* d, const T* h, std::size_t n, const char* what) {
  check(cudaMemcpy(d, h, n * sizeof(T), cudaMemcpyHostToDevice), what);
}
// Blocking read of n device values, after a device-wide barrier, so it sees
// a step enqueued on any stream (tests, checkpoints, debugging).
template <class T>
std::vector<T> download(const T* d, std::size_t n, const char* what) {
  std::vector<T> h(n);
  device_barrier(what);
  check(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), what);
  return h;
}

// Owning device allocation (cudaMalloc/cudaFree). Movable, not copyable.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes, const char* what = "cudaMalloc") : bytes_(bytes) {
    if (bytes) check(cudaMalloc(&ptr_, bytes), what);
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_) cudaFree(ptr_);
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      o.ptr_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// The two-phase workspace rule of every plan and controller: a null
// workspace means "allocate `need` bytes into own"; a caller's workspace
// must hold at least `need` bytes, be 256-byte aligned (as cudaMalloc's are)
// and outlive the object.
inline void* acquire_workspace(DeviceBuffer& own, void* workspace, std::size_t ws_bytes,
                               std::size_t need, const char* who) {
  if (workspace == nullptr) {
    own = DeviceBuffer(need, (std::string(who) + ": cudaMalloc").c_str());
    return own.get();
  }
  if (ws_bytes < need)
    throw std::invalid_argument(std::string("gnmr: ") + who + ": workspace of " +
                                std::to_string(ws_bytes) + " bytes, " + std::to_string(need) +
                                " needed");
  // Sub-buffers are carved at 256-byte offsets and the kernels use 16-byte
  // vector accesses on them (cudaMalloc's pointers are 256-byte aligned).
  if (reinterpret_cast<std::uintptr_t>(workspace) % 256u != 0u)
    throw std::invalid_argument(std::string("gnmr: ") + who + ": workspace must be 256-byte aligned");
  return workspace;
}

// Carves aligned sub-buffers out of one allocation (or out of a caller's
// workspace): a dry run with base == nullptr measures the size.
class Carver {
 public:
  explicit Carver(void* base) : base_(static_cast<unsigned char*>(base)) {}
  template <class T>
  T* take(std::size_t count) {
    off_ = (off_ + 255u) & ~static_cast<std::size_t>(255u);
    T* p = base_ ? reinterpret_cast<T*>(base_ + off_) : nullptr;
    off_ += count * sizeof(T);
    return p;
  }
  std::size_t bytes() const { return (off_ + 255u) & ~static_cast<std::size_t>(255u); }

 private:
  unsigned char* base_;
  std::size_t off_ = 0;
};

}  // namespace cuda
}  // namespace gnmr
