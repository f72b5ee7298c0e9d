// gnmr/cuda/unit_norms.cuh — per-unit partial norms of device gradients
// (step (a), docs/algorithm.md): one kernel launch per step, deterministic.
//
//   gnmr::cuda::NormPlan plan(segments, num_units);      // once, at setup
//   gnmr::cuda::unit_partials<gnmr::L2Norm>(plan, d_partials, stream);  // every step
//
// The plan (gnmr/plan/norm_plan.hpp) cuts every segment into chunks of at
// most chunk_elems elements, grouped by unit, and uploads that table once.
// The kernel runs one 256-thread block per chunk: 16-byte vector loads,
// fp32 accumulation with the NormPolicy's element/combine, a fixed-shape
// block tree; the last block of a unit to finish (an integer counter per
// unit) folds the unit's chunk partials in chunk order, in double for sums.
// No float atomics, no order that depends on scheduling: the same bits on
// every run, and the exact bits gnmr::reference::emulate_unit_partials
// (tests/reference/unit_partials.hpp) computes on the host.
//
// One call per plan may be in flight at a time (the per-unit counters and
// chunk partials live in the plan's workspace). Segment pointers are baked
// into the plan: gradients must stay at the same addresses, as they do in a
// training loop; rebuild the plan if they move.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "gnmr/core/dtype.hpp"
#include "gnmr/cuda/block.cuh"
#include "gnmr/cuda/chunk_plan.cuh"
#include "gnmr/cuda/error.cuh"
#include "gnmr/cuda/grid.cuh"
#include "gnmr/cuda/memory.cuh"
#include "gnmr/plan/norm_plan.hpp"
#include "gnmr/policy/norm.hpp"

namespace gnmr {
namespace cuda {

struct NormPlanOptions {
  // Elements per chunk (multiple of 8). Smaller chunks balance the last wave
  // of blocks better; larger ones mean fewer chunk partials to fold.
  std::uint64_t chunk_elems = gnmr::detail::kDefaultNormChunk;
};

class NormPlan {
 public:
  NormPlan() = default;

  // Validates the segments like host_unit_partials (std::invalid_argument),
  // builds the chunk table, allocates its device workspace and uploads the
  // table (synchronously, device-wide: setup time, not step time).
  NormPlan(const Segment* segs, std::size_t n_segs, std::size_t num_units,
           NormPlanOptions opt = {})
      : NormPlan(gnmr::detail::build_norm_layout(segs, n_segs, num_units, opt.chunk_elems), nullptr,
                 0) {}
  NormPlan(const std::vector<Segment>& segs, std::size_t num_units, NormPlanOptions opt = {})
      : NormPlan(segs.data(), segs.size(), num_units, opt) {}

  // Caller-owned workspace: call workspace_bytes() first (two-phase), then
  // pass a device buffer of at least that size; it must outlive the plan.
  static std::size_t workspace_bytes(const Segment* segs, std::size_t n_segs, std::size_t num_units,
                                     NormPlanOptions opt = {}) {
    const auto L = gnmr::detail::build_norm_layout(segs, n_segs, num_units, opt.chunk_elems);
    return carve(nullptr, L.chunks.size(), L.num_units()).bytes;
  }
  NormPlan(const Segment* segs, std::size_t n_segs, std::size_t num_units, void* d_workspace,
           std::size_t workspace_bytes, NormPlanOptions opt = {})
      : NormPlan(gnmr::detail::build_norm_layout(segs, n_segs, num_units, opt.chunk_elems),
                 d_workspace, workspace_bytes) {}

  std::size_t num_units() const { return num_units_; }
  std::size_t num_chunks() const { return num_chunks_; }
  std::uint64_t bytes_per_pass() const { return bytes_; }  // gradient bytes one call reads
  std::uint64_t elements() const { return elements_; }

  // Device views (for the kernel and for users fusing their own).
  const gnmr::detail::NormChunk* d_chunks() const { return v_.t.chunks; }
  const std::uint32_t* d_unit_begin() const { return v_.t.unit_index; }
  float* d_chunk_partials() const { return v_.chunk_partials; }
  unsigned int* d_counters() const { return v_.t.counters; }

 private:
  using Tables = detail::ChunkTables<gnmr::detail::NormChunk>;
  struct Views {
    Tables t;  // unit_index: where each unit's chunks begin
    float* chunk_partials = nullptr;
    std::size_t bytes = 0;
  };
  static Views carve(void* base, std::size_t chunks, std::size_t units) {
    Carver c(base);
    Views v;
    v.t = Tables::carve(c, chunks, units, units + 1);
    v.chunk_partials = c.take<float>(chunks);
    v.bytes = c.bytes();
    return v;
  }

  NormPlan(const gnmr::detail::NormLayout& L, void* d_workspace, std::size_t ws_bytes)
      : num_units_(L.num_units()), num_chunks_(L.chunks.size()), bytes_(L.bytes), elements_(L.elements) {
    const std::size_t need = carve(nullptr, num_chunks_, num_units_).bytes;
    v_ = carve(acquire_workspace(own_, d_workspace, ws_bytes, need, "NormPlan"), num_chunks_, num_units_);
    v_.t.upload(L.chunks, L.unit_begin, num_units_, "NormPlan");
    device_barrier("NormPlan: upload");
  }

