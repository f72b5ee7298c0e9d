// Step-by-step semantics of SystemicRule::max_grants (gnmr/step/systemic.hpp,
// docs/algorithm.md "Systemic steps"): at most that many slots are granted
// on one step, to the highest risks (ties to the lower index); the rest of
// the step's candidates are denied; the cap is per step (the next step's
// candidates get the slots still free); a held step grants none; 0 (and the
// rule off) is the uncapped selection, bit for bit. And the calibrated
// preset (max_grants 1): of two operators that trigger together only the
// riskier is promoted.
//
// The traces use EmaMean{beta = 0.5}, delta = +inf and warm-up 2, so after
// two steps of norm 1 every mean is exactly 1, r = n and the risk is
// r / tau (as in test_semantics_systemic.cpp).
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "../support/trace_gen.hpp"
#include "gnmr/presets/make.hpp"
#include "gnmr/presets/typed.hpp"
#include "semantics_util.hpp"

using namespace semtest;
using gnmr::kDenied;
using gnmr::kGranted;
using gnmr::kTriggered;
using gnmr::SystemicAction;

namespace {

gnmr::ControllerOptions capped(SystemicAction a, double share, std::uint32_t cap, std::uint32_t min_count = 0) {
  gnmr::ControllerOptions o = systemic(a, share);
  o.systemic.max_grants = cap;
  o.systemic.min_count = min_count;
  return o;
}

std::vector<std::size_t> with_flag(const Ctl& c, std::uint32_t flag) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < c.num_units(); ++i)
    if (c.reports()[i].flags & flag) out.push_back(i);
  return out;
}

using Ids = std::vector<std::size_t>;

}  // namespace

TEST_CASE("step_grants: none on a held step, at most max_grants else, uncapped at 0 or off", "[semantics][systemic]") {
  using gnmr::detail::step_grants;
  gnmr::SystemicRule r;
  r.max_grants = 1;
  CHECK(step_grants(r, 2, 9, 4) == 4u);  // the rule off: no cap, no hold
  r.action = SystemicAction::kHold;
  CHECK(step_grants(r, 2, 3, 4) == 0u);  // 3 > C = 2: held
  CHECK(step_grants(r, 2, 2, 2) == 1u);
  CHECK(step_grants(r, 2, 1, 1) == 1u);
  CHECK(step_grants(r, 2, 2, 0) == 0u);  // nothing wanted (no free slot)
  r.action = SystemicAction::kClipTriggered;
  CHECK(step_grants(r, 2, 3, 4) == 1u);  // clip-triggered never holds; the cap still applies
  r.max_grants = 0;
  CHECK(step_grants(r, 2, 2, 3) == 3u);
  r.max_grants = 5;
  CHECK(step_grants(r, 9, 4, 3) == 3u);  // a cap above the wish changes nothing
}

TEST_CASE("max_grants: the riskiest are granted, the others denied, ties to the lower index", "[semantics][systemic]") {
  // Six units, maxO 4, share 1 (C = N: never systemic), cap 2. Step 3: units
  // 1, 2, 4, 5 trigger with r = 5, 9, 9, 7: units 2 and 4 (r = 9, the tie
  // to the lower index first) are granted; 1 and 5 are denied.
  Ctl c = warmed(6, capped(SystemicAction::kClipTriggered, 1.0, 2), 4);
  const gnmr::StepSummary& s = c.step_norms(std::vector<float>{1.0f, 5.0f, 9.0f, 1.0f, 9.0f, 7.0f});
  CHECK(with_flag(c, kTriggered) == Ids{1, 2, 4, 5});
  CHECK(with_flag(c, kGranted) == Ids{2, 4});
  CHECK(with_flag(c, kDenied) == Ids{1, 5});
  CHECK(s.granted == 2u);
  CHECK(s.systemic == 0u);
  // Step 4: units 1 and 5 again (their means 2: the triggered samples were
  // fed as tau * mu = 3, so r = 4.5); two slots are free and the cap is per
  // step: both granted.
  c.step_norms(std::vector<float>{1.0f, 9.0f, 1.0f, 1.0f, 1.0f, 9.0f});
  CHECK(with_flag(c, kGranted) == Ids{1, 5});
}

