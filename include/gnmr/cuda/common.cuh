// gnmr/cuda/common.cuh — shared plumbing of the CUDA backend: error
// reporting, an owning device buffer, and the fixed-shape block reductions
// whose order the host emulations in gnmr/detail/*.hpp replay.
//
// Conventions of the backend: constructors and plan builders allocate and
// may synchronise (they run once, at setup); per-step entry points only
// enqueue work on the caller's stream, never allocate, never synchronise,
// never copy to the host, so they can be captured in a CUDA graph.
//
// Errors, one rule for the whole device API (docs/algorithm.md, Errors on
// the device API): (1) a caller's mistake that the host can see before
// enqueuing anything (a null pointer, an empty plan, a size or count
// mismatch, an invalid hyperparameter, a call the configuration does not
// allow) throws std::invalid_argument (std::logic_error for the last), and
// nothing is enqueued or changed; (2) a failure reported by CUDA is
// returned as the cudaError_t by the entry points that return one (the
// per-step enqueues: unit_partials, DeviceController::step / step_norms /
// copy_summary_async, adamw_step, SummaryRing::push; CUB style) and thrown
// as gnmr::cuda::Error by every other (constructors, plan builders,
// blocking copies, save/restore, TelemetryDrain, NcclReducer, whose NCCL
// failures are std::runtime_error).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gnmr/config.hpp"

namespace gnmr {
namespace cuda {

class Error : public std::runtime_error {
 public:
  Error(cudaError_t e, const std::string& what)
      : std::runtime_error("gnmr: " + what + ": " + cudaGetErrorName(e) + " (" +
                           cudaGetErrorString(e) + ")"),
        code_(e) {}
  cudaError_t code() const { return code_; }

 private:
  cudaError_t code_;
};

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(e, what);
}

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

// Whether `kernel` may be launched as a programmatic dependent on the current
// device: the device is sm_90 or later and the kernel's code was compiled for
// compute_90 or later (so its wait_prior_grid() is not compiled out, e.g.
// under a PTX JIT of an older virtual architecture). GNMR_CUDA_NO_PDL turns
// it off.
template <class Kernel>
inline bool pdl_supported(Kernel kernel) {
#ifdef GNMR_CUDA_NO_PDL
  (void)kernel;
  return false;
#else
  int dev = 0, major = 0;
  cudaFuncAttributes fa{};
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaFuncGetAttributes(&fa, kernel) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return major >= 9 && fa.ptxVersion >= 90;
#endif
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

namespace detail {

// Block-wide fold in a fixed tree (the order gnmr::detail::emulate_block_tree
// replays): shuffles down by 16..1 in every warp, then warp 0 folds the warp
// results padded with the identity. Result valid in thread 0 only. Every
// thread of the block must call it; scratch holds 32 values.
template <class T, class Merge>
__device__ __forceinline__ T block_tree(T x, T identity, Merge merge, T* scratch) {
  const unsigned lane = threadIdx.x & 31u;
  const unsigned warp = threadIdx.x >> 5;
  const unsigned warps = (blockDim.x + 31u) >> 5;
#pragma unroll
  for (unsigned off = 16; off >= 1; off >>= 1) x = merge(x, __shfl_down_sync(0xffffffffu, x, off));
  __syncthreads();  // scratch may still be in use by a previous call
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  if (warp == 0) {
    x = lane < warps ? scratch[lane] : identity;
#pragma unroll
    for (unsigned off = 16; off >= 1; off >>= 1) x = merge(x, __shfl_down_sync(0xffffffffu, x, off));
  }
  return x;
}

// Signals that this block is done with its share and returns true in the
// one block that finished last (the classic threadfence reduction). The
// caller's global writes before the call are visible to that block. The
// counter is reset by the last block, so the next launch (or graph replay)
// starts from zero.
__device__ __forceinline__ bool last_block_done(unsigned int* counter, unsigned int expected,
                                                int* flag_smem) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned int prev = atomicAdd(counter, 1u);
    *flag_smem = prev == expected - 1u;
    if (*flag_smem) *counter = 0u;
  }
  __syncthreads();
  const bool last = *flag_smem != 0;
  if (last) __threadfence();
  return last;
}

// Loads a trivially copyable T written by another block of the same launch
// through L2 (ld.global.cg), never a possibly stale L1 line.
template <class T>
__device__ __forceinline__ T load_cg(const T* p) {
  static_assert(sizeof(T) % 4 == 0 && alignof(T) >= 4, "load_cg: 4-byte granular types only");
  T out;
  const unsigned int* src = reinterpret_cast<const unsigned int*>(p);
  unsigned int* dst = reinterpret_cast<unsigned int*>(&out);
#pragma unroll
  for (unsigned i = 0; i < sizeof(T) / 4; ++i) dst[i] = __ldcg(src + i);
  return out;
}

// Programmatic dependent launch (Hopper and later): a kernel launched with
// the programmatic-stream-serialization attribute may start while the one
// before it on the stream is still running; it must wait_prior_grid() before
// reading anything that kernel writes (the wait returns once that grid has
// completed and its writes are visible). allow_dependents() lets the next
// grid's blocks be scheduled early. Both compile to nothing below sm_90,
// where the host never sets the attribute (pdl_supported()).
__device__ __forceinline__ void wait_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// One block's run of `count` trivially copyable T's, copied between global
// and shared memory in coalesced 16-byte words (the tail in 4-byte words).
// Why: a thread reading or writing its own element of an array of structs
// issues one access per field, and each such warp access touches 32 sectors,
// so per-thread AoS traffic costs L1/L2 transactions in proportion to the
// struct's field count, not its bytes. g must be 16-byte aligned (the
// controller's buffers are 256-byte aligned and each block's run starts at a
// multiple of 256 elements). The caller puts a __syncthreads() between a
// stage and the shared reads or writes that depend on it.
__device__ __forceinline__ void block_copy_words(void* dst, const void* src, std::uint32_t bytes) {
  const std::uint32_t words = bytes / 16u;
  for (std::uint32_t w = threadIdx.x; w < words; w += blockDim.x)
    static_cast<uint4*>(dst)[w] = static_cast<const uint4*>(src)[w];
  for (std::uint32_t w = words * 4u + threadIdx.x; w < bytes / 4u; w += blockDim.x)
    static_cast<unsigned int*>(dst)[w] = static_cast<const unsigned int*>(src)[w];
}
template <class T>
__device__ __forceinline__ void stage_in(void* smem, const T* g, std::uint32_t count) {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) % 4 == 0,
                "stage_in: 4-byte granular, trivially copyable types only");
  block_copy_words(smem, g, count * static_cast<std::uint32_t>(sizeof(T)));
}
template <class T>
__device__ __forceinline__ void stage_out(T* g, const void* smem, std::uint32_t count) {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) % 4 == 0,
                "stage_out: 4-byte granular, trivially copyable types only");
  block_copy_words(g, smem, count * static_cast<std::uint32_t>(sizeof(T)));
}

}  // namespace detail
}  // namespace cuda
}  // namespace gnmr
