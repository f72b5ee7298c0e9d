// A norm of exactly 0 (no gradient: an unrouted MoE expert, a frozen
// parameter) is not a sample by default. These traces pin that rule and the
// failure it prevents: with zeros fed, a unit whose first samples are all 0
// keeps mu = 0 for good and triggers on every later step.
#include <catch2/catch.hpp>

#include <vector>

#include "gnmr/host/controller.hpp"
#include "gnmr/policy/recovery_norm_replace.hpp"
#include "semantics_util.hpp"

using gnmr::GnmrController;

TEST_CASE("zero norms are not samples by default", "[semantics][zero]") {
  GnmrController<> c(1);
  const float zero = 0.0f, one = 1.0f;
  for (int t = 1; t <= 10; ++t) {
    c.step_norms(&zero, 1);
    const gnmr::UnitReport& r = c.reports()[0];
    SEM_FLAGS(r.flags, gnmr::kZeroNorm);  // no verdict, no warm-up progress
    CHECK(r.scale == 1.0f);
    CHECK(r.ratio == 0.0f);
    CHECK(gnmr::EmaMean::count(c.unit_states()[0].mean) == 0u);
    CHECK(c.summary().max_ratio_unit == -1);
  }
  // Ten real samples of 1, then a steady 1: never triggered, mean 1.
  for (int t = 11; t <= 40; ++t) {
    c.step_norms(&one, 1);
    CHECK((c.reports()[0].flags & gnmr::kTriggered) == 0u);
  }
  CHECK(c.reports()[0].mean == Approx(1.0f).epsilon(1e-5));
  // A zero in the middle of training leaves the statistic alone.
  const auto before = c.unit_states()[0];
  c.step_norms(&zero, 1);
  CHECK(semtest::bytes_of(c.unit_states()[0]) == semtest::bytes_of(before));
}

TEST_CASE("zero_is_sample = true feeds zeros, which the literal rule gets stuck on",
          "[semantics][zero]") {
  gnmr::ControllerOptions opt;
  opt.zero_is_sample = true;
  GnmrController<> c(1, {}, {}, {}, {}, {}, opt);
  const float zero = 0.0f, one = 1.0f;
  for (int t = 1; t <= 10; ++t) c.step_norms(&zero, 1);
  CHECK(gnmr::EmaMean::count(c.unit_states()[0].mean) == 10u);
  // mu = 0: r = 1 / 1e-12 triggers; the clamped feed min(1, 3 * 0) = 0 keeps mu at 0.
  int grants = 0;
  for (int t = 11; t <= 40; ++t) {
    c.step_norms(&one, 1);
    CHECK((c.reports()[0].flags & gnmr::kTriggered) != 0u);
    CHECK(c.reports()[0].mean == 0.0f);
    grants += (c.reports()[0].flags & gnmr::kGranted) ? 1 : 0;
  }
  CHECK(grants == 4);  // re-granted every lock (8 steps) over 30 steps
}

TEST_CASE("a zero norm inside a lock: the lock runs on, scale 1", "[semantics][zero]") {
  GnmrController<> c(1);
  const float one = 1.0f, spike = 10.0f, zero = 0.0f;
  for (int t = 1; t <= 20; ++t) c.step_norms(&one, 1);
  c.step_norms(&spike, 1);
  REQUIRE((c.reports()[0].flags & gnmr::kGranted) != 0u);
  c.step_norms(&zero, 1);
  const gnmr::UnitReport& r = c.reports()[0];
  SEM_FLAGS(r.flags, gnmr::kInRecovery | gnmr::kZeroNorm);
  CHECK(r.lock_left == 7);
  CHECK(r.scale == 1.0f);
}

TEST_CASE("NormReplace keeps zero norms out of its statistics unless they are samples",
          "[semantics][zero]") {
  using Stab = gnmr::GnmrController<gnmr::L2Norm, gnmr::NoMean, gnmr::AlwaysTrigger,
                                    gnmr::NormReplace, gnmr::Unlimited>;
  Stab c(1);
  const float one = 1.0f, zero = 0.0f;
  c.step_norms(&one, 1);
  const auto before = c.unit_states()[0].recovery;
  c.step_norms(&zero, 1);
  CHECK(semtest::bytes_of(c.unit_states()[0].recovery) == semtest::bytes_of(before));
  CHECK(c.decisions()[0].scale == 1.0f);
  // As a sample (the stabilizer preset's setting), the zero advances m and v.
  gnmr::ControllerOptions opt;
  opt.zero_is_sample = true;
  Stab d(1, {}, {}, {}, {}, {}, opt);
  d.step_norms(&one, 1);
  d.step_norms(&zero, 1);
  CHECK(d.unit_states()[0].recovery.m < before.m);
}
