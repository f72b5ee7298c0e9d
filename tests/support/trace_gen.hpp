// tests/support/trace_gen.hpp — synthetic per-unit norm traces for the device
// controller tests (the CPU emulation in tests/unit and the GPU test in
// tests/cuda) and the CUDA benchmark (bench/cuda).
//
// A trace is a pure function of (seed, unit, step), so a test can produce
// step t for a million units without storing the trace. It mixes what the
// selection must survive: quiet noise, isolated spikes, burst steps where
// far more units spike than there are slots (contention), NaN and Inf, and
// groups of four units with identical norm histories, hence identical risk
// scores on every step (ties the selection must break by index).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace tracegen {

inline std::uint64_t mix(std::uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
inline double uniform(std::uint64_t seed, std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  const std::uint64_t h = mix(seed ^ mix(a ^ mix(b ^ mix(c))));
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

// Norm of `unit` at step t >= 1.
inline float norm(std::uint64_t seed, std::uint64_t unit, std::int64_t t) {
  const std::uint64_t g = unit / 4;  // tie groups
  const std::uint64_t ut = static_cast<std::uint64_t>(t);
  const double base = std::exp(6.0 * uniform(seed, g, 0, 1) - 3.0);  // 0.05 .. 20
  double x = base * (1.0 + 0.1 * (uniform(seed, g, ut, 2) - 0.5));
  const double u = uniform(seed, g, ut, 3);
  const bool burst = (t % 7) == 0 && t > 12;           // many units at once
  if (u < 0.01 || (burst && u < 0.25)) x *= 3.0 + 40.0 * uniform(seed, g, ut, 4);
  const double w = uniform(seed, unit, ut, 5);  // per unit, so groups split sometimes
  if (w < 0.002) return std::numeric_limits<float>::quiet_NaN();
  if (w < 0.003) return std::numeric_limits<float>::infinity();
  return static_cast<float>(x);
}

inline void fill(std::uint64_t seed, std::int64_t t, std::vector<float>& out) {
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = norm(seed, i, t);
}

// Step t of the partials (sums of squares) the preset GPU test feeds every
// preset on the host and the device. The trace's own spikes never make
// skip-step act (one unit, z > 6 over a 128-step window, 64 warm-up steps),
// so from step 106 on every 9th step one unit's norm is multiplied by 1000.
// Every preset but "none" must act within 130 steps (AdaGC warms up for
// 100): tests/unit/test_cuda_logic_traces.cpp checks that on the host.
inline void preset_partials(std::int64_t t, std::vector<float>& out) {
  fill(7000 + out.size(), t, out);
  for (float& x : out) x = x * x;
  if (t > 105 && t % 9 == 0) out[(static_cast<std::size_t>(t) * 37) % out.size()] *= 1e6f;
}

}  // namespace tracegen
