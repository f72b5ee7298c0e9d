// Step-by-step semantics of what the controller feeds its mean tracker
// (docs/algorithm.md, Mean): the raw norm on a normal step, min(n, tau*mu) on a
// triggered step (granted, denied or already locked alike), nothing on a
// non-finite step, which also stays out of the Delta-GNMR history, the
// budget and the summary's max ratio. Then the other trackers inside the
// controller (cumulative, window, EMA mean/variance) and the norm
// policies' finish from partials. Expected numbers are derived in comments.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "gnmr/policy/mean_peers.hpp"
#include "semantics_util.hpp"

using namespace semtest;
using gnmr::kCooldown;
using gnmr::kDenied;
using gnmr::kGranted;
using gnmr::kInRecovery;
using gnmr::kNonFinite;
using gnmr::kReleased;
using gnmr::kSkip;
using gnmr::kTriggered;
using gnmr::kWarmup;

TEST_CASE("EMA (beta 0.99) is fed min(n, tau*mu) on a trigger, the raw norm otherwise",
          "[semantics]") {
  // tau = 3, delta = 1.5, warmup = 3; maxO = 1, lock = 3.
  auto c = make(1, gnmr::EmaMean{}, trig(3.0f, 1.5f, 3), maxo(1, 3, 0));
  for (int t = 0; t < 3; ++t) c.step_norms({1.0f});
  // t = 4: mu = 1 (constant input), r = 10: triggered and granted;
  // scale = min(1, 1/10). Fed min(10, 3*1) = 3:
  //   m3 = 1 - .99^3 = .029701, m4 = .99*m3 + .01*3 = .05940399,
  //   1 - .99^4 = .03940399 -> mu = 1.5075628 (raw 10 would give 3.2840327).
  c.step_norms({10.0f});
  CHECK(c.reports()[0].mean == Approx(1.0).epsilon(1e-5));
  SEM_FLAGS(c.reports()[0].flags, kTriggered | kGranted | kInRecovery);
  CHECK(c.decisions()[0].scale == Approx(0.1).epsilon(1e-5));
  // t = 5: in recovery but not triggered (r = 2/1.5075628 = 1.3266446,
  // d = r - mean{1, 1, 10} = -2.6733554): the raw norm 2 is fed:
  //   m5 = .99*.05940399 + .02 = .07880995, 1 - .99^5 = .04900995
  //   -> mu = 1.6080398. scale = min(1, 1.5075628/2) = 0.7537814.
  c.step_norms({2.0f});
  const auto r5 = c.reports()[0];
  CHECK(r5.mean == Approx(1.5075628).epsilon(1e-5));
  CHECK(r5.ratio == Approx(1.3266446).epsilon(1e-5));
  CHECK(r5.delta == Approx(-2.6733554).epsilon(1e-5));
  SEM_FLAGS(r5.flags, kInRecovery);
  CHECK(r5.scale == Approx(0.7537814).epsilon(1e-5));
  c.step_norms({1.0f});
  CHECK(c.reports()[0].mean == Approx(1.6080398).epsilon(1e-5));
}

TEST_CASE("denied and already-locked triggered units are fed the clamped value too",
          "[semantics]") {
  // beta = 0.5, tau = 3, delta = inf, warmup = 2; one slot, lock 3.
  auto c = make(2, ema(0.5f), trig(3.0f, kInf, 2), maxo(1, 3, 0));
  c.step_norms({1, 1});
  c.step_norms({1, 1});
  // t = 3: unit 0 (r = 10) granted, unit 1 (r = 5) denied; both fed 3:
  // m = 0.75/2 + 3/2 = 1.875, mu = 1.875/0.875 = 15/7 for both.
  c.step_norms({10, 5});
  SEM_FLAGS(c.reports()[1].flags, kTriggered | kDenied);
  // t = 4: unit 0 triggers inside its lock (r = 1000*7/15): fed
  // min(1000, 45/7) -> mu = (1.875/2 + 45/14)/(15/16) = 31/7.
  c.step_norms({1000, 1});
  CHECK(c.reports()[0].mean == Approx(15.0 / 7.0).epsilon(1e-6));
  CHECK(c.reports()[1].mean == Approx(15.0 / 7.0).epsilon(1e-6));
  SEM_FLAGS(c.reports()[0].flags, kTriggered | kInRecovery);
  c.step_norms({1, 1});
  CHECK(c.reports()[0].mean == Approx(31.0 / 7.0).epsilon(1e-6));
}

