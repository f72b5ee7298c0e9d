// Step-by-step semantics of the MaxO budget inside GnmrController
// (docs/algorithm.md, Budget to Report): contention for the free slots (rho descending, ties to
// the lower index), the lock window t .. t+lock-1 and its release at
// t+lock, re-triggering inside a lock, the cool-down, the per-unit clip
// scale and the step summary.
//
// The traces use EmaMean{beta = 0.5} and delta = +inf (so rho = r/tau
// exactly); every mean below is derived by hand from
// m <- m/2 + x/2, mu = m / (1 - 2^-k), with the clamped feed min(n, tau*mu)
// on triggered steps.
#include <catch2/catch.hpp>

#include <vector>

#include "semantics_util.hpp"

using namespace semtest;
using gnmr::kCooldown;
using gnmr::kDenied;
using gnmr::kGranted;
using gnmr::kInRecovery;
using gnmr::kReleased;
using gnmr::kTriggered;
using gnmr::kWarmup;

TEST_CASE("contention, lock, re-trigger inside a lock, release and re-grant", "[semantics]") {
  // 5 units, tau = 3, delta = inf, warmup = 2; maxO = 2, lock = 3, cooldown = 0.
  auto c = make(5, ema(0.5f), trig(3.0f, kInf, 2), maxo(2, 3, 0));
  const auto& rep = c.reports();
  const auto& dec = c.decisions();

  // t = 1, 2: all norms 1 -> mu = 1 exactly for every unit after t = 2 (k = 2).
  c.step_norms({1, 1, 1, 1, 1});
  auto s = c.step_norms({1, 1, 1, 1, 1});
  for (const auto& r : rep) SEM_FLAGS(r.flags, kWarmup);
  CHECK(s.triggered == 0);

  // t = 3: r = n. Triggered: units 1..4 (r = 10, 20, 10, 5 > 3), rho = r/3.
  // Ranking: unit 2 (6.67), then units 1 and 3 tie at 3.33 -> the lower
  // index 1 wins; unit 4 (1.67) last. Two free slots -> {2, 1} granted,
  // {3, 4} denied. Scale on grant: min(1, kappa*mu/n) = 1/10, 1/20.
  s = c.step_norms({1, 10, 20, 10, 5});
  CHECK(s.step == 3);
  SEM_FLAGS(rep[0].flags, 0u);
  SEM_FLAGS(rep[1].flags, kTriggered | kGranted | kInRecovery);
  SEM_FLAGS(rep[2].flags, kTriggered | kGranted | kInRecovery);
  SEM_FLAGS(rep[3].flags, kTriggered | kDenied);
  SEM_FLAGS(rep[4].flags, kTriggered | kDenied);
  CHECK(rep[1].risk == rep[3].risk);  // the tie is exact
  CHECK(rep[1].lock_left == 3);
  CHECK(rep[2].lock_left == 3);
  CHECK(rep[3].lock_left == 0);
  CHECK(dec[1].scale == Approx(0.1).epsilon(1e-6));
  CHECK(dec[2].scale == Approx(0.05).epsilon(1e-6));
  CHECK(dec[3].scale == 1.0f);  // denied: untouched
  CHECK(dec[4].scale == 1.0f);
  CHECK(dec[0].scale == 1.0f);
  for (std::size_t i = 0; i < 5; ++i) CHECK(dec[i].flags == rep[i].flags);
  CHECK(s.triggered == 4);
  CHECK(s.granted == 2);
  CHECK(s.in_recovery == 2);
  CHECK(s.denied == 2);
  CHECK(s.nonfinite == 0);
  CHECK(s.released == 0);
  CHECK(s.max_ratio == 20.0f);
  CHECK(s.max_ratio_unit == 2);
  CHECK(s.skip_step == 0);

  // Feeds at t = 3: units 1..4 min(n, 3*1) = 3, unit 0 gets 1.
  // mu (k = 3): unit 0 = 1; units 1..4: m = 0.75/2 + 3/2 = 1.875, /0.875 = 15/7.
  // t = 4: norms {1, 1, 100, 100, 1}.
  //   unit 2: r = 100*7/15 = 46.67, triggers again inside its lock: keeps the
  //     lock (lock_left 2, not reset to 3), neither GRANTED nor DENIED;
  //     scale = (15/7)/100 = 0.0214286.
  //   unit 3: r = 46.67, no free slot (2 held) -> DENIED.
  //   unit 1: in recovery, r = 7/15, scale = min(1, (15/7)/1) = 1.
  //   max ratio: units 2 and 3 tie exactly -> unit 2.
  s = c.step_norms({1, 1, 100, 100, 1});
  CHECK(rep[1].mean == Approx(15.0 / 7.0).epsilon(1e-6));
  SEM_FLAGS(rep[0].flags, 0u);
  SEM_FLAGS(rep[1].flags, kInRecovery);
  SEM_FLAGS(rep[2].flags, kTriggered | kInRecovery);
  SEM_FLAGS(rep[3].flags, kTriggered | kDenied);
  SEM_FLAGS(rep[4].flags, 0u);
  CHECK(rep[1].lock_left == 2);
  CHECK(rep[2].lock_left == 2);
  CHECK(dec[1].scale == 1.0f);
  CHECK(dec[2].scale == Approx(0.15 / 7.0).epsilon(1e-6));
  CHECK(rep[2].ratio == rep[3].ratio);
  CHECK(s.triggered == 2);
  CHECK(s.granted == 0);
  CHECK(s.in_recovery == 2);
  CHECK(s.denied == 1);
  CHECK(s.max_ratio == Approx(100.0 * 7.0 / 15.0).epsilon(1e-6));
  CHECK(s.max_ratio_unit == 2);

  // Feeds at t = 4: units 2, 3 min(100, 3*15/7) = 45/7; units 1, 4: 1.
  // mu (k = 4): units 2, 3: (1.875/2 + 45/14)/(15/16) = 31/7; units 1, 4: 23/15.
  // t = 5: all norms 1: units 1, 2 in their last locked step (lock_left 1).
  s = c.step_norms({1, 1, 1, 1, 1});
  CHECK(rep[2].mean == Approx(31.0 / 7.0).epsilon(1e-6));
  CHECK(rep[4].mean == Approx(23.0 / 15.0).epsilon(1e-6));
  SEM_FLAGS(rep[1].flags, kInRecovery);
  SEM_FLAGS(rep[2].flags, kInRecovery);
  CHECK(rep[1].lock_left == 1);
  CHECK(rep[2].lock_left == 1);
  CHECK(s.in_recovery == 2);
  CHECK(s.triggered == 0);

  // t = 6 = 3 + lock: units 1, 2 released (RELEASED, lock_left 0); with
  // cooldown 0 unit 1 is grantable again at once.
  // mu (k = 5): units 1, 4: (23/15*15/16/2 + 1/2)/(31/32) = 39/31;
  //             unit 3: 577/217 = 2.6590.
  // Norms {1, 1000, 1, 1000, 1000}: r1 = r4 = 1000*31/39 = 794.87 (exact tie,
  // identical histories of fed values), r3 = 376.08. Two free slots: unit 1
  // (tie -> lower index), then unit 4; unit 3 denied.
  // Scale = (39/31)/1000.
  s = c.step_norms({1, 1000, 1, 1000, 1000});
  SEM_FLAGS(rep[0].flags, 0u);
  SEM_FLAGS(rep[1].flags, kReleased | kTriggered | kGranted | kInRecovery);
  SEM_FLAGS(rep[2].flags, kReleased);
  SEM_FLAGS(rep[3].flags, kTriggered | kDenied);
  SEM_FLAGS(rep[4].flags, kTriggered | kGranted | kInRecovery);
  CHECK(rep[1].risk == rep[4].risk);
  CHECK(rep[1].ratio == Approx(1000.0 * 31.0 / 39.0).epsilon(1e-6));
  CHECK(rep[3].ratio == Approx(1000.0 * 217.0 / 577.0).epsilon(1e-6));
  CHECK(rep[1].lock_left == 3);
  CHECK(rep[2].lock_left == 0);
  CHECK(rep[4].lock_left == 3);
  CHECK(dec[1].scale == Approx(39.0 / 31.0 / 1000.0).epsilon(1e-6));
  CHECK(dec[2].scale == 1.0f);
  CHECK(s.released == 2);
  CHECK(s.granted == 2);
  CHECK(s.denied == 1);
  CHECK(s.triggered == 3);
  CHECK(s.in_recovery == 2);
  CHECK(s.max_ratio_unit == 1);  // 794.87 tie between units 1 and 4
  CHECK(c.steps_done() == 6);
}

