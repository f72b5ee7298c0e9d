// Precision promotion, step by step (docs/algorithm.md, Precision
// promotion): the decisions of step s carry kPromote for the units in
// recovery at s, and a framework reads them before the forward of step
// s+1, so a grant at step t promotes the forward/backward of steps
// t+1 .. t+lock. Traced by hand: a grant, the lock's end, a re-grant at the
// lock's end, a trigger inside the lock, a denial, a cool-down, skipped and
// gradient-free steps inside the lock; then the same rule as a property of
// random contended runs.
//
// Non-finite steps inside a lock are left out on purpose: whether the
// safety action keeps kPromote is the controller core's rule (see the doc).
//
// Traces: EmaMean{0.5}, tau = 3, delta = +inf, warm-up 2; quiet steps carry
// a norm of 1 and spikes 100. Steps 1-2 give mu = 1; every value fed after
// that is 1 or a clamped min(100, 3 mu) >= 3, so mu >= 1 and a quiet step
// never triggers (r <= 1), and with at most three spikes in a row the mean
// stays below 10 (each spike at most doubles it), so a spike always does.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gnmr/host/controller.hpp"
#include "gnmr/presets/typed.hpp"
#include "semantics_util.hpp"

using namespace semtest;

namespace {

template <class Recovery>
using PCtl = gnmr::GnmrController<gnmr::L2Norm, gnmr::EmaMean, gnmr::GnmrTrigger, Recovery, gnmr::MaxO>;
using gnmr::presets::ClipAndPromote;

ClipAndPromote clip_promote() { return ClipAndPromote{gnmr::ClipToMean{1.0f}, {gnmr::PromotePrecision{}}}; }

// What a training loop does with the controller: before the forward of step
// s it reads the decisions of step s-1 (none before step 1), runs the step,
// then hands the controller that step's norms.
template <class C>
struct Loop {
  C& ctl;
  std::vector<std::set<int>> high;  // per unit: the steps whose forward/backward ran promoted
  explicit Loop(C& c) : ctl(c), high(c.num_units()) {}
  const gnmr::StepSummary& step(const std::vector<float>& norms) {
    const int s = static_cast<int>(ctl.steps_done()) + 1;
    for (std::size_t u = 0; u < ctl.num_units(); ++u)
      if (s > 1 && (ctl.decisions()[u].flags & gnmr::kPromote)) high[u].insert(s);
    return ctl.step_norms(norms);
  }
  bool promoted(std::size_t u) const { return (ctl.decisions()[u].flags & gnmr::kPromote) != 0u; }
};

std::set<int> range(int a, int b) {
  std::set<int> s;
  for (int t = a; t <= b; ++t) s.insert(t);
  return s;
}

}  // namespace

TEST_CASE("promotion lifetime: a grant at t promotes the forwards of t+1 .. t+lock", "[promotion]") {
  // Two units, maxO = 1, lock = 3.
  PCtl<ClipAndPromote> c(2, {}, ema(0.5f), trig(3.0f, kInf, 2), clip_promote(), maxo(1, 3, 0));
  Loop<decltype(c)> L(c);
  L.step({1, 1});
  L.step({1, 1});
  // t = 3: both spike; unit 0 (r = 100) wins the one slot over unit 1 (r = 50),
  // which is denied and not promoted. The step's own gradient is clipped to
  // mu: scale 1/100. Its forward already ran (in low precision).
  L.step({100, 50});
  SEM_FLAGS(c.decisions()[0].flags, gnmr::kTriggered | gnmr::kGranted | gnmr::kInRecovery | gnmr::kPromote);
  SEM_FLAGS(c.decisions()[1].flags, gnmr::kTriggered | gnmr::kDenied);
  CHECK(c.decisions()[0].scale == 0.01f);
  // t = 4, 5: still in recovery, decisions keep kPromote (lock_left 2, 1).
  L.step({1, 1});
  CHECK(L.promoted(0));
  CHECK(c.reports()[0].lock_left == 2);
  L.step({1, 1});
  CHECK(L.promoted(0));
  CHECK(c.reports()[0].lock_left == 1);
  // t = 6 = 3 + lock: released, no kPromote; the forward of step 6 was the
  // lock's last promoted one.
  L.step({1, 1});
  SEM_FLAGS(c.decisions()[0].flags, gnmr::kReleased);
  L.step({1, 1});
  CHECK(L.high[0] == range(4, 6));
  CHECK(L.high[1].empty());
  CHECK(L.high[0].size() == 3u);  // exactly lock forwards: none is spent on step 3
}