TEST_CASE("NaN, +Inf and -Inf norms bypass everything", "[semantics]") {
  // 4 units, beta = 0.5, tau = 3, delta = 1.5, w = 4, warmup = 2; maxO = 1, lock = 2.
  auto c = make(4, ema(0.5f), trig(3.0f, 1.5f, 2), maxo(1, 2, 0));
  for (int t = 0; t < 3; ++t) c.step_norms({1, 1, 1, 1});  // mu = 1, ratios {1, 1}
  const auto before = c.unit_states();

  // t = 4: units 0..2 non-finite: NONFINITE|SKIP, rho = +inf, scale 0,
  // no slot (unit 3, r = 10, gets the only slot), excluded from max_ratio.
  auto s = c.step_norms({kNaN, kInf, -kInf, 10.0f});
  const auto& rep = c.reports();
  const auto& dec = c.decisions();
  for (int i = 0; i < 3; ++i) {
    INFO("unit " << i);
    SEM_FLAGS(rep[i].flags, kNonFinite | kSkip);
    SEM_FLAGS(dec[i].flags, kNonFinite | kSkip);
    CHECK(rep[i].risk == kInf);
    CHECK(dec[i].scale == 0.0f);
    CHECK(rep[i].scale == 0.0f);
    CHECK(rep[i].mean == 1.0f);  // mu at the start of the step is still reported
    CHECK(rep[i].lock_left == 0);
    // Mean, count, delta history and budget state: byte for byte unchanged.
    CHECK(bytes_of(c.unit_states()[i]) == bytes_of(before[i]));
  }
  CHECK(std::isnan(rep[0].norm));
  CHECK(rep[1].norm == kInf);
  CHECK(rep[2].norm == -kInf);
  SEM_FLAGS(rep[3].flags, kTriggered | kGranted | kInRecovery);
  CHECK(s.nonfinite == 3);
  CHECK(s.triggered == 1);
  CHECK(s.granted == 1);
  CHECK(s.denied == 0);
  CHECK(s.in_recovery == 1);
  CHECK(s.max_ratio == 10.0f);
  CHECK(s.max_ratio_unit == 3);

  // t = 5: units 0..2 continue as if t = 4 never happened: k = 3, mu = 1,
  // r = 1, d = 1 - mean{1, 1} = 0. Unit 3 goes NaN inside its lock: it keeps
  // its slot (IN_RECOVERY, lock_left 1) and is skipped.
  s = c.step_norms({1, 1, 1, kNaN});
  for (int i = 0; i < 3; ++i) {
    INFO("unit " << i);
    SEM_FLAGS(rep[i].flags, 0u);
    CHECK(rep[i].mean == 1.0f);
    CHECK(rep[i].ratio == 1.0f);
    CHECK(rep[i].delta == 0.0f);
    CHECK(dec[i].scale == 1.0f);
    CHECK(gnmr::EmaMean::count(c.unit_states()[i].mean) == 4u);
  }
  SEM_FLAGS(rep[3].flags, kInRecovery | kNonFinite | kSkip);
  CHECK(rep[3].lock_left == 1);
  CHECK(dec[3].scale == 0.0f);
  CHECK(s.in_recovery == 1);
  CHECK(s.nonfinite == 1);
  CHECK(s.max_ratio_unit == 0);  // three ratios of exactly 1: lowest index

  // t = 6: unit 3 released; its mean never saw the NaN: fed {1,1,1,3} ->
  // m = (7/8)/2 + 3/2 = 1.9375, mu = 1.9375/(15/16) = 31/15.
  c.step_norms({1, 1, 1, 1});
  SEM_FLAGS(rep[3].flags, kReleased);
  CHECK(rep[3].mean == Approx(31.0 / 15.0).epsilon(1e-6));
}

TEST_CASE("a non-finite first sample leaves the unit at k = 0", "[semantics]") {
  auto c = make(1, ema(0.5f), trig(3.0f, 1.5f, 1), maxo(1, 1, 0));
  auto s = c.step_norms({kNaN});
  SEM_FLAGS(c.reports()[0].flags, kNonFinite | kSkip);
  CHECK(s.max_ratio_unit == -1);
  CHECK(s.triggered == 0);
  c.step_norms({4.0f});  // first accepted sample: still k = 0 here
  SEM_FLAGS(c.reports()[0].flags, kWarmup);
  CHECK(c.reports()[0].ratio == 0.0f);
  c.step_norms({40.0f});  // k = 1 >= warmup: mu = 4, r = 10
  SEM_FLAGS(c.reports()[0].flags, kTriggered | kGranted | kInRecovery);
  CHECK(c.reports()[0].ratio == 10.0f);
  CHECK(c.summary().step == 3);
}

