// Step-by-step semantics of the systemic rule (gnmr/step/systemic.hpp,
// docs/algorithm.md "Systemic steps"): the threshold at and around its
// boundary, each action on hand-computed steps, systemic and local grants
// in one step, non-finite units in a systemic step, the tracker of the
// total norm, and the rule off (or never firing) = today's bits.
//
// The traces use EmaMean{beta = 0.5}, delta = +inf and warm-up 2, so after
// two steps of norm 1 every mean is exactly 1 and r = n (as in
// test_semantics_budget.cpp). For global-clip, four units of norm 1 give
// G = sqrt(4) = 2 exactly, and an EMA of a constant 2 with bias correction
// is exactly 2 at every k (m = 1, 1.5, 1.75 over 1 - 2^-k).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "../support/trace_gen.hpp"
#include "semantics_util.hpp"

using namespace semtest;
using gnmr::kDenied;
using gnmr::kGranted;
using gnmr::kInRecovery;
using gnmr::kNonFinite;
using gnmr::kSkip;
using gnmr::kSystemic;
using gnmr::kTriggered;
using gnmr::kZeroNorm;
using gnmr::SystemicAction;

namespace {

// Field by field: padding bytes are whatever the initial copy left there.
bool same_state(const Ctl::UnitState& a, const Ctl::UnitState& b) {
  return std::memcmp(&a.mean, &b.mean, sizeof a.mean) == 0 && std::memcmp(&a.trigger, &b.trigger, sizeof a.trigger) == 0 &&
         a.budget.granted_at == b.budget.granted_at;
}

gnmr::StepSummary spike(Ctl& c, std::size_t k) {
  std::vector<float> x(c.num_units(), 1.0f);
  for (std::size_t i = 0; i < k; ++i) x[i] = 10.0f;
  return c.step_norms(x);
}

}  // namespace

TEST_CASE("systemic threshold C from share and maxO multiple", "[semantics][systemic]") {
  using gnmr::detail::systemic_threshold;
  gnmr::SystemicRule r;
  r.share = 0.5;
  CHECK(systemic_threshold(r, 10, 4) == 5u);
  r.share = 0.55;  // 5.5 -> 5
  CHECK(systemic_threshold(r, 10, 4) == 5u);
  r.share = 0.7;  // 7: "more than 7 of 10", although 0.7 * 10 is not exact in binary
  CHECK(systemic_threshold(r, 10, 4) == 7u);
  r.share = 0.29;  // 0.29 * 100 = 28.999999999999996 in double: still 29
  CHECK(systemic_threshold(r, 100, 4) == 29u);
  r.share = 0.3;  // 3.0000000000000004: 3
  CHECK(systemic_threshold(r, 10, 4) == 3u);
  r.share = 0.0;
  CHECK(systemic_threshold(r, 10, 4) == 0u);
  r.share = 1.0;
  CHECK(systemic_threshold(r, 10, 4) == 10u);  // never: triggered <= N
  r.maxo_multiple = 1.5;                        // 1.5 * 2 = 3 < 10
  CHECK(systemic_threshold(r, 10, 2) == 3u);
  r.maxo_multiple = 2.4;  // 4.8 -> 4
  CHECK(systemic_threshold(r, 10, 2) == 4u);
  r.share = 0.25;  // 2.5 -> 2 < 4: the smaller count wins
  CHECK(systemic_threshold(r, 10, 2) == 2u);
  r.share = 0.5;
  CHECK(systemic_threshold(r, 10, 0xffffffffu) == 5u);  // an unlimited budget: the share alone
  Ctl c = make(10, ema(0.5f), trig(3.0f, kInf, 2), maxo(2, 3, 0), 1.0f,
               systemic(SystemicAction::kClipTriggered, 0.7, 1.5));
  CHECK(c.systemic_threshold() == 3u);
}

TEST_CASE("systemic exactly at and around the boundary", "[semantics][systemic]") {
  // N = 10, maxO 2: C = 5 from share 0.5; C = 3 from share 0.9 and maxO x 1.5.
  struct Case {
    double share, mult;
    std::size_t c;
  };
  for (const Case cs : {Case{0.5, 0.0, 5}, Case{0.9, 1.5, 3}}) {
    for (std::size_t k = cs.c - 1; k <= cs.c + 2; ++k) {
      Ctl c = warmed(10, systemic(SystemicAction::kClipTriggered, cs.share, cs.mult));
      const gnmr::StepSummary s = spike(c, k);
      INFO("C = " << cs.c << ", " << k << " units trigger");
      const bool systemic = k > cs.c;
      CHECK(s.triggered == k);
      CHECK(s.systemic == (systemic ? 1u : 0u));
      CHECK(s.granted == 2u);  // ties: units 0 and 1, systemic or not
      CHECK(s.denied == (systemic ? 0u : k - 2));
      const auto& rep = c.reports();
      SEM_FLAGS(rep[0].flags, kTriggered | kGranted | kInRecovery);
      for (std::size_t i = 2; i < k; ++i) {
        SEM_FLAGS(rep[i].flags, kTriggered | (systemic ? kSystemic : kDenied));
        CHECK(rep[i].scale == (systemic ? 0.1f : 1.0f));
      }
      for (std::size_t i = k; i < 10; ++i) SEM_FLAGS(rep[i].flags, 0u);
    }
  }
}

