// demo/promotion.hpp — which operators run in high precision at the next
// step: the promotion sources of the benchmark's arms.
//
// A promotion decided from step t's gradients takes effect from step t+1
// (docs/record/stability.md, Background §3): after each controller step the trainer computes the
// mask of promoted operators for the next forward and backward.
//
//   controller  an operator is promoted while its unit's decision carries
//               kPromote (gnmr-promote; any preset that sets the flag)
//   redirect    random-at-triggers: the controller runs as in gnmr-promote,
//               but each grant on an operator unit draws a random operator,
//               which is promoted instead for as long as the granted unit
//               carries kPromote (same steps, same lock length)
//   table       a precomputed [step][op] mask: random (episodes of
//               gnmr-promote's run moved to random operators and steps),
//               fixed-list (a static set, every step), high (every operator),
//               static-layers (the first and last blocks, every step),
//               late-switch (every operator for the last steps)
//
// next_promoted() is a GNMR_HOST_DEVICE function: the CPU trainer calls it,
// and on --device cuda a one-thread kernel runs the same code on the device
// decisions (cuda_backend.cu), so the promotion path needs no host copy.
//
// Determinism: integer arithmetic only; the random draws are a counter-based
// hash of (seed, step, unit), identical on the host and the device.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "gnmr/config.hpp"
#include "gnmr/core/types.hpp"

