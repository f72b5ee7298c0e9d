// gnmr/cuda/block.cuh — the block-level collectives of the CUDA backend, all
// in one place. Every thread of the block must call them (they hold
// barriers).
//
// Exact folds (integer counts and prefix sums, the min or max of unique
// integer keys, the SummaryAcc merge) give the same bits in any order, so
// they are cub's BlockReduce and BlockScan, in cub's order, where that costs
// nothing: block_reduce_exact, block_inclusive_sum, block_exclusive_sum.
// Two exact ones are hand-written for speed. block_topk: every thread
// needs each round's maximum, and its double-buffered scratch costs one
// barrier per round where a BlockReduce and a broadcast cost two.
// block_merge_tree (the controller's SummaryAcc, 36 bytes): cub's
// BlockReduce shuffles it through registers, which took the commit kernel
// from 39 to 52 registers (sm_90, default policies, nvcc 13.0) and from six
// resident blocks per SM to four (its raking variant needs more shared
// memory and registers still); a halving tree in shared memory does not.
//
// Floating-point folds whose order defines the bits are hand-written, and
// their order must not change: block_tree is the norm kernel's fold (warp
// shuffles down by 16..1, then warp 0 over the warp results padded with
// the identity), which tests/reference/unit_partials.hpp replays on the
// host; block_tree_256 and block_sums_tree are the halving tree of the host
// controller's detail::total_sq_tree (gnmr/step/systemic.hpp). cub does not
// document the association order of its reductions, which may change
// between releases, and neither replay would match it: cub cannot stand in
// for them without changing bits.
//
// stage_in / stage_out are the block's cooperative copies between global
// and shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <cstdint>
#include <type_traits>

#include "gnmr/core/math.hpp"
#include "gnmr/step/systemic.hpp"  // kTotalBlock: the width of total_sq_tree's blocks

namespace gnmr {
namespace cuda {
namespace detail {

// ---- Exact folds: cub ---------------------------------------------------------

template <class T, int Threads>
using BlockReduceStorage = typename cub::BlockReduce<T, Threads>::TempStorage;
template <int Threads>
using BlockScanStorage = typename cub::BlockScan<std::uint32_t, Threads>::TempStorage;

// op over the block (blockDim.x == Threads); the result is valid in thread 0
// only. op must be exact (associative and commutative bit for bit). The
// leading barrier lets consecutive calls share `tmp`.
template <int Threads, class T, class Op>
__device__ __forceinline__ T block_reduce_exact(T x, Op op, BlockReduceStorage<T, Threads>& tmp) {
  __syncthreads();
  return cub::BlockReduce<T, Threads>(tmp).Reduce(x, op);
}

// Prefix sums over the block in thread order (blockDim.x == Threads),
// valid in every thread; the exclusive one also gives the block's total.
template <int Threads>
__device__ __forceinline__ std::uint32_t block_inclusive_sum(std::uint32_t x, BlockScanStorage<Threads>& tmp) {
  __syncthreads();
  std::uint32_t out;
  cub::BlockScan<std::uint32_t, Threads>(tmp).InclusiveSum(x, out);
  return out;
}
template <int Threads>
__device__ __forceinline__ std::uint32_t block_exclusive_sum(std::uint32_t x, std::uint32_t& total,
                                                             BlockScanStorage<Threads>& tmp) {
  __syncthreads();
  std::uint32_t out;
  cub::BlockScan<std::uint32_t, Threads>(tmp).ExclusiveSum(x, out, total);
  return out;
}

// Three exact counts reduced together (one reduction instead of three).
struct Counts3 {
  std::uint32_t v[3];
};
struct AddCounts3 {
  __device__ __forceinline__ Counts3 operator()(const Counts3& a, const Counts3& b) const {
    return Counts3{{a.v[0] + b.v[0], a.v[1] + b.v[1], a.v[2] + b.v[2]}};
  }
};
struct MaxU64 {
  __device__ __forceinline__ unsigned long long operator()(unsigned long long a,
                                                           unsigned long long b) const {
    return a > b ? a : b;
  }
};
struct MinU64 {
  __device__ __forceinline__ unsigned long long operator()(unsigned long long a,
                                                           unsigned long long b) const {
    return a < b ? a : b;
  }
};

// The block's top-k keys, largest first, zero padded. Keys are unique, so
// "largest below the previous pick" enumerates them. rounds is block-uniform.
__device__ __forceinline__ void block_topk(std::uint64_t key, std::uint32_t k, std::uint32_t rounds,
                                           std::uint64_t* out, unsigned long long (*smax)[32]) {
  unsigned long long prev = ~0ull;
  const unsigned lane = threadIdx.x & 31u;
  const unsigned warp = threadIdx.x >> 5;
  const unsigned warps = blockDim.x >> 5;
  for (std::uint32_t j = 0; j < rounds; ++j) {
    unsigned long long x = key < prev ? key : 0ull;
#pragma unroll
    for (unsigned off = 16; off >= 1; off >>= 1) x = MaxU64{}(x, __shfl_xor_sync(0xffffffffu, x, off));
    if (lane == 0) smax[j & 1u][warp] = x;
    __syncthreads();  // double buffer: round j+2 rewrites after round j+1's barrier
    unsigned long long m = 0;
    for (unsigned w = 0; w < warps; ++w) m = MaxU64{}(m, smax[j & 1u][w]);
    prev = m;
    if (threadIdx.x == 0) out[j] = m;
  }
  for (std::uint32_t j = rounds + threadIdx.x; j < k; j += blockDim.x) out[j] = 0u;
}

// An exact merge (T::merge) of one T per thread by a halving tree in shared
// memory (s holds Threads T's, blockDim.x == Threads, a power of two).
// Returns the result where it lies, s[0], for any thread to read until s is
// written again. The caller puts a __syncthreads() between an earlier read
// of s and this call.
template <int Threads, class T>
__device__ __forceinline__ const T& block_merge_tree(const T& x, T* s) {
  s[threadIdx.x] = x;
  __syncthreads();
  for (unsigned k = Threads / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x].merge(s[threadIdx.x + k]);
    __syncthreads();
  }
  return s[0];
}

// ---- Floating-point folds in a fixed order: hand-written ---------------------

// Block-wide fold in a fixed tree (the order
// gnmr::reference::emulate_block_tree replays): shuffles down by 16..1 in
// every warp, then warp 0 folds the warp results padded with the identity.
// Result valid in thread 0 only. scratch holds 32 values.
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

// The block size of the two trees below: total_sq_tree's block width.
constexpr std::uint32_t kTreeThreads = static_cast<std::uint32_t>(gnmr::detail::kTotalBlock);

// The halving tree of gnmr::detail::tree_256 over x[0 .. 256), by a block of
// kTreeThreads threads; x[0] holds the sum after it.
__device__ __forceinline__ void block_tree_256(double* x) {
  for (std::uint32_t s = kTreeThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) x[threadIdx.x] = math::dadd(x[threadIdx.x], x[threadIdx.x + s]);
    __syncthreads();
  }
}

// gnmr::detail::total_sq_tree's upper levels over m block sums, in place in
// v (one block of kTreeThreads threads; v written by other blocks of this
// launch: read via L2), x the block's kTreeThreads doubles of scratch.
// Returns the sum in every thread.
__device__ __forceinline__ double block_sums_tree(double* v, std::uint32_t m, double* x) {
  while (m > 1u) {
    std::uint32_t k = 0;
    for (std::uint32_t b = 0; b < m; b += kTreeThreads, ++k) {  // block-uniform
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

// ---- Block copies -----------------------------------------------------------

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