TEST_CASE("non-finite units in cool-down keep their flags", "[semantics]") {
  // lock 1, cooldown 2: granted at t = 2, released at 3, cooling at 3, 4.
  auto c = make(1, ema(0.5f), trig(3.0f, kInf, 1), maxo(1, 1, 2));
  c.step_norms({1.0f});
  c.step_norms({1e6f});
  c.step_norms({kInf});
  SEM_FLAGS(c.reports()[0].flags, kReleased | kCooldown | kNonFinite | kSkip);
  CHECK(c.summary().released == 1);
  CHECK(c.summary().denied == 0);
}

TEST_CASE("CumulativeMean inside the controller", "[semantics]") {
  // tau = 3, delta = inf, warmup = 2. Norms 1,2,3,4 -> mu at t = 2..5:
  // 1, 1.5, 2, 2.5. t = 5: n = 100, r = 40: triggered, fed min(100, 7.5):
  // mu(t = 6) = (1+2+3+4+7.5)/5 = 3.5.
  gnmr::GnmrController<gnmr::L2Norm, gnmr::CumulativeMean> c(
      1, {}, {}, trig(3.0f, kInf, 2), clip(1.0f), maxo(1, 1, 0));
  const float norms[] = {1, 2, 3, 4, 100, 1};
  const double means[] = {0, 1, 1.5, 2, 2.5, 3.5};
  for (int t = 0; t < 6; ++t) {
    c.step_norms(&norms[t], 1);
    INFO("t = " << t + 1);
    CHECK(c.reports()[0].mean == Approx(means[t]).epsilon(1e-7));
  }
}

TEST_CASE("WindowMean inside the controller: window, clamped feed, stddev", "[semantics]") {
  // window = 3 (Cap 8), tau = 3, delta = inf, warmup = 3.
  // Norms 1, 2, 3 -> mu(t = 4) = 2; n = 100 -> r = 50 triggered, fed
  // min(100, 6) = 6 -> window {2, 3, 6}: mu = 11/3; deviations -5/3, -2/3,
  // 7/3, sum of squares 78/9: stddev sqrt(78/18) = 2.0816660 (Bessel),
  // sqrt(78/27) = 1.6996732 (population).
  for (bool bessel : {true, false}) {
    gnmr::WindowMean<8> wm;
    wm.window = 3;
    wm.bessel = bessel;
    gnmr::GnmrController<gnmr::L2Norm, gnmr::WindowMean<8>> c(1, {}, wm, trig(3.0f, kInf, 3),
                                                             clip(1.0f), maxo(1, 1, 0));
    const auto sd = [&] { return c.policies().mean.stddev(c.unit_states()[0].mean); };
    c.step_norms({1.0f});
    CHECK(sd() == 0.0f);  // one sample: 0 either way
    c.step_norms({2.0f});
    // {1, 2}: mean 1.5, squares 0.5: sqrt(0.5/1) or sqrt(0.5/2).
    CHECK(sd() == Approx(bessel ? std::sqrt(0.5) : 0.5).epsilon(1e-6));
    CHECK(c.reports()[0].mean == 1.0f);
    c.step_norms({3.0f});
    c.step_norms({100.0f});
    CHECK(c.reports()[0].mean == 2.0f);
    SEM_FLAGS(c.reports()[0].flags, kTriggered | kGranted | kInRecovery);
    CHECK(sd() == Approx(bessel ? std::sqrt(78.0 / 18.0) : std::sqrt(78.0 / 27.0)).epsilon(1e-6));
    c.step_norms({1.0f});  // r = 3/11: fed raw -> window {3, 6, 1}
    CHECK(c.reports()[0].mean == Approx(11.0 / 3.0).epsilon(1e-6));
    // {3, 6, 1}: mean 10/3, deviations -1/3, 8/3, -7/3, squares sum 114/9.
    CHECK(sd() == Approx(bessel ? std::sqrt(114.0 / 18.0) : std::sqrt(114.0 / 27.0)).epsilon(1e-6));
    c.step_norms({1.0f});
    CHECK(c.reports()[0].mean == Approx(10.0 / 3.0).epsilon(1e-6));
  }
}

