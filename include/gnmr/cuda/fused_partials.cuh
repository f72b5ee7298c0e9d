// gnmr/cuda/fused_partials.cuh — per-unit norms deposited by the
// framework's own pass over the gradients, so that the guarded step reads
// the gradients no more often than an unguarded one.
//
// A framework already makes one pass over every gradient before the
// optimizer: AMP's unscale and finite check, the bf16 -> fp32 cast of main
// gradients, a reduce-scatter's epilogue. With this header that pass, run
// as one 256-thread block per chunk of a NormPlan, also leaves each chunk's
// partial sum in the plan's chunk table; fold_unit_partials() then folds
// them per unit. No second read of the gradients:
//
//   gnmr::cuda::NormPlan plan(segments, num_units);              // setup
//   // the framework's kernel, <<<plan.num_chunks(), gnmr::cuda::kFusedThreads>>>:
//   __global__ void unscale(gnmr::cuda::FusedNormView v, float inv) {
//     gnmr::cuda::deposit_chunk_partial<gnmr::L2Norm>(v, blockIdx.x, MyUnscale{inv});
//   }
//   unscale<<<...>>>(gnmr::cuda::fused_view(plan), inv);
//   gnmr::cuda::fold_unit_partials<gnmr::L2Norm>(plan, d_partials, stream);
//   ctl.step(d_partials, stream);                                // no gradient read
//
// The Xform (gnmr/plan/norm_plan.hpp, chunk_thread_partial_ex) is the
// framework's per-value work: xf.vec(v, where) gets each 16-byte vector as
// loaded from `where` and may change it and store it back, xf.elem(b,
// where) the same for a head or tail element of an unaligned chunk. Each
// value is visited by exactly one thread, once.
//
// Determinism: the chunk partials are chunk_thread_partial_ex's order and
// block_tree's, the fold is NormPlan's (unit_thread_fold, then block_tree
// in double for sums), so the partials equal gnmr::cuda::unit_partials'
// over the transformed gradients, bit for bit, on every run (no float
// atomics; tests/unit/test_cuda_logic_fused.cpp checks it on the CPU with
// the same functors). Enqueue only, no allocation, capturable.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>

#include "gnmr/cuda/block.cuh"
#include "gnmr/cuda/unit_norms.cuh"
#include "gnmr/plan/norm_plan.hpp"
#include "gnmr/policy/norm.hpp"

namespace gnmr {
namespace cuda {

// The block size the depositing kernel must be launched with (part of the
// reduction order).
constexpr unsigned int kFusedThreads = gnmr::detail::kNormThreads;

// What the framework's kernel needs of a NormPlan: trivially copyable, pass
// it by value.
struct FusedNormView {
  const gnmr::detail::NormChunk* chunks;
  float* chunk_partials;
  std::uint32_t num_chunks;
};

inline FusedNormView fused_view(const NormPlan& plan) {
  if (plan.num_chunks() == 0)
    throw std::invalid_argument("gnmr: fused_view: empty NormPlan (default-constructed or moved from)");
  return FusedNormView{plan.d_chunks(), plan.d_chunk_partials(), static_cast<std::uint32_t>(plan.num_chunks())};
}

namespace detail {
// A plain 16-byte load: the pass may write what it read, which the
// read-only path (__ldg) does not allow within one kernel.
struct PlainLoadVec {
  __device__ __forceinline__ gnmr::detail::Vec16 operator()(const gnmr::detail::Vec16* q) const {
    const uint4 u = *reinterpret_cast<const uint4*>(q);
    gnmr::detail::Vec16 v;
    v.w[0] = u.x;
    v.w[1] = u.y;
    v.w[2] = u.z;
    v.w[3] = u.w;
    return v;
  }
};
}  // namespace detail

// Called by all kFusedThreads threads of a block: runs xf over chunk c and
// writes its partial to the plan's chunk table. A block may handle several
// chunks in turn (a grid-stride loop): every thread of the block must make
// the same calls.
template <class Norm, class Xform>
__device__ void deposit_chunk_partial(const FusedNormView& v, std::uint32_t c, const Xform& xf) {
  __shared__ float s_chunk[32];
  const float x = detail::chunk_partial<Norm>(v.chunks[c], detail::PlainLoadVec{}, xf, s_chunk);
  if (threadIdx.x == 0) v.chunk_partials[c] = x;
}

namespace detail {
template <class Norm>
__global__ void __launch_bounds__(gnmr::detail::kNormThreads)
    fold_units_kernel(const std::uint32_t* __restrict__ unit_begin, const float* chunk_partials,
                      float* __restrict__ out) {
  __shared__ typename gnmr::detail::UnitFold<Norm>::T s_unit[32];
  const std::uint32_t u = blockIdx.x;
  fold_unit<Norm>(chunk_partials, unit_begin[u], unit_begin[u + 1], out + u, s_unit);
}
}  // namespace detail

// Folds the chunk partials the framework's pass deposited into one partial
// per unit (plan.num_units() floats at d_partials), on `stream`, after
// that pass (same stream, or an event). NormPlan's own fold, one block per
// unit. Errors as unit_partials().
template <class Norm = L2Norm>
cudaError_t fold_unit_partials(const NormPlan& plan, float* d_partials, cudaStream_t stream = 0) {
  if (plan.num_chunks() == 0)
    throw std::invalid_argument("gnmr: fold_unit_partials: empty NormPlan (default-constructed or moved from)");
  if (d_partials == nullptr) throw std::invalid_argument("gnmr: fold_unit_partials: null partials");
  detail::fold_units_kernel<Norm>
      <<<static_cast<unsigned int>(plan.num_units()), gnmr::detail::kNormThreads, 0, stream>>>(
          plan.d_unit_begin(), plan.d_chunk_partials(), d_partials);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace gnmr
