// gnmr/cuda/adamw.cuh — a ready fused multi-tensor AdamW that applies a
// controller's decisions (step (d), docs/algorithm.md): fp32 master weights and
// moments, fp32 / bf16 / fp16 gradients, one kernel launch per step, the
// no-decay group (AdamWTensor::weight_decay = false) included.
//
//   gnmr::cuda::AdamWPlan opt(tensors, num_units);                  // once
//   gnmr::cuda::adamw_step(opt, hyper, ctl.decisions(), stream);     // every step
//
// One 256-thread block per chunk of one tensor. The block reads its unit's
// decision once: a skipped unit's blocks return before touching memory (so
// a NaN gradient there reaches nothing, and costs no bandwidth); otherwise
// every element runs gnmr::detail::adamw_element (gnmr/plan/adamw_plan.hpp),
// with 16-byte loads where the four arrays allow. The per-unit
// bias-correction step lives on the device: every block derives the unit's
// next state from the current one, and the unit's last block (integer
// counter) stores it. Enqueue only, graph capturable; pass the learning
// rate through device memory (d_lr) when a captured graph must follow a
// schedule.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "gnmr/cuda/accessors.cuh"
#include "gnmr/cuda/chunk_plan.cuh"
#include "gnmr/cuda/error.cuh"
#include "gnmr/cuda/grid.cuh"
#include "gnmr/cuda/memory.cuh"
#include "gnmr/plan/adamw_plan.hpp"

namespace gnmr {
namespace cuda {

struct AdamWPlanOptions {
  std::uint64_t chunk_elems = gnmr::detail::kDefaultAdamWChunk;  // multiple of 8
};

class AdamWPlan {
 public:
  using UnitState = gnmr::AdamWUnitState;

  AdamWPlan() = default;
  // Validates (std::invalid_argument), builds and uploads the chunk table and
  // the per-unit state (synchronously: setup time).
  AdamWPlan(const AdamWTensor* tensors, std::size_t n, std::size_t num_units, AdamWPlanOptions opt = {})
      : AdamWPlan(gnmr::detail::build_adamw_layout(tensors, n, num_units, opt.chunk_elems), nullptr, 0) {}
  AdamWPlan(const std::vector<AdamWTensor>& tensors, std::size_t num_units, AdamWPlanOptions opt = {})
      : AdamWPlan(tensors.data(), tensors.size(), num_units, opt) {}

  // Two-phase form with a caller-owned workspace.
  static std::size_t workspace_bytes(const AdamWTensor* tensors, std::size_t n, std::size_t num_units,
                                     AdamWPlanOptions opt = {}) {
    const auto L = gnmr::detail::build_adamw_layout(tensors, n, num_units, opt.chunk_elems);
    return carve(nullptr, L.chunks.size(), num_units).bytes;
  }
  AdamWPlan(const AdamWTensor* tensors, std::size_t n, std::size_t num_units, void* d_workspace,
            std::size_t ws_bytes, AdamWPlanOptions opt = {})
      : AdamWPlan(gnmr::detail::build_adamw_layout(tensors, n, num_units, opt.chunk_elems), d_workspace,
                  ws_bytes) {}

  std::size_t num_units() const { return units_; }
  std::size_t num_chunks() const { return chunks_; }
  std::uint64_t elements() const { return elements_; }
  std::uint64_t bytes_per_step() const { return bytes_; }  // minimum traffic: p,g,m,v read, p,m,v written

  const gnmr::detail::AdamWChunk* d_chunks() const { return v_.t.chunks; }
  const std::uint32_t* d_unit_chunks() const { return v_.t.unit_index; }
  unsigned int* d_counters() const { return v_.t.counters; }
  UnitState* d_unit_states() const { return v_.state; }

  // Per-unit step counters and beta powers (blocking copies, device-wide
  // synchronisation).
  std::vector<UnitState> copy_unit_states() const {
    return download(v_.state, units_, "AdamWPlan::copy_unit_states");
  }
  void restore_unit_states(const std::vector<UnitState>& s) {
    if (s.size() != units_)
      throw std::invalid_argument("gnmr: AdamWPlan::restore_unit_states: expected " +
                                  std::to_string(units_) + " unit states (one per unit), got " +
                                  std::to_string(s.size()));
    device_barrier("AdamWPlan::restore_unit_states");  // no step in flight still reads the state
    upload(v_.state, s.data(), units_, "AdamWPlan::restore_unit_states");
    device_barrier("AdamWPlan::restore_unit_states");
  }
  void reset() { restore_unit_states(std::vector<UnitState>(units_, gnmr::detail::adamw_unit_init())); }