TEST_CASE("clip-triggered: grants, re-triggers in a lock and systemic clips in one step", "[semantics][systemic]") {
  // N = 6, maxO 2, lock 3, share 0.5: C = 3.
  Ctl c = warmed(6, systemic(SystemicAction::kClipTriggered, 0.5));
  const auto& rep = c.reports();
  const auto& dec = c.decisions();
  // t = 3: two triggers (not systemic): units 1 and 2 granted, locked t = 3..5.
  auto s = c.step_norms({1, 10, 20, 1, 1, 1});
  CHECK(s.systemic == 0u);
  CHECK(s.granted == 2u);
  // t = 4: unit 0 (r 8), 3 (6), 4 (5), 5 (4) trigger; unit 1 re-triggers in
  // its lock (mu = 15/7 after the clamped feed 3: r = 46.7); unit 2 is
  // quiet in its lock. 5 triggered > 3: systemic; no free slot. Units 0, 3,
  // 4, 5 get min(1, 1 * 1 / n) and SYSTEMIC instead of DENIED; unit 1 keeps
  // its own clip, unit 2 its scale 1; neither is SYSTEMIC.
  s = c.step_norms({8, 100, 1, 6, 5, 4});
  CHECK(s.systemic == 1u);
  CHECK(s.triggered == 5u);
  CHECK(s.granted == 0u);
  CHECK(s.denied == 0u);
  CHECK(s.in_recovery == 2u);
  CHECK(s.skip_step == 0u);
  CHECK(s.systemic_scale == 1.0f);
  CHECK(s.total_norm == 0.0f);  // no total under clip-triggered
  const float n[6] = {8, 100, 1, 6, 5, 4};
  for (int i : {0, 3, 4, 5}) {
    SEM_FLAGS(rep[i].flags, kTriggered | kSystemic);
    CHECK(dec[i].scale == 1.0f / n[i]);
    CHECK(rep[i].lock_left == 0);
  }
  SEM_FLAGS(rep[1].flags, kTriggered | kInRecovery);
  CHECK(rep[1].mean == Approx(15.0 / 7.0).epsilon(1e-6));
  CHECK(dec[1].scale == rep[1].mean / 100.0f);
  CHECK(rep[1].lock_left == 2);
  SEM_FLAGS(rep[2].flags, kInRecovery);
  CHECK(dec[2].scale == 1.0f);
  // The statistics are fed as on any triggered step: min(n, tau * mu) = 3.
  // Unit 0: m = 0.875 after t = 3, then 0.4375 + 1.5 = 1.9375 over 1 - 2^-4.
  s = c.step_norms({1, 1, 1, 1, 1, 1});
  CHECK(s.systemic == 0u);
  CHECK(rep[0].mean == Approx(1.9375 / 0.9375).epsilon(1e-6));
  CHECK(rep[5].mean == Approx(1.9375 / 0.9375).epsilon(1e-6));
}

