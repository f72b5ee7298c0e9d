// The telemetry drain's order on the CPU (gnmr/detail/compact.hpp; the
// kernel is gnmr/cuda/telemetry.cuh's compact_events): the kernel's steps
// replayed block by block — each block's tile of 1,024 units compacted in
// unit order into its scratch (at most min(1024, capacity) kept), the counts
// turned into starts 256 blocks at a time, every output slot located with
// last_start_at_or_below — must give exactly the first `capacity` units
// with an event, in unit order, and the exact count, for dense, sparse,
// empty and bursty patterns over one to three chunks of block starts.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "gnmr/detail/compact.hpp"

namespace {

constexpr std::uint32_t kTile = 1024;     // units per drain block (kDrainTile)
constexpr std::uint32_t kThreads = 256;   // the last block's chunk of block starts

struct Drained {
  std::vector<std::uint32_t> units;
  std::uint32_t count;
};

Drained emulate(const std::vector<bool>& has, std::uint32_t capacity) {
  const std::uint32_t n = static_cast<std::uint32_t>(has.size());
  const std::uint32_t nb = (n + kTile - 1) / kTile;
  const std::uint32_t keep = capacity < kTile ? capacity : kTile;
  std::vector<std::uint32_t> count(nb, 0), scratch(static_cast<std::size_t>(nb) * keep, 0xffffffffu);
  for (std::uint32_t b = 0; b < nb; ++b)
    for (std::uint32_t i = b * kTile; i < n && i < (b + 1) * kTile; ++i)
      if (has[i]) {
        if (count[b] < keep) scratch[static_cast<std::size_t>(b) * keep + count[b]] = i;
        ++count[b];
      }
  Drained d{std::vector<std::uint32_t>(capacity, 0xffffffffu), 0};
  std::uint32_t total = 0;
  for (std::uint32_t c = 0; c < nb; c += kThreads) {
    std::uint32_t start[kThreads];
    std::uint32_t run = 0;
    for (std::uint32_t t = 0; t < kThreads; ++t) {  // the block-wide exclusive sum
      const std::uint32_t cnt = c + t < nb ? count[c + t] : 0u;
      start[t] = total + run;
      run += cnt;
    }
    const gnmr::detail::OutputRange r = gnmr::detail::chunk_outputs(total, run, capacity);
    for (std::uint32_t o = r.begin; o < r.end; ++o) {
      const std::uint32_t j = gnmr::detail::last_start_at_or_below(start, kThreads, o);
      d.units[o] = scratch[static_cast<std::size_t>(c + j) * keep + (o - start[j])];
    }
    total += run;
  }
  d.count = total;
  return d;
}

}  // namespace

TEST_CASE("last_start_at_or_below: the last block whose start is at or below o", "[compact]") {
  const std::uint32_t s[] = {0, 0, 3, 3, 3, 7, 9, 9};
  using gnmr::detail::last_start_at_or_below;
  CHECK(last_start_at_or_below(s, 8, 0) == 1);  // block 0 is empty: block 1 holds outputs 0..2
  CHECK(last_start_at_or_below(s, 8, 2) == 1);
  CHECK(last_start_at_or_below(s, 8, 3) == 4);
  CHECK(last_start_at_or_below(s, 8, 6) == 4);
  CHECK(last_start_at_or_below(s, 8, 8) == 5);
  CHECK(last_start_at_or_below(s, 8, 100) == 7);
  CHECK(gnmr::detail::chunk_outputs(10, 5, 12).end == 12);
  CHECK(gnmr::detail::chunk_outputs(13, 5, 12).end == 13);  // past the capacity: an empty range
}

TEST_CASE("the drain's gather keeps the first capacity events in unit order", "[compact]") {
  std::mt19937_64 rng(31);
  for (std::uint32_t n : {1u, 1000u, 1024u, 1025u, 70000u, 262144u, 262145u, 700001u}) {
    for (int pattern = 0; pattern < 5; ++pattern) {
      std::vector<bool> has(n);
      for (std::uint32_t i = 0; i < n; ++i) {
        switch (pattern) {
          case 0: has[i] = false; break;                          // quiet
          case 1: has[i] = rng() % 1000 == 0; break;              // sparse
          case 2: has[i] = rng() % 4 != 0; break;                 // dense
          case 3: has[i] = (i / 5000) % 3 == 1; break;            // bursts, empty tiles between
          default: has[i] = i == n - 1 || i % 99991 == 7; break;  // a few, one at the very end
        }
      }
      std::vector<std::uint32_t> want;
      for (std::uint32_t i = 0; i < n; ++i)
        if (has[i]) want.push_back(i);
      for (std::uint32_t cap : {1u, 2u, 100u, 1024u, 5000u, n}) {
        INFO("n " << n << " pattern " << pattern << " capacity " << cap);
        const Drained d = emulate(has, cap);
        REQUIRE(d.count == want.size());
        const std::size_t kept = want.size() < cap ? want.size() : cap;
        for (std::size_t o = 0; o < kept; ++o) REQUIRE(d.units[o] == want[o]);
      }
    }
  }
}