TEST_CASE("EmaMeanVar seeding inside the controller", "[semantics]") {
  // alpha = 0.5, seed = 3: the first 3 samples give the sample mean and the
  // population variance; after that mu <- .5 mu + .5 x,
  // var <- .5 var + .5 (x - mu_new)^2.
  // {1}: mu 1, var 0. {1,2}: 1.5, 0.25. {1,2,3}: 2, 2/3.
  // push 4: mu = 3, var = 1/3 + 1/2 = 5/6.
  gnmr::EmaMeanVar mv;
  mv.alpha = 0.5f;
  mv.seed = 3;
  gnmr::GnmrController<gnmr::L2Norm, gnmr::EmaMeanVar> c(1, {}, mv, trig(3.0f, 1.5f, 100),
                                                         clip(1.0f), maxo(1, 1, 0));
  const auto sd = [&] { return c.policies().mean.stddev(c.unit_states()[0].mean); };
  const double mean_after[] = {1, 1.5, 2, 3};
  const double var_after[] = {0, 0.25, 2.0 / 3.0, 5.0 / 6.0};
  for (int t = 0; t < 4; ++t) {
    const float n = static_cast<float>(t + 1);
    c.step_norms(&n, 1);
    INFO("after sample " << t + 1);
    CHECK(c.policies().mean.mean(c.unit_states()[0].mean) == Approx(mean_after[t]).epsilon(1e-6));
    CHECK(sd() == Approx(std::sqrt(var_after[t])).margin(1e-6));
  }
  c.step_norms({3.0f});
  CHECK(c.reports()[0].mean == Approx(3.0).epsilon(1e-6));
  CHECK(c.reports()[0].ratio == Approx(1.0).epsilon(1e-6));
}

TEST_CASE("step() from partials: L2, RMS, Linf finishes", "[semantics]") {
  // L2: sqrt(sum of squares). Partials {9, 2, 0} -> {3, 1.4142136, 0};
  // +inf and NaN partials are non-finite; a negative partial -> sqrt < 0 = NaN.
  gnmr::GnmrController<> l2(3);
  l2.step({9.0f, 2.0f, 0.0f});
  CHECK(l2.reports()[0].norm == 3.0f);
  CHECK(l2.reports()[1].norm == Approx(std::sqrt(2.0)).epsilon(1e-7));
  CHECK(l2.reports()[2].norm == 0.0f);
  l2.step({kInf, kNaN, -1.0f});
  for (const auto& r : l2.reports()) SEM_FLAGS(r.flags, kNonFinite | kSkip);
  CHECK(l2.summary().nonfinite == 3);

  // RMS: sqrt(partial / numel). Without unit sizes: logic_error, nothing done.
  gnmr::GnmrController<gnmr::RmsNorm> rms(3);
  CHECK_THROWS_AS(rms.step({16.0f, 100.0f, 2.0f}), std::logic_error);
  CHECK(rms.steps_done() == 0);
  const std::uint64_t numel[] = {4, 100, 8};
  rms.set_unit_numel(numel, 3);
  rms.step({16.0f, 100.0f, 2.0f});  // sqrt(16/4), sqrt(100/100), sqrt(2/8)
  CHECK(rms.reports()[0].norm == 2.0f);
  CHECK(rms.reports()[1].norm == 1.0f);
  CHECK(rms.reports()[2].norm == 0.5f);
  CHECK(rms.steps_done() == 1);
  // Unit sizes survive reset().
  rms.reset();
  rms.step({36.0f, 1.0f, 0.5f});
  CHECK(rms.reports()[0].norm == 3.0f);
  CHECK(rms.reports()[1].norm == Approx(0.1).epsilon(1e-7));
  CHECK(rms.reports()[2].norm == 0.25f);
  CHECK(rms.summary().step == 1);

  // Linf: the partial is already max|x|; the finish is the identity.
  gnmr::GnmrController<gnmr::LinfNorm> linf(2);
  linf.step({3.5f, 0.25f});
  CHECK(linf.reports()[0].norm == 3.5f);
  CHECK(linf.reports()[1].norm == 0.25f);

  // L2 and RMS need no unit sizes / ignore them consistently: step(partials)
  // and step_norms(sqrt(partials)) reach the same state.
  gnmr::GnmrController<> a(2), b(2);
  const float parts[][2] = {{4, 1}, {4, 1}, {400, 1}, {1, 0}, {9, 1e6f}};
  for (const auto& p : parts) {
    a.step(p, 2);
    const float n[2] = {std::sqrt(p[0]), std::sqrt(p[1])};
    b.step_norms(n, 2);
    CHECK(bytes_of(a.reports()) == bytes_of(b.reports()));
    CHECK(bytes_of(a.decisions()) == bytes_of(b.decisions()));
  }
}
