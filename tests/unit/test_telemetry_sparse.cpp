// EventLog::write_sparse (the CUDA drain's path) must write exactly what
// write() writes from the full report array, given the units with events in
// unit order; here the compaction is done on the host from a real controller
// run with contention, non-finite norms and releases.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gnmr/host/controller.hpp"
#include "gnmr/io/telemetry.hpp"

TEST_CASE("EventLog::write_sparse equals write on the compacted units", "[telemetry]") {
  const std::size_t n = 40;
  gnmr::MaxO b;
  b.max_o = 2;
  b.lock = 3;
  gnmr::GnmrController<> c(n, {}, {}, {}, {}, b);
  std::vector<std::string> names;
  for (std::size_t i = 0; i < n; ++i) names.push_back("layer." + std::to_string(i));
  std::ostringstream full_s, sparse_s;
  gnmr::EventLog full(full_s), sparse(sparse_s);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> norms(n);
  std::vector<std::uint32_t> units;
  std::vector<gnmr::UnitReport> reps;
  std::size_t lines = 0;
  for (int t = 1; t <= 300; ++t) {
    for (std::size_t i = 0; i < n; ++i) {
      norms[i] = 1.0f + 0.1f * u(rng);
      if (u(rng) < 0.03f || (t % 25 == 0 && u(rng) < 0.3f)) norms[i] *= 10.0f;
      if (u(rng) < 0.005f) norms[i] = std::nanf("");
    }
    c.step_norms(norms);
    lines += full.write(c.summary(), c.reports().data(), n, names);
    units.clear();
    reps.clear();
    for (std::size_t i = 0; i < n; ++i)
      if (c.reports()[i].flags & (gnmr::kTriggered | gnmr::kGranted | gnmr::kDenied |
                                   gnmr::kReleased | gnmr::kNonFinite)) {
        units.push_back(static_cast<std::uint32_t>(i));
        reps.push_back(c.reports()[i]);
      }
    sparse.write_sparse(c.summary(), units.data(), reps.data(), units.size(), names.data());
  }
  full.flush();
  sparse.flush();
  CHECK(lines > 100);  // the run has events of every kind worth comparing
  CHECK(full_s.str().find("\"deny\"") != std::string::npos);
  CHECK(full_s.str().find("\"nonfinite\"") != std::string::npos);
  CHECK(full_s.str().find("\"release\"") != std::string::npos);
  CHECK(sparse_s.str() == full_s.str());
  CHECK_THROWS_AS(sparse.write_sparse(c.summary(), nullptr, reps.data(), 1), std::invalid_argument);
}