TEST_CASE("global-clip: one scale from the tracked total, hand-computed", "[semantics][systemic]") {
  // N = 4, maxO 1, lock 2, share 0.5 (C = 2), kappa 1, beta 0.5.
  Ctl c = make(4, ema(0.5f), trig(3.0f, kInf, 2), maxo(1, 2, 0), 1.0f,
               systemic(SystemicAction::kGlobalClip, 0.5, 0.0, 1.0f, 0.5f));
  const auto& rep = c.reports();
  // t = 1..3: G = 2 every step; M has no sample at t = 1, then 2 exactly.
  auto s = c.step_norms({1, 1, 1, 1});
  CHECK(s.total_norm == 2.0f);
  CHECK(s.total_mean == 0.0f);
  CHECK(s.systemic == 0u);
  CHECK(s.systemic_scale == 1.0f);
  s = c.step_norms({1, 1, 1, 1});
  CHECK(s.total_mean == 2.0f);
  s = c.step_norms({1, 1, 1, 1});
  CHECK(s.total_mean == 2.0f);
  CHECK(c.global_state().total.k == 3u);
  // t = 4: units 0..2 at 10: 3 > 2, systemic. G^2 = 301 (exact in double),
  // G = sqrtf(301), s = 2 / G = 0.1153. Unit 0 wins the one slot (ties to
  // the lower index) and its own clip 1/10 is below s; every other finite
  // unit, triggered or not, gets s.
  s = c.step_norms({10, 10, 10, 1});
  const float g = std::sqrt(301.0f);
  const float sc = 2.0f / g;
  CHECK(s.systemic == 2u);
  CHECK(s.total_norm == g);
  CHECK(s.total_mean == 2.0f);
  CHECK(s.systemic_scale == sc);
  CHECK(s.granted == 1u);
  CHECK(s.denied == 0u);
  SEM_FLAGS(rep[0].flags, kTriggered | kGranted | kInRecovery | kSystemic);
  CHECK(rep[0].scale == 0.1f);
  for (int i : {1, 2}) {
    SEM_FLAGS(rep[i].flags, kTriggered | kSystemic);
    CHECK(rep[i].scale == sc);
  }
  SEM_FLAGS(rep[3].flags, kSystemic);
  CHECK(rep[3].scale == sc);
  // The tracker was fed min(G, kappa * M) = 2: M stays 2.
  s = c.step_norms({1, 1, 1, 1});
  CHECK(s.total_mean == 2.0f);
  CHECK(s.total_norm == 2.0f);
  CHECK(s.systemic == 0u);
  for (int i = 0; i < 4; ++i) CHECK(rep[i].scale == 1.0f);
  CHECK(c.global_state().total.k == 5u);
}

TEST_CASE("global-clip: no sample yet, an overflowing total, a zero total", "[semantics][systemic]") {
  SECTION("systemic before M has a sample: scale 1, then M = G") {
    // zero_is_sample: two zero steps give k = 2 and mu = 0 (so the units
    // trigger at t = 3), while G = 0 is never fed to the tracker.
    gnmr::ControllerOptions o = systemic(SystemicAction::kGlobalClip, 0.5, 0.0, 1.0f, 0.5f);
    o.zero_is_sample = true;
    Ctl c = make(4, ema(0.5f), trig(3.0f, kInf, 2), maxo(1, 2, 0), 1.0f, o);
    c.step_norms({0, 0, 0, 0});
    auto s = c.step_norms({0, 0, 0, 0});
    CHECK(s.total_norm == 0.0f);
    CHECK(c.global_state().total.k == 0u);
    s = c.step_norms({1, 1, 1, 1});
    CHECK(s.systemic == 2u);
    CHECK(s.total_mean == 0.0f);
    CHECK(s.systemic_scale == 1.0f);
    CHECK(c.reports()[3].scale == 1.0f);
    CHECK(c.global_state().total.k == 1u);
    s = c.step_norms({1, 1, 1, 1});
    CHECK(s.total_mean == 2.0f);
  }
  SECTION("G = +inf from finite norms: scale 0 (never NaN), nothing fed") {
    Ctl c = make(4, ema(0.5f), trig(3.0f, kInf, 2), maxo(1, 2, 0), 1.0f,
                 systemic(SystemicAction::kGlobalClip, 0.5, 0.0, 1.0f, 0.5f));
    for (int t = 0; t < 3; ++t) c.step_norms({1, 1, 1, 1});
    const auto s = c.step_norms({3e38f, 3e38f, 3e38f, 1});
    CHECK(s.systemic == 2u);
    CHECK(std::isinf(s.total_norm));
    CHECK(s.systemic_scale == 0.0f);
    for (const auto& d : c.decisions()) {
      CHECK(d.scale == 0.0f);
      CHECK_FALSE(std::isnan(d.scale));
    }
    CHECK(c.global_state().total.k == 3u);  // not fed
  }
}

TEST_CASE("skip: every finite unit skipped, grants and statistics as usual", "[semantics][systemic]") {
  Ctl c = make(4, ema(0.5f), trig(3.0f, kInf, 2), maxo(1, 2, 0), 1.0f, systemic(SystemicAction::kSkip, 0.5));
  const auto& rep = c.reports();
  for (int t = 0; t < 3; ++t) c.step_norms({1, 1, 1, 1});
  auto s = c.step_norms({10, 10, 10, 1});
  CHECK(s.systemic == 3u);
  CHECK(s.skip_step == 1u);
  CHECK(s.granted == 1u);
  CHECK(s.denied == 0u);
  SEM_FLAGS(rep[0].flags, kTriggered | kGranted | kInRecovery | kSkip | kSystemic);
  CHECK(rep[0].lock_left == 2);
  SEM_FLAGS(rep[1].flags, kTriggered | kSkip | kSystemic);
  SEM_FLAGS(rep[3].flags, kSkip | kSystemic);
  for (const auto& d : c.decisions()) CHECK(d.scale == 0.0f);
  // Fed as usual: the triggered units min(10, 3) = 3 -> mu = 1.9375 / 0.9375.
  s = c.step_norms({1, 1, 1, 1});
  CHECK(s.skip_step == 0u);
  CHECK(rep[1].mean == Approx(1.9375 / 0.9375).epsilon(1e-6));
  CHECK(rep[3].mean == 1.0f);
  SEM_FLAGS(rep[0].flags, kInRecovery);
}