TEST_CASE("promotion lifetime: re-grant at the lock's end, trigger inside the lock", "[promotion]") {
  PCtl<ClipAndPromote> c(1, {}, ema(0.5f), trig(3.0f, kInf, 2), clip_promote(), maxo(4, 3, 0));
  Loop<decltype(c)> L(c);
  L.step({1});
  L.step({1});
  L.step({100});  // t = 3: granted, in recovery 3..5
  L.step({100});  // t = 4: triggers inside its lock: neither granted nor denied, lock not extended
  SEM_FLAGS(c.decisions()[0].flags, gnmr::kTriggered | gnmr::kInRecovery | gnmr::kPromote);
  CHECK(c.reports()[0].lock_left == 2);
  L.step({1});    // t = 5: last lock step
  L.step({100});  // t = 6 = 3 + lock: released and granted again (cool-down 0)
  SEM_FLAGS(c.decisions()[0].flags,
            gnmr::kReleased | gnmr::kTriggered | gnmr::kGranted | gnmr::kInRecovery | gnmr::kPromote);
  for (int t = 7; t <= 10; ++t) L.step({1});
  // Grants at 3 and 6: forwards 4..6 and 7..9, without a gap; the trigger at
  // step 4 added nothing.
  CHECK(L.high[0] == range(4, 9));
}

TEST_CASE("promotion lifetime: no promotion during a cool-down, then a fresh grant", "[promotion]") {
  // lock 3, cooldown 2: granted at 3, eligible again from 3 + 3 + 2 = 8.
  PCtl<ClipAndPromote> c(1, {}, ema(0.5f), trig(3.0f, kInf, 2), clip_promote(), maxo(4, 3, 2));
  Loop<decltype(c)> L(c);
  L.step({1});
  L.step({1});
  L.step({100});  // t = 3: granted
  L.step({1});
  L.step({1});
  L.step({100});  // t = 6: released, triggered, cooling down -> denied, not promoted
  SEM_FLAGS(c.decisions()[0].flags, gnmr::kReleased | gnmr::kTriggered | gnmr::kDenied | gnmr::kCooldown);
  L.step({100});  // t = 7: still cooling down
  SEM_FLAGS(c.decisions()[0].flags, gnmr::kTriggered | gnmr::kDenied | gnmr::kCooldown);
  L.step({100});  // t = 8: eligible again, granted
  SEM_FLAGS(c.decisions()[0].flags, gnmr::kTriggered | gnmr::kGranted | gnmr::kInRecovery | gnmr::kPromote);
  for (int t = 9; t <= 12; ++t) L.step({1});
  CHECK(L.high[0] == std::set<int>{4, 5, 6, 9, 10, 11});
}

