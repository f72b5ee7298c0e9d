// gnmr/cuda/grid.cuh — what the kernels of the backend use across block
// boundaries: the "last block folds" handoff inside one launch, the L2 load
// that reads another block's writes, and programmatic dependent launch
// between two launches (the host-side probe and the device-side calls).
//
// Why a handoff and not a second launch or a float atomic: the block that
// finishes last (an integer counter) folds every block's partial in a fixed
// order, so the result does not depend on scheduling and the step stays one
// launch per phase.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdlib>
#include <utility>

namespace gnmr {
namespace cuda {

// Whether `kernel` may be launched as a programmatic dependent on the current
// device: the device is sm_90 or later and the kernel's code was compiled for
// compute_90 or later (so its wait_prior_grid() is not compiled out, e.g.
// under a PTX JIT of an older virtual architecture). GNMR_CUDA_NO_PDL turns
// it off: defined at compile time, or set to 1 in the environment (to
// measure what PDL saves, or to rule it out). Setup time: the controller
// asks once, at construction.
template <class Kernel>
inline bool pdl_supported(Kernel kernel) {
#ifdef GNMR_CUDA_NO_PDL
  (void)kernel;
  return false;
#else
  const char* off = std::getenv("GNMR_CUDA_NO_PDL");
  if (off != nullptr && off[0] == '1') return false;
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

// Launches kernel<<<blocks, threads>>>(args...) on `stream`, as a programmatic
// dependent of the kernel before it when `pdl` (pdl_supported(kernel)). The
// kernel must wait_prior_grid() before it reads what that kernel writes.
template <class... Params, class... Args>
inline cudaError_t launch_dependent(void (*kernel)(Params...), std::size_t blocks, unsigned int threads,
                                    cudaStream_t stream, bool pdl, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned int>(blocks));
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1u : 0u;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

namespace detail {

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

}  // namespace detail
}  // namespace cuda
}  // namespace gnmr