TEST_CASE("cool-down: no grant before t + lock + cooldown, the slot itself is free",
          "[semantics]") {
  // 2 units, tau = 3, delta = inf, warmup = 1; maxO = 1, lock = 2, cooldown = 2.
  // Spikes are 1e6: whatever the clamped feeds did to mu (at most x3 per
  // step here), r >> 3, so only the budget decides.
  auto c = make(2, ema(0.5f), trig(3.0f, kInf, 1), maxo(1, 2, 2));
  const auto& rep = c.reports();
  const float S = 1e6f;
  struct Row {
    float n0, n1;
    std::uint32_t f0, f1;
    int lock0, lock1;
    std::uint32_t granted, denied, in_rec, released;
  };
  const Row rows[] = {
      // t = 1: k = 0, warm-up.
      {1, 1, kWarmup, kWarmup, 0, 0, 0, 0, 0, 0},
      // t = 2: unit 0 granted; in recovery at t = 2, 3.
      {S, 1, kTriggered | kGranted | kInRecovery, 0, 2, 0, 1, 0, 1, 0},
      // t = 3: triggers again inside the lock: kept, not counted.
      {S, 1, kTriggered | kInRecovery, 0, 1, 0, 0, 0, 1, 0},
      // t = 4 = 2 + lock: released, cooling down until t < 2 + 2 + 2 = 6:
      // triggered but DENIED (COOLDOWN); unit 1 takes the free slot.
      {S, S, kReleased | kCooldown | kTriggered | kDenied, kTriggered | kGranted | kInRecovery,
       0, 2, 1, 1, 1, 1},
      // t = 5: unit 0 still cooling down.
      {S, S, kCooldown | kTriggered | kDenied, kTriggered | kInRecovery, 0, 1, 0, 1, 1, 0},
      // t = 6: unit 0 eligible again and the slot is free (unit 1 released
      // at 4 + 2 = 6, cooling down at t = 6, 7).
      {S, S, kTriggered | kGranted | kInRecovery, kReleased | kCooldown | kTriggered | kDenied,
       2, 0, 1, 1, 1, 1},
      // t = 7: a cooling unit that does not trigger is not denied.
      {1, 1, kInRecovery, kCooldown, 1, 0, 0, 0, 1, 0},
      // t = 8: unit 0 released into its cool-down; unit 1 eligible (8 >= 4+2+2).
      {1, 1, kReleased | kCooldown, 0u, 0, 0, 0, 0, 0, 1},
  };
  for (const Row& row : rows) {
    const auto s = c.step_norms({row.n0, row.n1});
    INFO("t = " << s.step);
    SEM_FLAGS(rep[0].flags, row.f0);
    SEM_FLAGS(rep[1].flags, row.f1);
    CHECK(rep[0].lock_left == row.lock0);
    CHECK(rep[1].lock_left == row.lock1);
    CHECK(s.granted == row.granted);
    CHECK(s.denied == row.denied);
    CHECK(s.in_recovery == row.in_rec);
    CHECK(s.released == row.released);
    CHECK(s.in_recovery <= 1u);
  }
}