TEST_CASE("max_grants 0, or a cap above the free slots, is the uncapped selection bit for bit", "[semantics][systemic]") {
  const std::size_t n = 64;
  for (const std::uint32_t cap : {0u, 4u, 100u}) {
    Ctl a = make(n, ema(0.9f), trig(2.0f, 1.5f, 3), maxo(4, 5, 1), 1.0f, capped(SystemicAction::kClipTriggered, 0.5, cap));
    Ctl b = make(n, ema(0.9f), trig(2.0f, 1.5f, 3), maxo(4, 5, 1), 1.0f, systemic(SystemicAction::kClipTriggered, 0.5));
    std::vector<float> row(n);
    std::size_t granted = 0;
    for (int t = 1; t <= 300; ++t) {
      tracegen::fill(7, t, row);
      a.step_norms(row);
      b.step_norms(row);
      granted += a.summary().granted;
      for (std::size_t i = 0; i < n; ++i) {
        INFO("cap " << cap << " step " << t << " unit " << i);
        REQUIRE(std::memcmp(&a.reports()[i], &b.reports()[i], sizeof(gnmr::UnitReport)) == 0);
        REQUIRE(std::memcmp(&a.decisions()[i], &b.decisions()[i], sizeof(gnmr::UnitDecision)) == 0);
      }
    }
    CHECK(granted > 10u);
  }
}

TEST_CASE("max_grants 1 under hold: one grant for a pair, none above C", "[semantics][systemic]") {
  // Ten units, C = max(floor(0.1 * 10), 2) = 2, maxO 4.
  Ctl c = warmed(10, capped(SystemicAction::kHold, 0.1, 1, 2), 4);
  c.step_norms(std::vector<float>{1, 1, 1, 6, 1, 1, 8, 1, 1, 1});  // a pair: the riskier (unit 6) alone
  CHECK(with_flag(c, kGranted) == Ids{6});
  CHECK(with_flag(c, kDenied) == Ids{3});
  CHECK(c.summary().systemic == 0u);
  c.step_norms(std::vector<float>{1, 9, 1, 1, 9, 1, 1, 1, 9, 1});  // three: held, no grant
  CHECK(with_flag(c, kGranted).empty());
  CHECK(c.summary().systemic == static_cast<std::uint32_t>(SystemicAction::kHold));
}

TEST_CASE("gnmr-calibrated promotes one of two operators that trigger together", "[semantics][calibrated]") {
  // 24 units of calm noise, then a same-step pair (x1000, x500) and, later,
  // a lone spike: the pair's riskier unit is granted and promoted, the other
  // denied; the lone spike is granted.
  namespace P = gnmr::presets;
  auto ctl = P::gnmr_calibrated(24);
  CHECK(ctl.policies().opt.systemic.max_grants == 1u);
  std::vector<float> row(24);
  auto calm = [&](int t) {
    for (std::size_t u = 0; u < row.size(); ++u)
      row[u] = 1.0f + 0.01f * static_cast<float>((t * 31 + static_cast<int>(u) * 17) % 7);
  };
  for (int t = 1; t <= 60; ++t) {
    calm(t);
    ctl.step_norms(row.data(), row.size());
  }
  calm(61);
  row[5] *= 500.0f;
  row[6] *= 1000.0f;
  ctl.step_norms(row.data(), row.size());
  CHECK((ctl.reports()[5].flags & kTriggered) != 0u);
  CHECK((ctl.reports()[6].flags & (kTriggered | kGranted)) == (kTriggered | kGranted));
  CHECK((ctl.reports()[5].flags & kDenied) != 0u);
  CHECK(ctl.summary().granted == 1u);
  for (int t = 62; t <= 80; ++t) {
    calm(t);
    if (t == 75) row[9] *= 1000.0f;
    ctl.step_norms(row.data(), row.size());
    if (t == 75) CHECK((ctl.reports()[9].flags & kGranted) != 0u);
  }
}

TEST_CASE("the override systemic_max_grants reaches the calibrated rule, alone and in the default", "[semantics][systemic]") {
  namespace P = gnmr::presets;
  P::Options o;
  o.systemic_max_grants = 0;  // the cap off: both operators of a pair granted
  for (const char* name : {"gnmr-calibrated", "default"}) {
    INFO(name);
    auto c = P::make(name, 24, o);
    std::vector<float> row(24);
    for (int t = 1; t <= 61; ++t) {
      for (std::size_t u = 0; u < row.size(); ++u)
        row[u] = 1.0f + 0.01f * static_cast<float>((t * 31 + static_cast<int>(u) * 17) % 7);
      if (t == 61) {
        row[5] *= 500.0f;
        row[6] *= 1000.0f;
      }
      c->step_norms(row.data(), row.size());
    }
    CHECK((c->reports()[5].flags & kGranted) != 0u);
    CHECK((c->reports()[6].flags & kGranted) != 0u);
  }
  P::Options bad;
  bad.systemic_max_grants = -1;
  CHECK_THROWS_WITH(P::make("gnmr-calibrated", 4, bad), Catch::Contains("systemic_max_grants"));
  P::Options off_rule;
  off_rule.systemic_max_grants = 1;  // gnmr-promote has the rule off: the knob needs an action
  CHECK_THROWS_WITH(P::make("gnmr-promote", 4, off_rule), Catch::Contains("systemic_action"));
}
