// tests/support/dyn_runs.hpp — what the DynController tests (test_dyn.cpp,
// test_dyn_state.cpp) run controllers on: seeded rows of per-unit norms
// (noisy levels, spikes, a few NaNs), and a check that a DynController and a
// typed controller decide and report the same, bit for bit, on those rows.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gnmr/host/dyn_controller.hpp"
#include "gnmr/presets/make.hpp"
#include "aux_steps.hpp"

namespace dyntest {

// Rows of per-unit norms: noisy levels, spikes, and a few non-finite entries.
inline std::vector<std::vector<float>> rows(std::uint64_t seed, std::size_t units, int steps) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  std::vector<std::vector<float>> out;
  for (int t = 0; t < steps; ++t) {
    std::vector<float> r(units);
    for (std::size_t u = 0; u < units; ++u) {
      double x = (0.5 + 0.3 * u) * std::exp(0.2 * nd(rng));
      const double p = ud(rng);
      if (p < 0.03) x *= 3.0 + 30.0 * ud(rng);
      r[u] = p > 0.995 ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(x);
    }
    out.push_back(r);
  }
  return out;
}

inline std::size_t units_for(const std::string& name) { return gnmr::presets::is_global(name) ? 1 : 5; }

// Runs both on the same rows; decisions and reports must match bit for bit.
template <class C>
void same_run(gnmr::DynController& d, C& c, std::uint64_t seed, int steps = 400) {
  REQUIRE(d.num_units() == c.num_units());
  for (const auto& r : rows(seed, c.num_units(), steps)) {
    const auto& a = auxsteps::step_norms(d, r);
    const auto& b = auxsteps::step_norms(c, r);
    REQUIRE(a.step == b.step);
    REQUIRE(a.triggered == b.triggered);
    REQUIRE(a.skip_step == b.skip_step);
    for (std::size_t u = 0; u < c.num_units(); ++u) {
      INFO("step " << b.step << " unit " << u);
      REQUIRE(d.decisions()[u].scale == c.decisions()[u].scale);
      REQUIRE(d.decisions()[u].flags == c.decisions()[u].flags);
      REQUIRE(std::memcmp(&d.reports()[u], &c.reports()[u], sizeof(gnmr::UnitReport)) == 0);
    }
  }
}

inline int triggered_total(gnmr::DynController& d, std::uint64_t seed, int steps = 400) {
  int n = 0;
  for (const auto& r : rows(seed, d.num_units(), steps)) n += auxsteps::step_norms(d, r).triggered;
  return static_cast<int>(n);
}

}  // namespace dyntest
