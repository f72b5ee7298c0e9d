// GnmrTrigger with one threshold off (+inf): a unit whose ratio overflows to
// +inf must still rank first for a slot. Before the fix, r/tau = inf/inf was
// NaN, math::max kept the NaN, and evaluate_unit turned it into risk 0.
#include <catch2/catch.hpp>

#include <limits>
#include <vector>

#include "gnmr/host/controller.hpp"

TEST_CASE("GnmrTrigger: tau off, infinite ratio ranks first", "[trigger][inf]") {
  using namespace gnmr;
  GnmrTrigger t;
  t.tau = std::numeric_limits<float>::infinity();
  t.delta = 1.5f;
  t.warmup = 1;
  MaxO b;
  b.max_o = 1;
  GnmrController<> c(2, {}, {}, t, {}, b);
  // Steps 1-2: tiny norms, mean ~1e-30 (ratio floor eps = 1e-12), history r ~1e-18.
  c.step_norms(std::vector<float>{1e-30f, 1e-30f});
  c.step_norms(std::vector<float>{1e-30f, 1e-30f});
  // Step 3: unit 0 r ~ 10 (d ~ 10 > 1.5, risk ~ 6.7); unit 1 r = 1e30/1e-12 = +inf.
  const StepSummary& s = c.step_norms(std::vector<float>{1e-11f, 1e30f});
  const auto& r = c.reports();
  REQUIRE(s.triggered == 2u);
  CHECK(r[1].ratio == std::numeric_limits<float>::infinity());
  CHECK(r[1].risk == std::numeric_limits<float>::infinity());
  CHECK(r[0].risk == Approx(10.0 / 1.5).epsilon(1e-3));
  CHECK((r[1].flags & kGranted) != 0u);
  CHECK((r[0].flags & kDenied) != 0u);
}

TEST_CASE("GnmrTrigger: delta off, infinite ratio keeps risk +inf", "[trigger][inf]") {
  using namespace gnmr;
  GnmrTrigger t;
  t.tau = 3.0f;
  t.delta = std::numeric_limits<float>::infinity();
  t.warmup = 1;
  GnmrController<> c(1, {}, {}, t);
  c.step_norms(std::vector<float>{1e-30f});
  c.step_norms(std::vector<float>{1e-30f});
  c.step_norms(std::vector<float>{1e30f});
  CHECK(c.reports()[0].risk == std::numeric_limits<float>::infinity());
  CHECK((c.reports()[0].flags & kGranted) != 0u);
}
