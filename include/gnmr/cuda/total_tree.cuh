// gnmr/cuda/total_tree.cuh — the systemic global-clip's total norm on the
// device: the fixed halving tree of gnmr/step/systemic.hpp's
// detail::total_sq_tree, per block of 256 units (phase 1) and over the
// block sums (phase 1's last block), so the device sums the squares in
// exactly the host's order (used by controller_kernels.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gnmr/core/math.hpp"
#include "gnmr/step/select.hpp"  // kSelectThreads: the controller kernels' block size

namespace gnmr {
namespace cuda {
namespace detail {

// The halving tree of gnmr::detail::tree_256 over x[0 .. 256), by the block
// (blockDim == 256); x[0] holds the sum after it. Every thread calls it.
__device__ __forceinline__ void block_tree_256(double* x) {
  for (unsigned s = gnmr::detail::kSelectThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) x[threadIdx.x] = math::dadd(x[threadIdx.x], x[threadIdx.x + s]);
    __syncthreads();
  }
}

// gnmr::detail::total_sq_tree's upper levels over m block sums, in place in v (the
// last block only; v written by other blocks of this launch: read via L2).
// Returns the sum in every thread.
__device__ __forceinline__ double block_sums_tree(double* v, std::uint32_t m, double* x) {
  while (m > 1u) {
    std::uint32_t k = 0;
    for (std::uint32_t b = 0; b < m; b += gnmr::detail::kSelectThreads, ++k) {  // block-uniform
      x[threadIdx.x] = b + threadIdx.x < m ? __ldcg(v + b + threadIdx.x) : 0.0;
      __syncthreads();
      block_tree_256(x);
      if (threadIdx.x == 0) v[k] = x[0];
      __syncthreads();
    }
    m = k;
  }
  return __ldcg(v);
}

}  // namespace detail
}  // namespace cuda
}  // namespace gnmr
