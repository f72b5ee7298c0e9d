// Step-by-step semantics of the default trigger inside GnmrController
// (docs/algorithm.md, GNMR and Delta-GNMR, Trigger): warm-up, the ratio test r > tau, the Delta-GNMR test
// d > delta over the last w defined ratios, and the risk rho.
//
// Every expected number is derived in the comments from docs/algorithm.md's formulas.
// Most traces use EmaMean{beta = 0.5} with a constant norm of 1, for which
// the bias-corrected mean is exactly 1 in fp32 (m_k = 1 - 2^-k,
// 1 - beta^k = 1 - 2^-k), so r = n exactly and threshold tests can sit
// exactly on tau / delta. The warm-up trace uses the default beta = 0.99.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "semantics_util.hpp"

using namespace semtest;
using gnmr::kDenied;
using gnmr::kGranted;
using gnmr::kInRecovery;
using gnmr::kTriggered;
using gnmr::kWarmup;

TEST_CASE("warm-up: no verdict while k < warmup, ratio undefined at k = 0", "[semantics]") {
  // beta = 0.99 (default), tau = 3, delta = 1.5, warmup = 3, w = 4; one slot, lock 2.
  auto c = make(1, gnmr::EmaMean{}, trig(3.0f, 1.5f, 3), maxo(1, 2, 0));

  // t = 1, k = 0: mu = 0, r undefined -> reported 0; d = 0; rho = 0; WARMUP only.
  auto s = c.step_norms({1.0f});
  CHECK(s.step == 1);
  CHECK(c.steps_done() == 1);
  auto r = c.reports()[0];
  SEM_FLAGS(r.flags, kWarmup);
  CHECK(r.mean == 0.0f);
  CHECK(r.ratio == 0.0f);
  CHECK(r.delta == 0.0f);
  CHECK(r.risk == 0.0f);
  CHECK(r.scale == 1.0f);
  CHECK(r.lock_left == 0);
  CHECK(s.max_ratio_unit == -1);  // no unit has a defined ratio
  CHECK(s.max_ratio == 0.0f);
  CHECK(s.triggered == 0);

  // t = 2, k = 1: m = 0.01*1, 1 - 0.99 = 0.01 -> mu = 1; r = 100 (>> tau) but
  // k = 1 < warmup: no verdict. No earlier ratio -> d = 0.
  s = c.step_norms({100.0f});
  r = c.reports()[0];
  SEM_FLAGS(r.flags, kWarmup);
  CHECK(r.mean == Approx(1.0).epsilon(1e-6));
  CHECK(r.ratio == Approx(100.0).epsilon(1e-6));
  CHECK(r.delta == 0.0f);
  CHECK(r.risk == 0.0f);
  CHECK(c.decisions()[0].scale == 1.0f);
  CHECK(s.max_ratio_unit == 0);  // defined from k = 1 on, even in warm-up
  CHECK(s.max_ratio == Approx(100.0).epsilon(1e-6));
  CHECK(s.triggered == 0);

  // Not triggered, so the raw 100 was fed: m = .99*.01 + .01*100 = 1.0099,
  // 1 - .99^2 = .0199 -> mu = 50.748744. t = 3, k = 2: r = 1/50.748744 =
  // 0.019704921, d = r - mean{100} = -99.980295.
  c.step_norms({1.0f});
  r = c.reports()[0];
  SEM_FLAGS(r.flags, kWarmup);
  CHECK(r.mean == Approx(50.748744).epsilon(1e-5));
  CHECK(r.ratio == Approx(0.019704921).epsilon(1e-5));
  CHECK(r.delta == Approx(-99.980295).epsilon(1e-5));

  // t = 4, k = 3 = warmup: m = .99*1.0099 + .01 = 1.009801, 1 - .99^3 =
  // .029701 -> mu = 33.998889; r = 1000/mu = 29.412726 > 3: TRIGGERED,
  // the free slot is granted. d = r - mean{100, 0.0197049} = -20.597127.
  // rho = max(r/3, d/1.5) = 9.8042420; scale = min(1, mu/1000) = 0.033998889.
  s = c.step_norms({1000.0f});
  r = c.reports()[0];
  SEM_FLAGS(r.flags, kTriggered | kGranted | kInRecovery);
  CHECK(r.mean == Approx(33.998889).epsilon(1e-5));
  CHECK(r.ratio == Approx(29.412726).epsilon(1e-5));
  CHECK(r.delta == Approx(-20.597127).epsilon(1e-5));
  CHECK(r.risk == Approx(9.8042420).epsilon(1e-5));
  CHECK(r.scale == Approx(0.033998889).epsilon(1e-5));
  CHECK(c.decisions()[0].scale == r.scale);
  CHECK(r.lock_left == 2);
  CHECK(s.triggered == 1);
  CHECK(s.granted == 1);
  CHECK(s.step == 4);
}

