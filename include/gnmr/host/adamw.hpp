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

#include "gnmr/core/types.hpp"
#include "gnmr/optim/adamw.hpp"
#include "gnmr/plan/adamw_plan.hpp"

namespace gnmr {
namespace detail {

// One guarded step over a plan of host pointers: what the kernel writes.
// decisions may be null (unguarded); global_skip is the summary's skip_step.
// coef is scratch of units.size() entries.
inline void adamw_step_host(const AdamWLayout& L, const AdamWParams& h, float lr,
                            const UnitDecision* decisions, AdamWUnitState* units, std::size_t num_units,
                            AdamWCoef* coef, bool global_skip) {
  if (global_skip) return;
  for (std::size_t u = 0; u < num_units; ++u) {
    if (L.unit_chunks[u] == 0) continue;  // no block of the kernel touches it
    const UnitDecision d = decisions ? decisions[u] : UnitDecision{1.0f, 0u};
    units[u] = adamw_advance(h, units[u], d.flags);
    coef[u] = adamw_coef(h, lr, units[u], d);
  }
  for (const AdamWChunk& c : L.chunks) {
    const AdamWCoef k = chunk_coef(coef[c.unit], c);
    if (k.flags & kSkip) continue;
    for (std::uint32_t i = 0; i < c.numel; ++i) adamw_element(k, c.p[i], load_grad(c.g, c.dtype, i), c.m[i], c.v[i]);
  }
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
  void step(const AdamWParams& h, float lr, const UnitDecision* decisions, bool global_skip = false) {
    const std::string bad = h.check();
    if (!bad.empty()) throw std::invalid_argument(bad);
    if (layout_.unit_chunks.size() != units_.size()) return;  // no tensors yet
    detail::adamw_step_host(layout_, h, lr, decisions, units_.data(), units_.size(), coef_.data(),
                            global_skip);
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