TEST_CASE("promotion lifetime: skipped and gradient-free steps inside the lock keep it", "[promotion]") {
  SECTION("the unit's update skipped on every lock step (SkipUnit + PromotePrecision)") {
    using R = gnmr::Compose<gnmr::SkipUnit, gnmr::PromotePrecision>;
    PCtl<R> c(1, {}, ema(0.5f), trig(3.0f, kInf, 2), R{}, maxo(4, 3, 0));
    Loop<decltype(c)> L(c);
    L.step({1});
    L.step({1});
    L.step({100});
    SEM_FLAGS(c.decisions()[0].flags,
              gnmr::kTriggered | gnmr::kGranted | gnmr::kInRecovery | gnmr::kSkip | gnmr::kPromote);
    CHECK(c.decisions()[0].scale == 0.0f);
    L.step({1});
    SEM_FLAGS(c.decisions()[0].flags, gnmr::kInRecovery | gnmr::kSkip | gnmr::kPromote);
    for (int t = 5; t <= 7; ++t) L.step({1});
    CHECK(L.high[0] == range(4, 6));
  }
  SECTION("the whole step skipped (GlobalSkip + PromotePrecision)") {
    using R = gnmr::Compose<gnmr::GlobalSkip, gnmr::PromotePrecision>;
    PCtl<R> c(2, {}, ema(0.5f), trig(3.0f, kInf, 2), R{}, maxo(4, 3, 0));
    Loop<decltype(c)> L(c);
    L.step({1, 1});
    L.step({1, 1});
    const auto& s = L.step({1, 100});
    CHECK(s.skip_step == 1u);
    L.step({1, 1});
    CHECK(c.summary().skip_step == 1u);
    for (int t = 5; t <= 7; ++t) L.step({1, 1});
    CHECK(L.high[0].empty());
    CHECK(L.high[1] == range(4, 6));
  }
  SECTION("a step with no gradient for the unit (norm 0) inside the lock") {
    PCtl<ClipAndPromote> c(1, {}, ema(0.5f), trig(3.0f, kInf, 2), clip_promote(), maxo(4, 3, 0));
    Loop<decltype(c)> L(c);
    L.step({1});
    L.step({1});
    L.step({100});
    L.step({0});  // t = 4: ZERO_NORM, the lock runs on, scale 1
    SEM_FLAGS(c.decisions()[0].flags, gnmr::kZeroNorm | gnmr::kInRecovery | gnmr::kPromote);
    CHECK(c.decisions()[0].scale == 1.0f);
    for (int t = 5; t <= 7; ++t) L.step({1});
    CHECK(L.high[0] == range(4, 6));
  }
}

TEST_CASE("promotion lifetime holds on random contended runs", "[promotion]") {
  // 12 units, maxO 3, lock 4, cool-down 2, frequent multi-unit spikes: every
  // unit's promoted forwards are exactly the union of g+1 .. g+lock over its
  // grants g, and the decisions' kPromote is exactly kInRecovery. Finite
  // norms only (see the file comment).
  const int lock = 4;
  PCtl<ClipAndPromote> c(12, {}, ema(0.9f), trig(3.0f, 1.5f, 5), clip_promote(), maxo(3, lock, 2));
  Loop<decltype(c)> L(c);
  std::mt19937_64 rng(2024);
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  std::vector<std::set<int>> grants(12);
  int denied = 0, regrants_at_lock_end = 0;
  for (int t = 1; t <= 3000; ++t) {
    std::vector<float> n(12);
    for (std::size_t u = 0; u < 12; ++u)
      n[u] = static_cast<float>((1.0 + 0.1 * ud(rng)) * (ud(rng) < 0.05 ? 5.0 + 20.0 * ud(rng) : 1.0));
    denied += static_cast<int>(L.step(n).denied);
    for (std::size_t u = 0; u < 12; ++u) {
      const std::uint32_t f = c.decisions()[u].flags;
      REQUIRE(((f & gnmr::kPromote) != 0u) == ((f & gnmr::kInRecovery) != 0u));
      if (f & gnmr::kGranted) grants[u].insert(t);
      regrants_at_lock_end += (f & gnmr::kGranted) && (f & gnmr::kReleased);
    }
  }
  for (std::size_t u = 0; u < 12; ++u) {
    std::set<int> want;
    for (int g : grants[u])
      for (int s = g + 1; s <= g + lock && s <= 3000; ++s) want.insert(s);
    INFO("unit " << u);
    CHECK(L.high[u] == want);
  }
  // The trace exercised what the rule is about.
  CHECK(denied > 100);
  std::size_t total = 0;
  for (const auto& g : grants) total += g.size();
  CHECK(total > 200);
  CHECK(regrants_at_lock_end == 0);  // cool-down 2: never at the lock's end
}