TEST_CASE("warm-up 0: still no verdict at k = 0, a verdict from k = 1", "[semantics]") {
  auto c = make(1, ema(0.5f), trig(3.0f, 1.5f, 0), maxo(1, 1, 0));
  c.step_norms({5.0f});  // k = 0: r undefined whatever warmup says
  SEM_FLAGS(c.reports()[0].flags, kWarmup);
  c.step_norms({100.0f});  // k = 1 >= 0: mu = 5, r = 20 > 3
  SEM_FLAGS(c.reports()[0].flags, kTriggered | kGranted | kInRecovery);
  CHECK(c.reports()[0].ratio == 20.0f);
}

TEST_CASE("ratio trigger: r exactly tau does not fire, the next float above does",
          "[semantics]") {
  // beta = 0.5, tau = 3, delta = +inf (off), warmup = 2; three slots.
  auto c = make(3, ema(0.5f), trig(3.0f, kInf, 2), maxo(3, 1, 0));
  c.step_norms({1.0f, 1.0f, 1.0f});
  c.step_norms({1.0f, 1.0f, 1.0f});
  for (const auto& r : c.reports()) SEM_FLAGS(r.flags, kWarmup);  // k = 1 < 2
  // t = 3, k = 2, mu = 1 exactly, so r = n exactly.
  const float above = std::nextafter(3.0f, 4.0f);
  const auto s = c.step_norms({3.0f, above, 2.9f});
  const auto& rep = c.reports();
  // r = tau: not > tau. rho = r/tau = 1 (d/delta = 0/inf = 0).
  SEM_FLAGS(rep[0].flags, 0u);
  CHECK(rep[0].ratio == 3.0f);
  CHECK(rep[0].risk == 1.0f);
  CHECK(c.decisions()[0].scale == 1.0f);
  // One ulp above: fires; rho = above/3 > 1.
  SEM_FLAGS(rep[1].flags, kTriggered | kGranted | kInRecovery);
  CHECK(rep[1].ratio == above);
  CHECK(rep[1].risk > 1.0f);
  CHECK(rep[1].risk == Approx(1.0).epsilon(1e-6));
  // Below: no verdict change, rho = 2.9/3.
  SEM_FLAGS(rep[2].flags, 0u);
  CHECK(rep[2].risk == Approx(2.9 / 3.0).epsilon(1e-6));
  CHECK(s.triggered == 1);
  CHECK(s.max_ratio == above);
  CHECK(s.max_ratio_unit == 1);
}

TEST_CASE("delta trigger: d exactly delta does not fire, above fires while r < tau",
          "[semantics]") {
  // beta = 0.5, tau = 3, delta = 1.5, w = 4, warmup = 2.
  auto c = make(2, ema(0.5f), trig(3.0f, 1.5f, 2), maxo(2, 1, 0));
  for (int t = 1; t <= 3; ++t) c.step_norms({1.0f, 1.0f});
  // Ratios so far: r(2) = r(3) = 1 (r undefined at t = 1). t = 4: mu = 1.
  // unit 0: r = 2.5, d = 2.5 - mean{1,1} = 1.5 = delta: no fire;
  //         rho = max(2.5/3, 1.5/1.5) = 1.
  // unit 1: r = next float above 2.5, d > 1.5: fires although r < tau.
  const float above = std::nextafter(2.5f, 3.0f);
  c.step_norms({2.5f, above});
  const auto& rep = c.reports();
  SEM_FLAGS(rep[0].flags, 0u);
  CHECK(rep[0].delta == 1.5f);
  CHECK(rep[0].risk == 1.0f);
  SEM_FLAGS(rep[1].flags, kTriggered | kGranted | kInRecovery);
  CHECK(rep[1].ratio < 3.0f);
  CHECK(rep[1].delta > 1.5f);
  CHECK(rep[1].risk > 1.0f);  // d/delta wins over r/tau = 0.83
}