TEST_CASE("non-finite units in a systemic step keep the safety skip and stay out", "[semantics][systemic]") {
  // Unit 4 has norm 0 (ZERO_NORM: it adds 0 to G) during warm-up, so G = 2
  // and M = 2 exactly; at t = 4 it is NaN or +inf.
  for (const float bad : {kNaN, kInf}) {
    for (const auto a : {SystemicAction::kClipTriggered, SystemicAction::kGlobalClip, SystemicAction::kSkip}) {
      Ctl c = make(5, ema(0.5f), trig(3.0f, kInf, 2), maxo(1, 2, 0), 1.0f, systemic(a, 0.5, 0.0, 1.0f, 0.5f));
      for (int t = 0; t < 3; ++t) c.step_norms({1, 1, 1, 1, 0});
      SEM_FLAGS(c.reports()[4].flags, kZeroNorm);
      const auto s = c.step_norms({10, 10, 10, 1, bad});
      INFO("action " << gnmr::systemic_action_name(a) << ", bad " << bad);
      CHECK(s.systemic == static_cast<std::uint32_t>(a));  // 3 > floor(2.5)
      CHECK(s.nonfinite == 1u);
      SEM_FLAGS(c.reports()[4].flags, kNonFinite | kSkip);
      CHECK(c.decisions()[4].scale == 0.0f);
      if (a == SystemicAction::kGlobalClip) {
        CHECK(s.total_norm == std::sqrt(301.0f));  // the finite units only
        CHECK(s.systemic_scale == 2.0f / std::sqrt(301.0f));
      }
      // clip-triggered marks the triggered units without a slot (1, 2);
      // global-clip and skip every finite unit.
      for (int i = 0; i < 4; ++i) {
        const bool marked = a != SystemicAction::kClipTriggered || i == 1 || i == 2;
        CHECK((c.reports()[i].flags & kSystemic) == (marked ? kSystemic : 0u));
      }
    }
  }
}

TEST_CASE("systemic rule off, or never firing, makes today's decisions bit for bit", "[semantics][systemic]") {
  const std::size_t n = 300;
  gnmr::MaxO b;
  b.max_o = 3;
  b.lock = 4;
  gnmr::ControllerOptions off = systemic(SystemicAction::kOff, 0.01, 0.5, 2.0f, 0.5f);  // knobs set, rule off
  gnmr::ControllerOptions never_clip = systemic(SystemicAction::kClipTriggered, 1.0);
  gnmr::ControllerOptions never_global = systemic(SystemicAction::kGlobalClip, 1.0);
  gnmr::ControllerOptions never_skip = systemic(SystemicAction::kSkip, 1.0);
  gnmr::GnmrController<> ref(n, {}, {}, {}, {}, b);
  std::vector<gnmr::GnmrController<>> others;
  for (const auto& o : {off, never_clip, never_global, never_skip}) others.emplace_back(n, gnmr::L2Norm{}, gnmr::EmaMean{}, gnmr::GnmrTrigger{}, gnmr::ClipToMean{}, b, o);
  std::vector<float> x(n);
  std::size_t denied = 0;
  for (int t = 1; t <= 80; ++t) {
    tracegen::fill(5, t, x);
    const gnmr::StepSummary r = ref.step_norms(x);
    denied += r.denied;
    for (auto& c : others) {
      const gnmr::StepSummary s = c.step_norms(x);
      INFO("step " << t);
      REQUIRE(bytes_of(c.decisions()) == bytes_of(ref.decisions()));
      REQUIRE(bytes_of(c.reports()) == bytes_of(ref.reports()));
      for (std::size_t i = 0; i < n; ++i) REQUIRE(same_state(c.unit_states()[i], ref.unit_states()[i]));
      REQUIRE(s.denied == r.denied);
      REQUIRE(s.systemic == 0u);
    }
    const gnmr::StepSummary& o = others[0].summary();  // off: the whole summary, total_* included
    REQUIRE((o.step == r.step && o.triggered == r.triggered && o.granted == r.granted &&
             o.in_recovery == r.in_recovery && o.released == r.released && o.nonfinite == r.nonfinite &&
             o.max_ratio_unit == r.max_ratio_unit && std::memcmp(&o.max_ratio, &r.max_ratio, 4) == 0 &&
             o.skip_step == r.skip_step && o.systemic == 0u && o.systemic_scale == 1.0f &&
             o.total_norm == 0.0f && o.total_mean == 0.0f));
  }
  CHECK(denied > 0u);  // the trace contends, so "never systemic" was tested
}
