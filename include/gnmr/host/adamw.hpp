// gnmr/host/adamw.hpp — the guarded AdamW for parameters in host memory.
//
// The same update as gnmr::cuda::adamw_step, bit for bit: both run the
// per-element arithmetic of gnmr/optim/adamw.hpp over the chunk plan of
// gnmr/plan/adamw_plan.hpp, in the same order. A CPU trainer (and the Python
// binding's CPU path) uses HostAdamW as its optimizer; the CUDA tests use
// adamw_step_host as the replay the device must match.
//
//   gnmr::HostAdamW opt(num_units);
//   opt.set_tensors(tensors.data(), tensors.size());  // once, or when they move
//   ...
//   controller.step(partials);
//   opt.step(params, lr, controller.decisions().data(), controller.summary().skip_step != 0);
//
// Determinism: the update of every element is a fixed sequence of correctly
// rounded fp32 operations of its own inputs; there is no reduction, so the
// result does not depend on the order of the chunks.
// Allocation: set_tensors builds the plan (allocates, validates, throws
// std::invalid_argument with the reason); step allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "gnmr/core/cpu.hpp"
#include "gnmr/core/parallel.hpp"
#include "gnmr/core/types.hpp"
#include "gnmr/optim/adamw.hpp"
#include "gnmr/plan/adamw_plan.hpp"

namespace gnmr {
namespace detail {

// The per-unit half of a step: each touched unit's state advanced and its
// coefficients in coef.
inline void adamw_units_host(const AdamWLayout& L, const AdamWParams& h, float lr,
                             const UnitDecision* decisions, AdamWUnitState* units,
                             std::size_t num_units, AdamWCoef* coef) {
  for (std::size_t u = 0; u < num_units; ++u) {
    if (L.unit_chunks[u] == 0) continue;  // no block of the kernel touches it
    const UnitDecision d = decisions ? decisions[u] : UnitDecision{1.0f, 0u};
    units[u] = adamw_advance(h, units[u], d.flags);
    coef[u] = adamw_coef(h, lr, units[u], d);
  }
}

// One chunk's elements with the gradient's dtype known at compile time.
// The tensors of a plan never overlap (build_adamw_layout checks), hence
// the restrict qualifiers: with them, and the dtype switch out of the loop,
// the compiler can vectorise it (given -fno-math-errno: sqrtf's errno path
// otherwise keeps every compiler scalar; the Python binding passes it). The
// arithmetic is adamw_element's, element by element, so the bits are the
// same however many lanes run it.
template <std::uint32_t kDtype, class G>
inline void adamw_chunk_elements(const AdamWCoef& k, float* __restrict p, const G* __restrict g,
                                 float* __restrict m, float* __restrict v, std::uint32_t n) {
  for (std::uint32_t j = 0; j < n; ++j) {
    float g_raw;
    if (kDtype == kDF32)
      g_raw = static_cast<float>(g[j]);
    else
      g_raw = ElemOps<kDtype>::decode(static_cast<std::uint16_t>(g[j]));
    adamw_element(k, p[j], g_raw, m[j], v[j]);
  }
}

// The same loop compiled for AVX2, chosen at run time where the CPU has it
// (gnmr/core/cpu.hpp). IEEE single-precision add,
// multiply, divide and square root are correctly rounded at any vector
// width, and contraction is off (gnmr's usage requirement), so both paths
// give the same bits (tests/unit/test_host_parallel.cpp checks them).
#if GNMR_HOST_X86_SIMD
template <std::uint32_t kDtype, class G>
__attribute__((target("avx2"))) void adamw_chunk_elements_avx2(const AdamWCoef& k, float* __restrict p,
                                                               const G* __restrict g, float* __restrict m,
                                                               float* __restrict v, std::uint32_t n) {
  adamw_chunk_elements<kDtype>(k, p, g, m, v, n);
}
#endif

template <std::uint32_t kDtype, class G>
inline void adamw_chunk_dispatch(const AdamWCoef& k, float* p, const G* g, float* m, float* v,
                                 std::uint32_t n, bool avx2) {
#if GNMR_HOST_X86_SIMD
  if (avx2) return adamw_chunk_elements_avx2<kDtype>(k, p, g, m, v, n);
#endif
  (void)avx2;
  adamw_chunk_elements<kDtype>(k, p, g, m, v, n);
}

// The per-element half over chunks [begin, end) of the plan.
// avx2: run the AVX2 build of the loop (host_has_avx2() by default; the
// tests force each path).
inline void adamw_chunks_host(const AdamWLayout& L, const AdamWCoef* coef, std::size_t begin,
                              std::size_t end, bool avx2 = host_has_avx2()) {
  for (std::size_t i = begin; i < end; ++i) {
    const AdamWChunk& c = L.chunks[i];
    const AdamWCoef k = chunk_coef(coef[c.unit], c);
    if (k.flags & kSkip) continue;
    switch (c.dtype) {
      case kDF32:
        adamw_chunk_dispatch<kDF32>(k, c.p, static_cast<const float*>(c.g), c.m, c.v, c.numel, avx2);
        break;
      case kDBF16:
        adamw_chunk_dispatch<kDBF16>(k, c.p, static_cast<const std::uint16_t*>(c.g), c.m, c.v, c.numel, avx2);
        break;
      default:
        adamw_chunk_dispatch<kDF16>(k, c.p, static_cast<const std::uint16_t*>(c.g), c.m, c.v, c.numel, avx2);
        break;
    }
  }
}

// One guarded step over a plan of host pointers: what the kernel writes.
// decisions may be null (unguarded); global_skip is the summary's skip_step.
// coef is scratch of units.size() entries. The units' half runs on the
// calling thread, the chunks through pfor (gnmr/core/parallel.hpp).
template <class ParallelFor = SerialFor>
inline void adamw_step_host(const AdamWLayout& L, const AdamWParams& h, float lr,
                            const UnitDecision* decisions, AdamWUnitState* units, std::size_t num_units,
                            AdamWCoef* coef, bool global_skip, ParallelFor&& pfor = ParallelFor{}) {
  if (global_skip) return;
  adamw_units_host(L, h, lr, decisions, units, num_units, coef);
  pfor(L.chunks.size(), [&L, coef](std::size_t begin, std::size_t end) {
    adamw_chunks_host(L, coef, begin, end);
  });
}

}  // namespace detail

// The replay a test compares the device with: one step over a plan built by
// detail::build_adamw_layout, advancing `units` (one state per unit).
inline void adamw_step_host(const detail::AdamWLayout& L, const AdamWParams& h, float lr,
                            const UnitDecision* decisions, std::vector<AdamWUnitState>& units,
                            bool global_skip = false) {
  if (L.unit_chunks.size() != units.size())
    throw std::invalid_argument("gnmr: adamw_step_host: one state per unit of the plan expected");
  std::vector<detail::AdamWCoef> coef(units.size());
  detail::adamw_step_host(L, h, lr, decisions, units.data(), units.size(), coef.data(), global_skip);
}

class HostAdamW {
 public:
  explicit HostAdamW(std::size_t num_units)
      : units_(num_units, detail::adamw_unit_init()), coef_(num_units) {
    if (num_units == 0) throw std::invalid_argument("gnmr: HostAdamW: num_units must be >= 1");
  }