TEST_CASE("delta uses fewer than w ratios when fewer exist, d = 0 with none",
          "[semantics]") {
  // beta = 0.5, tau = 3, delta = 1.5, w = 4, warmup = 2.
  auto c = make(1, ema(0.5f), trig(3.0f, 1.5f, 2), maxo(1, 1, 0));
  c.step_norms({1.0f});  // t = 1: r undefined, not recorded
  c.step_norms({1.0f});  // t = 2: r = 1, no earlier ratio -> d = 0
  CHECK(c.reports()[0].delta == 0.0f);
  CHECK(c.reports()[0].ratio == 1.0f);
  // t = 3: mu = 1, r = 3 (not > tau), d = 3 - mean{1} = 2 > 1.5: fires on
  // delta alone; rho = max(3/3, 2/1.5) = 1.3333333.
  c.step_norms({3.0f});
  const auto& r = c.reports()[0];
  SEM_FLAGS(r.flags, kTriggered | kGranted | kInRecovery);
  CHECK(r.delta == 2.0f);
  CHECK(r.risk == Approx(4.0 / 3.0).epsilon(1e-6));
}

TEST_CASE("delta window w = 1 (one-step jump) against the default w = 4", "[semantics]") {
  // beta = 0.5, tau = 3, delta = 1.5, warmup = 3.
  auto c4 = make(1, ema(0.5f), trig(3.0f, 1.5f, 3, 4), maxo(1, 1, 0));
  auto c1 = make(1, ema(0.5f), trig(3.0f, 1.5f, 3, 1), maxo(1, 1, 0));
  // t = 1..4: norm 1 -> mu = 1, ratios r2 = r3 = r4 = 1.
  // t = 5: n = 0.25 -> r = 0.25; d = 0.25 - 1 = -0.75 for both windows.
  // Fed 0.25: m = (15/16)/2 + 0.25/2 = 19/32, 1 - 2^-5 = 31/32 -> mu = 19/31.
  // t = 6: n = 38/31 -> r = 2 (< tau).
  //   w = 1: d = 2 - 0.25 = 1.75 > 1.5: fires, rho = max(2/3, 1.75/1.5) = 1.1666667.
  //   w = 4: d = 2 - mean{1,1,1,0.25} = 2 - 0.8125 = 1.1875: no fire,
  //          rho = max(0.6666667, 0.7916667) = 0.7916667.
  const std::vector<float> trace = {1.0f, 1.0f, 1.0f, 1.0f, 0.25f, 38.0f / 31.0f};
  for (float n : trace) {
    c4.step_norms({n});
    c1.step_norms({n});
    if (c4.steps_done() == 5) {
      CHECK(c4.reports()[0].delta == -0.75f);
      CHECK(c1.reports()[0].delta == -0.75f);
    }
  }
  const auto& r1 = c1.reports()[0];
  const auto& r4 = c4.reports()[0];
  CHECK(r1.mean == Approx(19.0 / 31.0).epsilon(1e-6));
  CHECK(r1.ratio == Approx(2.0).epsilon(1e-6));
  CHECK(r1.delta == Approx(1.75).epsilon(1e-6));
  CHECK(r1.risk == Approx(1.75 / 1.5).epsilon(1e-6));
  SEM_FLAGS(r1.flags, kTriggered | kGranted | kInRecovery);
  CHECK(r4.delta == Approx(1.1875).epsilon(1e-6));
  CHECK(r4.risk == Approx(1.1875 / 1.5).epsilon(1e-6));
  SEM_FLAGS(r4.flags, 0u);
}