namespace demo {

enum class PromoteFrom : std::uint8_t { kNone, kController, kRedirect, kTable };

GNMR_HOST_DEVICE std::uint64_t mix64(std::uint64_t z) {  // splitmix64's finalizer
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// mask[op] for the next step from this step's decisions. redirect[unit]
// (kRedirect's state, -1 initially) holds the operator a granted unit's
// promotion goes to; table_row is the next step's row (kTable).
GNMR_HOST_DEVICE void next_promoted(PromoteFrom kind, const gnmr::UnitDecision* dec,
                                    const std::int32_t* op_of_unit, std::uint32_t n_units,
                                    std::uint32_t n_ops, std::int64_t step, std::uint64_t seed,
                                    std::int32_t* redirect, const std::uint8_t* table_row,
                                    std::uint8_t* mask) {
  for (std::uint32_t o = 0; o < n_ops; ++o) mask[o] = kind == PromoteFrom::kTable ? table_row[o] : 0u;
  if (kind != PromoteFrom::kController && kind != PromoteFrom::kRedirect) return;
  for (std::uint32_t u = 0; u < n_units; ++u) {
    const std::int32_t op = op_of_unit[u];
    const std::uint32_t f = dec[u].flags;
    if (op < 0 || !(f & gnmr::kPromote)) continue;
    if (kind == PromoteFrom::kController) {
      mask[op] = 1u;
      continue;
    }
    if (f & gnmr::kGranted) {
      const std::uint64_t h = mix64(seed ^ mix64(static_cast<std::uint64_t>(step) * 0x100000001b3ull + u));
      redirect[u] = static_cast<std::int32_t>(h % n_ops);
    }
    if (redirect[u] >= 0) mask[redirect[u]] = 1u;
  }
}

// A run of consecutive high-precision steps of one operator.
struct Episode {
  int op = 0, start = 0, len = 0;
};

// The episodes of a per-step mask history (masks[t-1] = step t's mask).
inline std::vector<Episode> episodes_of(const std::vector<std::vector<std::uint8_t>>& masks) {
  std::vector<Episode> ev;
  if (masks.empty()) return ev;
  const std::size_t n_ops = masks[0].size();
  for (std::size_t o = 0; o < n_ops; ++o) {
    int start = 0;
    for (std::size_t t = 0; t <= masks.size(); ++t) {
      const bool on = t < masks.size() && masks[t][o];
      if (on && !start) start = static_cast<int>(t) + 1;
      if (!on && start) {
        ev.push_back({static_cast<int>(o), start, static_cast<int>(t) + 1 - start});
        start = 0;
      }
    }
  }
  return ev;
}

// random: each episode moves to a uniformly drawn operator and start step,
// redrawn until it overlaps no episode already placed on that operator, so
// the total of promoted operator-steps is exactly the source's. `eligible`
// (empty: every operator) limits the draw to the operators that can run in
// low precision (not a pinned one); with every operator eligible the draws
// are those of the original table.
// Returns [steps + 1][n_ops] (row t = step t's mask; row 0 unused).
inline std::vector<std::vector<std::uint8_t>> random_table(const std::vector<Episode>& src, int n_ops,
                                                           int steps, std::uint64_t seed,
                                                           const std::vector<std::uint8_t>& eligible = {}) {
  std::vector<int> pool;
  for (int o = 0; o < n_ops; ++o)
    if (eligible.empty() || eligible[static_cast<std::size_t>(o)]) pool.push_back(o);
  if (pool.empty()) throw std::invalid_argument("random_table: no eligible operator");
  std::vector<std::vector<std::uint8_t>> t(static_cast<std::size_t>(steps) + 1,
                                           std::vector<std::uint8_t>(static_cast<std::size_t>(n_ops), 0));
  std::mt19937_64 rng(mix64(seed ^ 0x7261646e6f6dull));
  std::uniform_int_distribution<int> op(0, static_cast<int>(pool.size()) - 1);
  for (const Episode& e : src) {
    std::uniform_int_distribution<int> start(1, steps - e.len + 1);
    for (int tries = 0;; ++tries) {
      if (tries > 100000) throw std::runtime_error("random_table: cannot place the episodes");
      const int o = pool[static_cast<std::size_t>(op(rng))], s = start(rng);
      bool clash = false;
      for (int k = s; k < s + e.len && !clash; ++k) clash = t[static_cast<std::size_t>(k)][static_cast<std::size_t>(o)] != 0;
      if (clash) continue;
      for (int k = s; k < s + e.len; ++k) t[static_cast<std::size_t>(k)][static_cast<std::size_t>(o)] = 1;
      break;
    }
  }
  return t;
}

// static-layers (NVIDIA's NVFP4 recipe, scaled to the model's depth): the
// operators of the first and the last block ("h0.*", "h<layers-1>.*") in
// high precision at every step.
inline std::vector<std::vector<std::uint8_t>> ends_table(const std::vector<std::string>& op_names, int layers,
                                                         int steps) {
  std::vector<std::uint8_t> row(op_names.size(), 0);
  const std::string first = "h0.", last = "h" + std::to_string(layers - 1) + ".";
  for (std::size_t o = 0; o < op_names.size(); ++o)
    row[o] = op_names[o].rfind(first, 0) == 0 || op_names[o].rfind(last, 0) == 0;
  return std::vector<std::vector<std::uint8_t>>(static_cast<std::size_t>(steps) + 1, row);
}

// The share of the eligible operators that ends_table promotes.
inline double ends_share(const std::vector<std::string>& op_names, int layers,
                         const std::vector<std::uint8_t>& eligible) {
  const auto row = ends_table(op_names, layers, 0)[0];
  int on = 0, all = 0;
  for (std::size_t o = 0; o < row.size(); ++o)
    if (eligible[o]) all += 1, on += row[o];
  return all ? static_cast<double>(on) / all : 0.0;
}

// late-switch (the recipe's switch to high precision late in training):
// every eligible operator in high precision for the last round(share *
// steps) steps, so that the operator-steps spent equal `share` of all.
inline std::vector<std::vector<std::uint8_t>> late_table(double share, const std::vector<std::uint8_t>& eligible,
                                                         int steps) {
  const int late = static_cast<int>(std::lround(share * steps));
  std::vector<std::vector<std::uint8_t>> t(static_cast<std::size_t>(steps) + 1,
                                           std::vector<std::uint8_t>(eligible.size(), 0));
  for (int s = steps - late + 1; s <= steps; ++s)
    for (std::size_t o = 0; o < eligible.size(); ++o) t[static_cast<std::size_t>(s)][o] = eligible[o];
  return t;
}

inline int fixed_list_count(double share, int n_ops) {
  int best = 1;
  for (int k = 1; k <= n_ops; ++k)
    if (std::abs(k / static_cast<double>(n_ops) - share) < std::abs(best / static_cast<double>(n_ops) - share))
      best = k;
  return best;
}

// The last `count` operators in forward order (the head first), skipping
// the ones not `eligible` (empty: every operator).
inline std::vector<std::vector<std::uint8_t>> fixed_table(int count, int n_ops, int steps,
                                                          const std::vector<std::uint8_t>& eligible = {}) {
  std::vector<std::uint8_t> row(static_cast<std::size_t>(n_ops), 0);
  for (int o = n_ops - 1, left = count; o >= 0 && left > 0; --o)
    if (eligible.empty() || eligible[static_cast<std::size_t>(o)]) row[static_cast<std::size_t>(o)] = 1, --left;
  return std::vector<std::vector<std::uint8_t>>(static_cast<std::size_t>(steps) + 1, row);
}

}  // namespace demo