TEST_CASE("lock = 1 with cooldown = 0: a unit can be granted on consecutive steps",
          "[semantics]") {
  // Granted at t, released at t + 1 and grantable again at t + 1.
  auto c = make(1, ema(0.5f), trig(3.0f, kInf, 1), maxo(1, 1, 0));
  c.step_norms({1.0f});
  c.step_norms({1e6f});
  SEM_FLAGS(c.reports()[0].flags, kTriggered | kGranted | kInRecovery);
  CHECK(c.reports()[0].lock_left == 1);
  const auto s = c.step_norms({1e6f});
  SEM_FLAGS(c.reports()[0].flags, kReleased | kTriggered | kGranted | kInRecovery);
  CHECK(s.released == 1);
  CHECK(s.granted == 1);
}

TEST_CASE("clip scale uses kappa and the mean at the start of the step", "[semantics]") {
  // kappa = 2, beta = 0.5, tau = 3, warmup = 2: mu = 1 at t = 3.
  // n = 8: scale = min(1, 2*1/8) = 0.25. At t = 4 (still locked) the mean
  // is (0.75/2 + 3/2)/0.875 = 15/7 (fed min(8, 3) = 3); n = 4 ->
  // scale = min(1, 2*(15/7)/4) = 1 (not triggered: r = 28/15).
  // n = 40 instead at t = 4 -> scale = 30/7/40 = 0.107143.
  auto c = make(1, ema(0.5f), trig(3.0f, 1.5f, 2), maxo(1, 3, 0), 2.0f);
  auto c2 = make(1, ema(0.5f), trig(3.0f, 1.5f, 2), maxo(1, 3, 0), 2.0f);
  for (int t = 0; t < 2; ++t) {
    c.step_norms({1.0f});
    c2.step_norms({1.0f});
  }
  c.step_norms({8.0f});
  c2.step_norms({8.0f});
  CHECK(c.decisions()[0].scale == 0.25f);
  c.step_norms({4.0f});
  c2.step_norms({40.0f});
  SEM_FLAGS(c.reports()[0].flags, kInRecovery);
  CHECK(c.decisions()[0].scale == 1.0f);
  CHECK(c2.decisions()[0].scale == Approx(30.0 / 7.0 / 40.0).epsilon(1e-6));
  // A unit out of recovery: scale 1 and no action flags whatever its ratio.
  auto c3 = make(2, ema(0.5f), trig(3.0f, kInf, 2), maxo(1, 3, 0));
  for (int t = 0; t < 2; ++t) c3.step_norms({1.0f, 1.0f});
  c3.step_norms({50.0f, 40.0f});
  CHECK(c3.decisions()[1].scale == 1.0f);
  CHECK(c3.decisions()[1].flags == (kTriggered | kDenied));
}