TEST_CASE("delta window drops the oldest ratio", "[semantics]") {
  // beta = 0.5, tau = 3, delta = 1.5, warmup = 2; w = 2 and w = 4.
  // Norms 1,1,1 -> r2 = r3 = 1; t = 4: n = 0.25 -> r4 = 0.25, fed 0.25:
  // m = (7/8)/2 + 0.125 = 9/16, 1 - 2^-4 = 15/16 -> mu = 0.6. Feeding n = 0.6
  // = mu from then on keeps mu = 0.6, so r = 1 at t = 5..9.
  //   w = 2: d5 = 1 - mean{1, .25} = .375, d6 = 1 - mean{.25, 1} = .375, d7 = 0.
  //   w = 4: d5 = 1 - mean{1,1,.25} = .25, d6..d8 = 1 - .8125 = .1875, d9 = 0.
  auto c2 = make(1, ema(0.5f), trig(3.0f, 1.5f, 2, 2), maxo(1, 1, 0));
  auto c4 = make(1, ema(0.5f), trig(3.0f, 1.5f, 2, 4), maxo(1, 1, 0));
  const std::vector<float> trace = {1, 1, 1, 0.25f, 0.6f, 0.6f, 0.6f, 0.6f, 0.6f};
  const double d2[] = {0, 0, 0, -0.75, 0.375, 0.375, 0, 0, 0};
  const double d4[] = {0, 0, 0, -0.75, 0.25, 0.1875, 0.1875, 0.1875, 0};
  for (std::size_t t = 0; t < trace.size(); ++t) {
    c2.step_norms({trace[t]});
    c4.step_norms({trace[t]});
    INFO("t = " << t + 1);
    CHECK(c2.reports()[0].delta == Approx(d2[t]).margin(1e-6));
    CHECK(c4.reports()[0].delta == Approx(d4[t]).margin(1e-6));
    CHECK((c2.reports()[0].flags & kTriggered) == 0u);
    if (t >= 4) CHECK(c4.reports()[0].mean == Approx(0.6).epsilon(1e-6));
  }
}

TEST_CASE("tau = +inf turns the ratio test off; rho then comes from d alone", "[semantics]") {
  // beta = 0.5, tau = inf, delta = 1.5, w = 1, warmup = 2. Norms 1,1,1 then 100:
  // mu = 1, r = 100 (no ratio test), d = 100 - 1 = 99 > 1.5: fires;
  // rho = max(100/inf, 99/1.5) = 66.
  auto c = make(1, ema(0.5f), trig(kInf, 1.5f, 2, 1), maxo(1, 1, 0));
  for (int t = 0; t < 3; ++t) c.step_norms({1.0f});
  c.step_norms({100.0f});
  SEM_FLAGS(c.reports()[0].flags, kTriggered | kGranted | kInRecovery);
  CHECK(c.reports()[0].risk == 66.0f);
  // And with delta = inf instead, rho = r/tau = 100/3.
  auto c2 = make(1, ema(0.5f), trig(3.0f, kInf, 2, 1), maxo(1, 1, 0));
  for (int t = 0; t < 3; ++t) c2.step_norms({1.0f});
  c2.step_norms({100.0f});
  CHECK(c2.reports()[0].risk == Approx(100.0 / 3.0).epsilon(1e-6));
  // A denied unit still reports its rho.
  auto c3 = make(2, ema(0.5f), trig(3.0f, kInf, 2, 1), maxo(1, 1, 0));
  for (int t = 0; t < 3; ++t) c3.step_norms({1.0f, 1.0f});
  c3.step_norms({100.0f, 50.0f});
  SEM_FLAGS(c3.reports()[1].flags, kTriggered | kDenied);
  CHECK(c3.reports()[1].risk == Approx(50.0 / 3.0).epsilon(1e-6));
}