 private:
  using Tables = detail::ChunkTables<gnmr::detail::AdamWChunk>;
  struct Views {
    Tables t;  // unit_index: chunks per unit
    UnitState* state = nullptr;
    std::size_t bytes = 0;
  };
  static Views carve(void* base, std::size_t chunks, std::size_t units) {
    Carver c(base);
    Views v;
    v.t = Tables::carve(c, chunks, units, units);
    v.state = c.take<UnitState>(units);
    v.bytes = c.bytes();
    return v;
  }
  AdamWPlan(const gnmr::detail::AdamWLayout& L, void* d_workspace, std::size_t ws_bytes)
      : units_(L.unit_chunks.size()), chunks_(L.chunks.size()), elements_(L.elements), bytes_(L.bytes) {
    const std::size_t need = carve(nullptr, chunks_, units_).bytes;
    v_ = carve(acquire_workspace(own_, d_workspace, ws_bytes, need, "AdamWPlan"), chunks_, units_);
    v_.t.upload(L.chunks, L.unit_chunks, units_, "AdamWPlan");
    reset();  // uploads the unit states between two device barriers
  }

  DeviceBuffer own_;
  Views v_;
  std::size_t units_ = 0;
  std::size_t chunks_ = 0;
  std::uint64_t elements_ = 0;
  std::uint64_t bytes_ = 0;
};

namespace detail {

// Four consecutive gradient elements from an aligned address.
template <std::uint32_t D>
__device__ __forceinline__ float4 load_grad4(const void* g, std::uint32_t q) {
  if constexpr (D == gnmr::detail::kDF32) {
    return __ldg(static_cast<const float4*>(g) + q);
  } else {
    using E = gnmr::detail::ElemOps<D>;
    const uint2 u = __ldg(static_cast<const uint2*>(g) + q);
    return make_float4(E::decode(static_cast<std::uint16_t>(u.x & 0xffffu)),
                       E::decode(static_cast<std::uint16_t>(u.x >> 16)),
                       E::decode(static_cast<std::uint16_t>(u.y & 0xffffu)),
                       E::decode(static_cast<std::uint16_t>(u.y >> 16)));
  }
}

__device__ __forceinline__ void adamw4(const gnmr::detail::AdamWCoef& k, float4& p, const float4& g, float4& m,
                                       float4& v) {
  gnmr::detail::adamw_element(k, p.x, g.x, m.x, v.x);
  gnmr::detail::adamw_element(k, p.y, g.y, m.y, v.y);
  gnmr::detail::adamw_element(k, p.z, g.z, m.z, v.z);
  gnmr::detail::adamw_element(k, p.w, g.w, m.w, v.w);
}

template <std::uint32_t D>
__device__ __forceinline__ void adamw_chunk_vec(const gnmr::detail::AdamWChunk& c,
                                                const gnmr::detail::AdamWCoef& k) {
  float4* p4 = reinterpret_cast<float4*>(c.p);
  float4* m4 = reinterpret_cast<float4*>(c.m);
  float4* v4 = reinterpret_cast<float4*>(c.v);
  const std::uint32_t nq = c.numel / 4u;
  constexpr std::uint32_t B = gnmr::detail::kAdamWThreads;
  std::uint32_t q = threadIdx.x;
  // Two groups in flight: their loads are issued before either is stored.
  for (; q + B < nq; q += 2 * B) {
    float4 p0 = p4[q], p1 = p4[q + B];
    float4 m0 = m4[q], m1 = m4[q + B];
    float4 v0 = v4[q], v1 = v4[q + B];
    const float4 g0 = load_grad4<D>(c.g, q), g1 = load_grad4<D>(c.g, q + B);
    adamw4(k, p0, g0, m0, v0);
    adamw4(k, p1, g1, m1, v1);
    p4[q] = p0;
    m4[q] = m0;
    v4[q] = v0;
    p4[q + B] = p1;
    m4[q + B] = m1;
    v4[q + B] = v1;
  }
  for (; q < nq; q += B) {
    float4 p0 = p4[q], m0 = m4[q], v0 = v4[q];
    const float4 g0 = load_grad4<D>(c.g, q);
    adamw4(k, p0, g0, m0, v0);
    p4[q] = p0;
    m4[q] = m0;
    v4[q] = v0;
  }
  for (std::uint32_t i = nq * 4u + threadIdx.x; i < c.numel; i += B)
    gnmr::detail::adamw_element(k, c.p[i], gnmr::detail::load_grad(c.g, c.dtype, i), c.m[i], c.v[i]);
}

// A template only so that the header can be included by several .cu files.
template <int = 0>
__global__ void __launch_bounds__(gnmr::detail::kAdamWThreads)
    adamw_kernel(const gnmr::detail::AdamWChunk* __restrict__ chunks, AdamWParams h,
                 const float* __restrict__ d_lr, const UnitDecision* __restrict__ dec,
                 gnmr::AdamWUnitState* ust, const std::uint32_t* __restrict__ unit_chunks,
                 unsigned int* counters, const StepSummary* __restrict__ summary) {
  __shared__ int s_last;
  // A suggested global skip (GlobalSkip, Ladder's top rung) leaves every
  // tensor and every unit's state as it was, like a skipped unit.
  if (summary != nullptr && step_skipped(summary)) return;
  const gnmr::detail::AdamWChunk c = chunks[blockIdx.x];
  const UnitDecision d = dec ? decision(dec, c.unit) : UnitDecision{1.0f, 0u};
  if (d.flags & kSkip) return;  // the whole unit: nothing read, nothing written, state kept
  const float lr = d_lr ? *d_lr : h.lr;
  const gnmr::AdamWUnitState s1 = gnmr::detail::adamw_advance(h, ust[c.unit], d.flags);
  const gnmr::detail::AdamWCoef k = gnmr::detail::chunk_coef(gnmr::detail::adamw_coef(h, lr, s1, d), c);
  const std::uintptr_t pmv = reinterpret_cast<std::uintptr_t>(c.p) | reinterpret_cast<std::uintptr_t>(c.m) |
                             reinterpret_cast<std::uintptr_t>(c.v);
  const std::uintptr_t ga = reinterpret_cast<std::uintptr_t>(c.g);
  const bool vec = (pmv & 15u) == 0u && (ga & (4u * gnmr::detail::dtype_size(c.dtype) - 1u)) == 0u;
  if (vec && c.dtype == gnmr::detail::kDF32) {
    adamw_chunk_vec<gnmr::detail::kDF32>(c, k);
  } else if (vec && c.dtype == gnmr::detail::kDBF16) {
    adamw_chunk_vec<gnmr::detail::kDBF16>(c, k);
  } else if (vec) {
    adamw_chunk_vec<gnmr::detail::kDF16>(c, k);
  } else {
    for (std::uint32_t i = threadIdx.x; i < c.numel; i += gnmr::detail::kAdamWThreads)
      gnmr::detail::adamw_element(k, c.p[i], gnmr::detail::load_grad(c.g, c.dtype, i), c.m[i], c.v[i]);
  }
  // Every block of the unit has read ust[unit] before it counts itself in.
  if (last_block_done(counters + c.unit, unit_chunks[c.unit], &s_last) && threadIdx.x == 0) ust[c.unit] = s1;
}

}  // namespace detail

// One AdamW step over every tensor of the plan. decisions: the controller's
// device array (num_units, 8-byte aligned), or nullptr for an unguarded
// step. d_lr: optional device pointer overriding h.lr. d_summary: the
// controller's summary (DeviceController::summary()); when given, a step
// whose skip_step is set (GlobalSkip, Ladder's top rung) changes nothing —
// pass it whenever the recovery policy can ask for a global skip. Enqueue
// only. Errors (error.cuh): an empty (default-constructed) plan or invalid
// hyperparameters throw std::invalid_argument before anything is enqueued;
// a launch error is returned.
inline cudaError_t adamw_step(AdamWPlan& plan, const AdamWParams& h, const UnitDecision* decisions,
                              cudaStream_t stream = 0, const float* d_lr = nullptr,
                              const StepSummary* d_summary = nullptr) {
  if (plan.num_chunks() == 0)
    throw std::invalid_argument("gnmr: adamw_step: empty AdamWPlan (default-constructed or moved from)");
  const std::string bad = h.check();  // empty strings: no heap allocation
  if (!bad.empty()) throw std::invalid_argument(bad);
  detail::adamw_kernel<<<static_cast<unsigned int>(plan.num_chunks()), gnmr::detail::kAdamWThreads, 0,
                         stream>>>(plan.d_chunks(), h, d_lr, decisions, plan.d_unit_states(),
                                   plan.d_unit_chunks(), plan.d_counters(), d_summary);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace gnmr