  // The tensors to update (host pointers; validated; the plan is rebuilt).
  void set_tensors(const AdamWTensor* tensors, std::size_t n,
                   std::uint64_t chunk_elems = detail::kDefaultAdamWChunk) {
    layout_ = detail::build_adamw_layout(tensors, n, units_.size(), chunk_elems);
  }

  // One step. decisions: num_units() entries, or null for plain AdamW.
  // Throws std::invalid_argument (and changes nothing) on bad parameters.
  //
  // With an executor (gnmr/core/parallel.hpp), the work items are the
  // plan's chunks. Determinism: every element's update depends on its own inputs
  // and its unit's coefficients alone (computed first, on the calling
  // thread), so the result is bit-identical whatever the executor.
  void step(const AdamWParams& h, float lr, const UnitDecision* decisions, bool global_skip = false) {
    step(h, lr, decisions, global_skip, SerialFor{});
  }
  template <class ParallelFor>
  void step(const AdamWParams& h, float lr, const UnitDecision* decisions, bool global_skip,
            ParallelFor&& pfor) {
    const std::string bad = h.check();
    if (!bad.empty()) throw std::invalid_argument(bad);
    if (layout_.unit_chunks.size() != units_.size()) return;  // no tensors yet
    detail::adamw_step_host(layout_, h, lr, decisions, units_.data(), units_.size(), coef_.data(),
                            global_skip, pfor);
  }

  std::size_t num_units() const { return units_.size(); }
  // Per-unit bias-correction state, for checkpoints.
  const std::vector<AdamWUnitState>& unit_states() const { return units_; }
  void set_unit_states(const std::vector<AdamWUnitState>& s) {
    if (s.size() != units_.size())
      throw std::invalid_argument("gnmr: HostAdamW: one state per unit expected");
    units_ = s;
  }

 private:
  std::vector<AdamWUnitState> units_;
  std::vector<detail::AdamWCoef> coef_;
  detail::AdamWLayout layout_;
};

}  // namespace gnmr
