// gnmr/comm/nccl.cuh — NcclReducer: combine the N per-unit partials
// of all ranks of an NCCL communicator, in device memory, on the caller's
// stream (step (b), docs/algorithm.md).
//
// Sync-free and CUDA-graph capturable: allreduce() only enqueues (at most a
// tiny kernel, then one ncclAllReduce) on the given stream and never waits
// for the device; errors it can see at enqueue time are thrown on the host
// (gnmr::cuda::Error for a failed launch, std::runtime_error for NCCL).
// Put it on the stream that computed the partials, after the gradient
// reduce-scatter, before the device controller step: the user's optimizer
// then reads decisions that are identical on every rank. One call per step
// and per process-group class, never per tensor (docs/record/distributed.md).
//
// The communicator is borrowed (not duplicated or destroyed). As with every
// NCCL collective, all ranks must call it with the same n in the same order.
//
// Non-finite partials: sums keep NaN/Inf by IEEE rules (partials are >= 0);
// ncclMax, like MPI_MAX, may drop a NaN depending on operand order, so
// before a max a kernel maps NaN to +Inf and the unit ends NONFINITE on every
// rank. Floats are reduced as ncclFloat (N*4 bytes); double partials, where
// a user accumulates them, as ncclDouble. NCCL's sum order is fixed for a
// given communicator and algorithm and its result is the same on all ranks
// (ring/tree all-reduce end with a broadcast of one reduced value).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "gnmr/comm/reducer.hpp"
#include "gnmr/core/math.hpp"
#include "gnmr/core/numeric.hpp"
#include "gnmr/cuda/error.cuh"
#include "gnmr/policy/norm.hpp"

namespace gnmr {
namespace cuda {
namespace detail {

__device__ __forceinline__ bool nccl_is_nan(float x) { return gnmr::is_nan(x); }
__device__ __forceinline__ bool nccl_is_nan(double x) { return gnmr::detail::is_nan_d(x); }

template <class T>
__global__ void nan_to_inf_kernel(T* p, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    if (nccl_is_nan(p[i])) p[i] = static_cast<T>(gnmr::inf_f());
}

inline void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess)
    throw std::runtime_error(std::string("gnmr: NcclReducer: ") + what + " failed: " +
                             ncclGetErrorString(r));
}

template <class T>
struct NcclType;
template <>
struct NcclType<float> {
  static constexpr ncclDataType_t kValue = ncclFloat;
};
template <>
struct NcclType<double> {
  static constexpr ncclDataType_t kValue = ncclDouble;
};

}  // namespace detail

class NcclReducer {
 public:
  static constexpr const char* kName = "nccl";

  explicit NcclReducer(ncclComm_t comm) : comm_(comm) {
    if (comm == nullptr) throw std::invalid_argument("gnmr: NcclReducer: null communicator");
  }

  // In place on device memory; enqueued on `stream`, returns at once.
  void allreduce(float* d_partials, std::size_t n, Combine op, cudaStream_t stream) {
    run(d_partials, n, op, stream);
  }
  void allreduce(double* d_partials, std::size_t n, Combine op, cudaStream_t stream) {
    run(d_partials, n, op, stream);
  }

  template <class Norm>
  void reduce(float* d_partials, std::size_t n, cudaStream_t stream) {
    run(d_partials, n, Norm::kCombine, stream);
  }

  ncclComm_t comm() const { return comm_; }
  // Counted at enqueue time; `seconds` stays 0 (timing would need a sync).
  ReducerStats stats() const { return stats_; }
  void reset_stats() { stats_ = ReducerStats{}; }

 private:
  template <class T>
  void run(T* p, std::size_t n, Combine op, cudaStream_t stream) {
    if (n == 0) return;
    if (p == nullptr) throw std::invalid_argument("gnmr: NcclReducer: null partials");
    if (op == Combine::kMax) {
      constexpr unsigned kThreads = 256;
      const std::size_t want = (n + kThreads - 1) / kThreads;
      const unsigned blocks = static_cast<unsigned>(want < 1024 ? want : 1024);
      detail::nan_to_inf_kernel<T><<<blocks, kThreads, 0, stream>>>(p, n);
      check(cudaGetLastError(), "NcclReducer: nan_to_inf launch");
    }
    detail::nccl_check(ncclAllReduce(p, p, n, detail::NcclType<T>::kValue,
                                     op == Combine::kSum ? ncclSum : ncclMax, comm_, stream),
                       "ncclAllReduce");
    stats_.collectives += 1;
    stats_.bytes += n * sizeof(T);
  }

  ncclComm_t comm_;
  ReducerStats stats_{};
};

}  // namespace cuda
}  // namespace gnmr
