// tests/reference/unit_partials.hpp — the CUDA per-unit norm kernel
// (gnmr/cuda/unit_norms.cuh) replayed on the host, bit for bit.
//
// The kernel's arithmetic is the GNMR_HOST_DEVICE code of
// gnmr/plan/norm_plan.hpp; what it does with threads (one block per chunk,
// a warp-shuffle tree, the last block of a unit folding its chunks) is
// replayed here with loops, so a machine without a GPU can check the
// device's exact result against a double reference (tests/unit/
// test_cuda_logic_norms.cpp), and the GPU tests and the CUDA example can
// demand the same bits. Not part of the library: tests and examples only,
// as CUTLASS keeps its host references apart from the library.
#pragma once

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "gnmr/plan/norm_plan.hpp"

namespace gnmr {
namespace reference {

using detail::NormChunk;
using detail::NormLayout;

// The block reduction the kernel does with __shfl_down_sync
// (gnmr::cuda::detail::block_tree, gnmr/cuda/block.cuh): within each
// warp offsets 16..1 (lane l takes combine(own, lane l+off)), then warp 0
// folds the warp results the same way, padded with the identity.
template <class T, class Merge>
T emulate_block_tree(std::vector<T> v, T identity, Merge merge) {
  const std::uint32_t warps = detail::kNormThreads / 32;
  for (std::uint32_t w = 0; w < warps; ++w)
    for (std::uint32_t off = 16; off >= 1; off /= 2)
      for (std::uint32_t l = 0; l < off; ++l) v[w * 32 + l] = merge(v[w * 32 + l], v[w * 32 + l + off]);
  T s[32];
  for (std::uint32_t l = 0; l < 32; ++l) s[l] = l < warps ? v[l * 32] : identity;
  for (std::uint32_t off = 16; off >= 1; off /= 2)
    for (std::uint32_t l = 0; l < off; ++l) s[l] = merge(s[l], s[l + off]);
  return s[0];
}

// Host-side loaders of the emulation (GNMR_HOST_DEVICE only so that nvcc
// accepts them inside the shared templates; the device has its own).
struct HostLoadVec {
  GNMR_HOST_DEVICE detail::Vec16 operator()(const detail::Vec16* q) const {
    detail::Vec16 v;
    std::memcpy(&v, static_cast<const void*>(q), sizeof v);
    return v;
  }
};

struct HostLoadPartial {
  const float* p;
  GNMR_HOST_DEVICE float operator()(std::uint32_t c) const { return p[c]; }
};

template <class Norm>
float emulate_chunk_partial(const NormChunk& c) {
  std::vector<float> t(detail::kNormThreads);
  for (std::uint32_t tid = 0; tid < detail::kNormThreads; ++tid) {
    switch (c.dtype) {
      case detail::kDF32:
        t[tid] = detail::chunk_thread_partial<Norm, detail::kDF32>(c.data, c.numel, tid, HostLoadVec{});
        break;
      case detail::kDBF16:
        t[tid] = detail::chunk_thread_partial<Norm, detail::kDBF16>(c.data, c.numel, tid, HostLoadVec{});
        break;
      default:
        t[tid] = detail::chunk_thread_partial<Norm, detail::kDF16>(c.data, c.numel, tid, HostLoadVec{});
        break;
    }
  }
  return emulate_block_tree(std::move(t), Norm::identity(),
                            [](float a, float b) { return Norm::combine(a, b); });
}

// A framework's pass with gnmr::cuda::deposit_chunk_partial
// (gnmr/cuda/fused_partials.cuh) over one chunk: the 256 threads one after
// another, each running xf over its own values (so the host buffer is
// transformed in place, as on the device), then the block tree.
template <class Norm, class Xform>
float emulate_deposit_chunk_partial(const NormChunk& c, const Xform& xf) {
  std::vector<float> t(detail::kNormThreads);
  for (std::uint32_t tid = 0; tid < detail::kNormThreads; ++tid) {
    switch (c.dtype) {
      case detail::kDF32:
        t[tid] = detail::chunk_thread_partial_ex<Norm, detail::kDF32>(c.data, c.numel, tid, HostLoadVec{}, xf);
        break;
      case detail::kDBF16:
        t[tid] = detail::chunk_thread_partial_ex<Norm, detail::kDBF16>(c.data, c.numel, tid, HostLoadVec{}, xf);
        break;
      default:
        t[tid] = detail::chunk_thread_partial_ex<Norm, detail::kDF16>(c.data, c.numel, tid, HostLoadVec{}, xf);
        break;
    }
  }
  return emulate_block_tree(std::move(t), Norm::identity(),
                            [](float a, float b) { return Norm::combine(a, b); });
}

// The per-unit fold of chunk partials: the last block of NormPlan's kernel,
// and gnmr::cuda::fold_unit_partials.
template <class Norm>
std::vector<float> emulate_fold(const NormLayout& L, const std::vector<float>& cp) {
  using F = detail::UnitFold<Norm>;
  std::vector<float> out(L.num_units());
  for (std::size_t u = 0; u < out.size(); ++u) {
    std::vector<typename F::T> t(detail::kNormThreads);
    for (std::uint32_t tid = 0; tid < detail::kNormThreads; ++tid)
      t[tid] = detail::unit_thread_fold<Norm>(HostLoadPartial{cp.data()}, L.unit_begin[u], L.unit_begin[u + 1], tid);
    out[u] = F::finish(emulate_block_tree(std::move(t), F::identity(),
                                          [](typename F::T a, typename F::T b) { return F::merge(a, b); }));
  }
  return out;
}

// What gnmr::cuda::unit_partials<Norm> writes, computed on the host from a
// layout whose chunk pointers are host memory. Same bits as the device when
// every segment has the same address modulo 16 on both sides.
template <class Norm>
std::vector<float> emulate_unit_partials(const NormLayout& L) {
  std::vector<float> cp(L.chunks.size());
  for (std::size_t c = 0; c < L.chunks.size(); ++c) cp[c] = emulate_chunk_partial<Norm>(L.chunks[c]);
  return emulate_fold<Norm>(L, cp);
}

}  // namespace reference
}  // namespace gnmr
