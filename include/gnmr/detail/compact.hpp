// gnmr/detail/compact.hpp — the arithmetic of the telemetry drain's gather
// (gnmr::cuda::TelemetryDrain, cuda/telemetry.cuh), apart from CUDA so that
// the CPU tests can drive it.
//
// The drain's blocks each compact their tile's events in unit order and
// publish a count; the last block turns the counts of 256 blocks at a time
// into starts (an exclusive prefix sum in block order, offset by the events
// of the blocks before), then each output slot o finds its block as the last
// one whose start is <= o, and its rank in that block as o - start. An empty
// block shares its start with the next block, which must win: hence "last".
// Pure integer functions, GNMR_HOST_DEVICE: the kernel and the CPU
// emulation (tests/unit/test_compact.cpp) run the same code.
//
// Determinism: integers only; the result depends on the counts, never on
// which block finished when.
#pragma once

#include <cstdint>

#include "gnmr/config.hpp"

namespace gnmr {
namespace detail {

// The last j in [0, m) with start[j] <= o, for non-decreasing start with
// start[0] <= o (m >= 1).
GNMR_HOST_DEVICE std::uint32_t last_start_at_or_below(const std::uint32_t* start, std::uint32_t m,
                                                      std::uint32_t o) {
  std::uint32_t lo = 0, hi = m;
  while (lo < hi) {
    const std::uint32_t mid = (lo + hi) / 2u;
    if (start[mid] <= o)
      lo = mid + 1u;
    else
      hi = mid;
  }
  return lo - 1u;
}

// The outputs [begin, end) that a chunk of blocks fills: its events are
// outputs [base, base + chunk_total), and only the first `capacity` outputs
// of the step are kept.
struct OutputRange {
  std::uint32_t begin, end;
};
GNMR_HOST_DEVICE OutputRange chunk_outputs(std::uint32_t base, std::uint32_t chunk_total, std::uint32_t capacity) {
  const std::uint32_t end = base + chunk_total < capacity ? base + chunk_total : capacity;
  return OutputRange{base, end > base ? end : base};
}

}  // namespace detail
}  // namespace gnmr