  DeviceBuffer own_;
  Views v_;
  std::size_t num_units_ = 0;
  std::size_t num_chunks_ = 0;
  std::uint64_t bytes_ = 0;
  std::uint64_t elements_ = 0;
};

namespace detail {

struct DeviceLoadVec {
  GNMR_HOST_DEVICE gnmr::detail::Vec16 operator()(const gnmr::detail::Vec16* q) const {
    gnmr::detail::Vec16 v;
#if defined(__CUDA_ARCH__)
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(q));
    v.w[0] = u.x;
    v.w[1] = u.y;
    v.w[2] = u.z;
    v.w[3] = u.w;
#else
    v = *q;
#endif
    return v;
  }
};

template <class Norm>
struct NormCombine {
  __device__ __forceinline__ float operator()(float a, float b) const { return Norm::combine(a, b); }
};
template <class Norm>
struct UnitMerge {
  using T = typename gnmr::detail::UnitFold<Norm>::T;
  __device__ __forceinline__ T operator()(T a, T b) const {
    return gnmr::detail::UnitFold<Norm>::merge(a, b);
  }
};
struct CgLoadFloat {
  const float* p;
  __device__ __forceinline__ float operator()(std::uint32_t c) const { return __ldcg(p + c); }
};

// One chunk's partial by a whole block: the per-thread share in the chunk
// dtype's order (with the Xform of a framework's pass, fused_partials.cuh,
// or NoXform), then the block tree. Result valid in thread 0.
template <class Norm, class LoadVec, class Xform>
__device__ __forceinline__ float chunk_partial(const gnmr::detail::NormChunk& c, const LoadVec& load,
                                               const Xform& xf, float* scratch) {
  using gnmr::detail::kDBF16;
  using gnmr::detail::kDF16;
  using gnmr::detail::kDF32;
  float x;
  if (c.dtype == kDF32)
    x = gnmr::detail::chunk_thread_partial_ex<Norm, kDF32>(c.data, c.numel, threadIdx.x, load, xf);
  else if (c.dtype == kDBF16)
    x = gnmr::detail::chunk_thread_partial_ex<Norm, kDBF16>(c.data, c.numel, threadIdx.x, load, xf);
  else
    x = gnmr::detail::chunk_thread_partial_ex<Norm, kDF16>(c.data, c.numel, threadIdx.x, load, xf);
  return block_tree(x, Norm::identity(), NormCombine<Norm>{}, scratch);
}

// One unit's fold of its chunk partials by a whole block (NormPlan's last
// block of the unit, and fold_unit_partials' block per unit): the same
// order, so the same bits. Result written by thread 0.
template <class Norm>
__device__ __forceinline__ void fold_unit(const float* chunk_partials, std::uint32_t begin, std::uint32_t end,
                                          float* out, typename gnmr::detail::UnitFold<Norm>::T* scratch) {
  using F = gnmr::detail::UnitFold<Norm>;
  typename F::T a = gnmr::detail::unit_thread_fold<Norm>(CgLoadFloat{chunk_partials}, begin, end, threadIdx.x);
  a = block_tree(a, F::identity(), UnitMerge<Norm>{}, scratch);
  if (threadIdx.x == 0) *out = F::finish(a);
}

template <class Norm>
__global__ void __launch_bounds__(gnmr::detail::kNormThreads, 4)
    norm_chunks_kernel(const gnmr::detail::NormChunk* __restrict__ chunks,
                       const std::uint32_t* __restrict__ unit_begin, float* chunk_partials,
                       unsigned int* counters, float* __restrict__ out) {
  __shared__ float s_chunk[32];
  __shared__ typename gnmr::detail::UnitFold<Norm>::T s_unit[32];
  __shared__ int s_last;
  const gnmr::detail::NormChunk c = chunks[blockIdx.x];
  const float x = chunk_partial<Norm>(c, DeviceLoadVec{}, gnmr::detail::NoXform{}, s_chunk);
  if (threadIdx.x == 0) chunk_partials[blockIdx.x] = x;
  const std::uint32_t begin = unit_begin[c.unit];
  const std::uint32_t end = unit_begin[c.unit + 1];
  if (!last_block_done(counters + c.unit, end - begin, &s_last)) return;
  fold_unit<Norm>(chunk_partials, begin, end, out + c.unit, s_unit);
}

}  // namespace detail

// Writes the NormPolicy partial of every unit of the plan to d_partials
// (plan.num_units() floats, device memory) on `stream`. Enqueue only: no
// allocation, no synchronisation; capturable in a CUDA graph. Errors
// (error.cuh): an empty (default-constructed) plan or a null d_partials
// throws std::invalid_argument before anything is enqueued; a launch error
// is returned.
template <class Norm = L2Norm>
cudaError_t unit_partials(const NormPlan& plan, float* d_partials, cudaStream_t stream = 0) {
  if (plan.num_chunks() == 0)
    throw std::invalid_argument("gnmr: unit_partials: empty NormPlan (default-constructed or moved from)");
  if (d_partials == nullptr) throw std::invalid_argument("gnmr: unit_partials: null partials");
  detail::norm_chunks_kernel<Norm>
      <<<static_cast<unsigned int>(plan.num_chunks()), gnmr::detail::kNormThreads, 0, stream>>>(
          plan.d_chunks(), plan.d_unit_begin(), plan.d_chunk_partials(), plan.d_counters(),
          d_partials);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace gnmr
