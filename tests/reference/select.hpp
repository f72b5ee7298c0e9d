// tests/reference/select.hpp — the device's slot selection (phase 2 of the
// CUDA controller) replayed on the host.
//
// The radix passes are the GNMR_HOST_DEVICE steps of gnmr/step/select.hpp;
// the histograms and the per-block top-k pre-filter the kernels build with
// threads are built here with loops, so the CPU tests can check the device's
// choice against the host controller's full sort. Tests only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "gnmr/step/select.hpp"

namespace gnmr {
namespace reference {

using namespace gnmr::detail;  // the radix steps and SelectRule

// The radix select over a key array (0 = not a candidate) holding at least
// g >= 1 candidates; complete = the array holds every candidate (see
// radix_advance). No "all of them" shortcut here: after the pre-filter the
// array may hold exactly g keys while other blocks' candidates are outside it.
inline SelectRule radix_select_rule(const std::vector<std::uint64_t>& keys, std::uint32_t g,
                                    bool complete) {
  RadixState s{0u, 0u, g, 0u, 0u};
  int pass = 0;
  for (; pass < kRadixPasses && !s.done; ++pass) {
    std::uint32_t hist[256] = {};
    const int sh = radix_shift(pass);
    for (std::uint64_t k : keys)
      if (in_bucket(s, k)) ++hist[(k >> sh) & 0xffu];
    std::uint32_t above = 0;
    for (int d = 255; d >= 0; --d) {
      if (radix_digit_holds(above, hist[d], s.need)) {
        radix_advance(s, pass, static_cast<std::uint32_t>(d), above, hist[d], complete);
        break;
      }
      above += hist[d];
    }
  }
  std::uint64_t lo = ~0ull;
  if (s.take_min)
    for (std::uint64_t k : keys)
      if (in_bucket(s, k) && k < lo) lo = k;
  return radix_rule(s, lo, pass);
}

// The whole device phase 2 from per-unit keys: block counts, the optional
// per-block top-k pre-filter, then the select. held = units in recovery.
inline SelectRule emulate_device_select(const std::vector<std::uint64_t>& keys, std::uint32_t held,
                                        std::uint32_t slots,
                                        std::uint32_t block = kSelectThreads) {
  std::uint32_t cand = 0;
  for (std::uint64_t k : keys) cand += k != 0u;
  const std::uint32_t g = grants_wanted(slots, held, cand);
  if (g == 0u) return rule_none();
  if (cand <= g) return rule_all();
  const std::uint32_t k = topk_per_block(slots);
  if (k == 0u) return radix_select_rule(keys, g, true);
  std::vector<std::uint64_t> pre;
  for (std::size_t b = 0; b < keys.size(); b += block) {
    std::vector<std::uint64_t> blk(keys.begin() + static_cast<std::ptrdiff_t>(b),
                                   keys.begin() + static_cast<std::ptrdiff_t>(std::min(keys.size(), b + block)));
    std::sort(blk.begin(), blk.end(), std::greater<std::uint64_t>());
    for (std::uint32_t j = 0; j < k; ++j) pre.push_back(j < blk.size() ? blk[j] : 0u);
  }
  return radix_select_rule(pre, g, false);
}

}  // namespace reference
}  // namespace gnmr
