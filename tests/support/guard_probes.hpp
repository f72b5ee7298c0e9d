// tests/support/guard_probes.hpp — the probes that found triggered units left
// unbounded (docs/algorithm.md, "Denied units"; "Calibrated trigger"), as
// norm traces shared by the host test (tests/unit/test_guard_bounds.cpp) and
// the device test (tests/cuda/test_presets.cu), so both judge the same rows:
//   kCapDenied    40 calm steps, then x500 and x1000 on two units at once
//                 (the one-grant cap denies the second);
//   kHeld         40 calm steps, then x1000 on 4 of 24 units (a held step);
//   kSpikingPair  40 calm steps, then two units at x1000 and x800 for 60 steps;
//   kFirstStep    x1000 at step 1 and again at step 10 (a first-step spike
//                 must not blind the calibrated trigger).
// `bounded` is the property: a triggered unit's norm times its scale at most
// `factor` times its mean (a grant clips to kappa * mu = mu; the calibrated
// target is at most ceiling * mu = 16 mu).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gnmr/core/types.hpp"

namespace probes {

constexpr std::size_t kUnits = 24;

enum class Kind { kCapDenied, kHeld, kSpikingPair, kFirstStep };

struct Shape {
  const char* name;
  std::size_t units;
  int steps;
};
inline Shape shape(Kind k) {
  switch (k) {
    case Kind::kCapDenied: return {"cap-denied", kUnits, 41};
    case Kind::kHeld: return {"held", kUnits, 41};
    case Kind::kSpikingPair: return {"spiking-pair", kUnits, 100};
    default: return {"first-step", 4, 10};
  }
}

// A calm norm near 1 with a few percent of deterministic wobble, different
// per unit and step (the calibrated trigger needs a spread to learn).
inline float calm(std::size_t unit, int step) {
  const double w = std::sin(0.7 * static_cast<double>(step) + 1.3 * static_cast<double>(unit));
  return static_cast<float>(1.0 + 0.03 * w);
}

inline std::vector<float> calm_row(std::size_t n, int step) {
  std::vector<float> row(n);
  for (std::size_t i = 0; i < n; ++i) row[i] = calm(i, step);
  return row;
}

// The norms of probe k at step s (1-based).
inline std::vector<float> row(Kind k, int s) {
  std::vector<float> r = calm_row(shape(k).units, s);
  switch (k) {
    case Kind::kCapDenied:
      if (s == 41) {
        r[3] *= 500.0f;
        r[7] *= 1000.0f;
      }
      break;
    case Kind::kHeld:
      if (s == 41)
        for (std::size_t i : {2u, 9u, 14u, 20u}) r[i] *= 1000.0f;
      break;
    case Kind::kSpikingPair:
      if (s > 40) {
        r[5] *= 1000.0f;
        r[11] *= 800.0f;
      }
      break;
    case Kind::kFirstStep:
      if (s == 1 || s == 10) r[0] *= 1000.0f;
      break;
  }
  return r;
}

inline bool bounded(const gnmr::UnitReport& r, float factor) {
  return static_cast<double>(r.norm) * r.scale <= static_cast<double>(factor) * r.mean * (1.0 + 1e-5);
}

// Every triggered unit of a step left it bounded (16 mu), every unit in
// recovery at kappa * mu = mu; returns the number of units that did not.
inline std::size_t unbounded(const gnmr::UnitReport* reps, std::size_t n) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const gnmr::UnitReport& r = reps[i];
    if ((r.flags & gnmr::kTriggered) && !(r.flags & gnmr::kNonFinite) && !bounded(r, 16.0f)) ++bad;
    if ((r.flags & gnmr::kInRecovery) && !(r.flags & gnmr::kNonFinite) && !bounded(r, 1.0f)) ++bad;
  }
  return bad;
}

}  // namespace probes