TEST_CASE("summary: step numbering, counts, max ratio over defined ratios", "[semantics]") {
  // Unit 1's first sample is NaN, so at t = 2 unit 0 has k = 1 but unit 1
  // has k = 0: its ratio is undefined and takes no part in max_ratio.
  auto c = make(3, ema(0.5f), trig(3.0f, 1.5f, 5), maxo(1, 1, 0));
  auto s = c.step_norms({2.0f, kNaN, 4.0f});
  CHECK(s.step == 1);
  CHECK(s.max_ratio_unit == -1);
  CHECK(s.nonfinite == 1);
  s = c.step_norms({1.0f, 7.0f, 1.0f});  // r0 = 1/2, r2 = 1/4, unit 1 k = 0
  CHECK(s.step == 2);
  CHECK(s.max_ratio == 0.5f);
  CHECK(s.max_ratio_unit == 0);
  CHECK(c.reports()[1].ratio == 0.0f);
  SEM_FLAGS(c.reports()[1].flags, kWarmup);
  // Equal ratios go to the lowest index. After t = 2:
  // unit 0 fed 2, 1 -> m = 2/4 + 1/2 = 1, mu0 = 1/(3/4) = 4/3 (inexact in fp32,
  // so its norm is taken as 2*mu0, an exact doubling); unit 1 fed 7 -> mu1 = 7;
  // unit 2 fed 4, 1 -> m = 4/4 + 1/2 = 3/2, mu2 = 2. n = {2*mu0, 14, 4}:
  // r = 2 exactly for all three.
  const float mu0 = c.policies().mean.mean(c.unit_states()[0].mean);
  s = c.step_norms({mu0 * 2.0f, 14.0f, 4.0f});
  CHECK(c.reports()[0].ratio == 2.0f);
  CHECK(c.reports()[1].ratio == 2.0f);
  CHECK(c.reports()[2].ratio == 2.0f);
  CHECK(s.max_ratio == 2.0f);
  CHECK(s.max_ratio_unit == 0);
  CHECK(s.step == 3);
  CHECK(c.summary().step == 3);
  CHECK(c.steps_done() == 3);
}
