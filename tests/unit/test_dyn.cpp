// DynController and gnmr_test::make(): every name builds, every override
// reaches the policy it names (checked against a typed controller built by
// hand with that value), and wrong names and misplaced overrides are
// rejected with a message that lists the valid ones. State, DynAdapter and
// with_preset: test_dyn_state.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "gnmr/host/dyn_controller.hpp"
#include "gnmr/io/state.hpp"
#include "gnmr/presets/make.hpp"

#include "../support/dyn_runs.hpp"
#include "../support/make_once.hpp"

namespace {

namespace presets = gnmr::presets;
using presets::Options;

using dyntest::rows;
using dyntest::same_run;
using dyntest::triggered_total;
using dyntest::units_for;

TEST_CASE("make() builds every preset with the published defaults", "[dyn]") {
  const auto names = presets::names();
  REQUIRE(names == std::vector<std::string>{"none", "clip", "zclip", "adagc", "spam", "skip-step",
                                            "stabilizer", "gnmr", "gnmr-ladder", "gnmr-promote",
                                            "gnmr-clip", "gnmr-systemic", "gnmr-calibrated", "gnmr-noise-floor",
                                            "default"});
  CHECK(presets::is_global("clip"));
  CHECK(presets::is_global("zclip"));
  CHECK(presets::is_global("skip-step"));
  for (const char* n : {"none", "adagc", "spam", "stabilizer", "gnmr", "gnmr-ladder", "gnmr-promote",
                        "gnmr-clip", "gnmr-systemic"})
    CHECK_FALSE(presets::is_global(n));

  for (const auto& name : names) {
    INFO(name);
    auto d = gnmr_test::make(name, units_for(name));
    CHECK(d->name() == name);
    CHECK(d->num_units() == units_for(name));
    CHECK(d->steps_done() == 0);
    const std::uint32_t slots = d->max_in_recovery();
    // GNMR's budget (the default's is its inner gnmr-calibrated's)
    CHECK(slots == (name.rfind("gnmr", 0) == 0 || name == "default" ? 4u : 0xffffffffu));
    // The safety action holds for every preset: a non-finite unit is skipped.
    for (const auto& r : rows(7, d->num_units(), 300)) {
      auxsteps::step_norms(*d, r);
      for (std::size_t u = 0; u < r.size(); ++u) {
        const auto& dec = d->decisions()[u];
        if (std::isnan(r[u])) {
          REQUIRE((dec.flags & gnmr::kSkip) != 0u);
          REQUIRE((dec.flags & gnmr::kNonFinite) != 0u);
        } else {
          REQUIRE(std::isfinite(dec.scale));
          REQUIRE(dec.scale >= 0.0f);
        }
      }
    }
    CHECK(d->steps_done() == 300);
    d->reset();
    CHECK(d->steps_done() == 0);
  }
}

TEST_CASE("make() with no overrides equals the typed factories", "[dyn]") {
  auto check = [](const std::string& name, auto typed) {
    INFO(name);
    auto d = gnmr_test::make(name, typed.num_units());
    same_run(*d, typed, 11);
  };
  check("none", presets::pass_through(5));
  check("clip", presets::global_clip(1));
  check("zclip", presets::zclip(1));
  check("adagc", presets::adagc(5));
  check("spam", presets::spam(5));
  check("skip-step", presets::skip_step(1));
  check("stabilizer", presets::stabilizer(5));
  check("gnmr", presets::gnmr_preset(5));
  check("gnmr-ladder", presets::gnmr_ladder(5));
  check("gnmr-promote", presets::gnmr_promote(5));
  check("gnmr-clip", presets::gnmr_clip(5));
  check("gnmr-systemic", presets::gnmr_systemic(5));
  check("gnmr-calibrated", presets::gnmr_calibrated(5));
}

TEST_CASE("every override reaches its policy", "[dyn]") {
  SECTION("gnmr-clip: all knobs, mean = ema") {
    Options o;
    o.tau = 2.0f, o.delta = 1.0f, o.warmup = 5, o.delta_window = 2, o.beta = 0.9f;
    o.max_o = 2, o.lock = 3, o.cooldown = 1, o.kappa = 0.5f;
    auto d = gnmr_test::make("gnmr-clip", 6, o);
    gnmr::GnmrTrigger t;
    t.tau = 2.0f, t.delta = 1.0f, t.warmup = 5, t.window = 2;
    gnmr::GnmrController<> c(6, {}, gnmr::EmaMean{0.9f}, t, gnmr::ClipToMean{0.5f},
                             gnmr::MaxO{2, 3, 1});
    CHECK(d->max_in_recovery() == 2u);
    same_run(*d, c, 21);
  }
  SECTION("gnmr-ladder: kappa goes to the ladder; mean = cumulative") {
    Options o;
    o.kappa = 0.8f, o.mean = std::string("cumulative"), o.tau = 2.5f;
    auto d = gnmr_test::make("gnmr-ladder", 6, o);
    gnmr::GnmrTrigger t;
    t.tau = 2.5f;
    gnmr::Ladder l;
    l.kappa = 0.8f;
    gnmr::GnmrController<gnmr::L2Norm, gnmr::CumulativeMean, gnmr::GnmrTrigger, gnmr::Ladder> c(
        6, {}, {}, t, l, {});
    same_run(*d, c, 22);
  }
  SECTION("gnmr-clip: mean = window with a window override") {
    Options o;
    o.mean = std::string("window"), o.window = 8;
    auto d = gnmr_test::make("gnmr-clip", 6, o);
    gnmr::WindowMean<64> m;
    m.window = 8;
    gnmr::GnmrController<gnmr::L2Norm, gnmr::WindowMean<64>> c(6, {}, m);
    same_run(*d, c, 23);
  }
  SECTION("gnmr: kappa to the clip of clip + promote, the systemic and denied rules on, max_o") {
    Options o;
    o.kappa = 0.5f, o.max_o = 2;
    auto d = gnmr_test::make("gnmr", 6, o);
    gnmr::ControllerOptions opt;
    opt.systemic = presets::gnmr_systemic_rule();
    opt.denied = presets::gnmr_denied_rule();
    presets::Gnmr c(6, {}, {}, {}, presets::ClipAndPromote{gnmr::ClipToMean{0.5f}, {}}, gnmr::MaxO{2, 8, 0}, opt);
    same_run(*d, c, 24);
  }
  SECTION("clip: max_norm") {
    Options o;
    o.max_norm = 0.7f;
    auto d = gnmr_test::make("clip", 1, o);
    auto c = presets::global_clip(1, presets::TorchClipParams{0.7f, 1e-6f});
    same_run(*d, c, 24);
  }
  SECTION("zclip: z, warmup, beta (alpha), max_norm, clip_factor") {
    Options o;
    o.z = 2.0f, o.warmup = 10, o.beta = 0.9f, o.max_norm = 3.0f, o.clip_factor = 0.8f;
    auto d = gnmr_test::make("zclip", 1, o);
    presets::ZClipParams p;
    p.z_thresh = 2.0f, p.warmup_steps = 10, p.alpha = 0.9f, p.max_grad_norm = 3.0f;
    p.clip_factor = 0.8f;
    auto c = presets::zclip(1, p);
    same_run(*d, c, 25);
  }
  SECTION("adagc: tau (clip_ratio), beta, warmup") {
    Options o;
    o.tau = 1.1f, o.beta = 0.9f, o.warmup = 7;
    auto d = gnmr_test::make("adagc", 5, o);
    auto c = presets::adagc(5, presets::AdaGCParams{1.1f, 0.9f, 1e-6f, 7});
    same_run(*d, c, 26);
  }
  SECTION("spam: tau (sqrt(theta)), beta (beta2), warmup") {
    Options o;
    o.tau = 4.0f, o.beta = 0.99f, o.warmup = 3;
    auto d = gnmr_test::make("spam", 5, o);
    presets::SpamParams p;
    p.threshold = 16.0f, p.beta2 = 0.99f, p.grad_accu_steps = 4;  // sqrt(16) = 4, 4 - 1 = 3
    auto c = presets::spam(5, p);
    same_run(*d, c, 27);
  }
  SECTION("spam: restart_every (SPAM's DeltaT), with warmup moving the quiet window") {
    Options o;
    o.restart_every = 37, o.warmup = 5;
    auto d = gnmr_test::make("spam", 5, o);
    presets::SpamParams p;
    p.delta_t = 37, p.grad_accu_steps = 6;
    auto c = presets::spam(5, p);
    same_run(*d, c, 28);  // 400 steps: ten restarts
  }
  SECTION("stabilizer: restart_every") {
    Options o;
    o.restart_every = 50;
    auto d = gnmr_test::make("stabilizer", 5, o);
    presets::StabilizerParams p;
    p.restart_every = 50;
    auto c = presets::stabilizer(5, p);
    same_run(*d, c, 29);
  }
  SECTION("skip-step: z, window (warm-up follows it), warmup") {
    Options o;
    o.z = 3.0f, o.window = 60;
    auto d = gnmr_test::make("skip-step", 1, o);
    presets::SkipStepParams p;
    p.sigma_factor = 3.0f, p.rolling_interval_length = 60;
    auto c = presets::skip_step(1, p);
    CHECK(c.policies().trigger.warmup == 29u);  // max(2, 60/2) - 1
    same_run(*d, c, 28);
    o.warmup = 5;
    auto d2 = gnmr_test::make("skip-step", 1, o);
    p.warmup = 5;
    auto c2 = presets::skip_step(1, p);
    same_run(*d2, c2, 29);
  }
  SECTION("an override changes decisions in the expected direction") {
    Options lo;
    lo.tau = 1.5f;
    auto a = gnmr_test::make("gnmr", 6);
    auto b = gnmr_test::make("gnmr", 6, lo);
    const int ta = triggered_total(*a, 30), tb = triggered_total(*b, 30);
    CHECK(tb > ta);
    CHECK(ta > 0);
  }
}

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no exception)";
}

TEST_CASE("bad names and misplaced overrides are rejected with the valid choices", "[dyn]") {
  using Catch::Matchers::Contains;
  const std::string unknown = error_of([] { gnmr_test::make("zclp", 1); });
  CHECK_THAT(unknown, Contains("unknown preset 'zclp'"));
  for (const auto& n : presets::names()) CHECK_THAT(unknown, Contains(n));
  CHECK_THROWS_AS(presets::is_global("GNMR"), std::invalid_argument);

  Options tau;
  tau.tau = 2.0f;
  const std::string misplaced = error_of([&] { gnmr_test::make("clip", 1, tau); });
  CHECK_THAT(misplaced, Contains("'tau' does not apply to preset 'clip'"));
  CHECK_THAT(misplaced, Contains("max_norm"));
  CHECK_THROWS_AS(gnmr_test::make("none", 3, tau), std::invalid_argument);
  CHECK_THROWS_AS(gnmr_test::make("stabilizer", 3, tau), std::invalid_argument);

  Options o;
  o.mean = std::string("median");
  CHECK_THAT(error_of([&] { gnmr_test::make("gnmr", 3, o); }), Contains("ema, cumulative, window"));
  Options w;
  w.window = 8;  // needs mean=window
  CHECK_THAT(error_of([&] { gnmr_test::make("gnmr", 3, w); }), Contains("mean=window"));
  Options b;
  b.beta = 0.9f, b.mean = std::string("cumulative");
  CHECK_THAT(error_of([&] { gnmr_test::make("gnmr-ladder", 3, b); }), Contains("mean=ema"));
  Options neg;
  neg.warmup = -1;
  CHECK_THAT(error_of([&] { gnmr_test::make("adagc", 3, neg); }), Contains("'warmup'"));
  Options big;
  big.window = 129;
  CHECK_THROWS_AS(gnmr_test::make("skip-step", 1, big), std::invalid_argument);
  Options big64;
  big64.window = 65, big64.mean = std::string("window");
  CHECK_THROWS_AS(gnmr_test::make("gnmr", 2, big64), std::invalid_argument);  // WindowMean<64>
  // Values the policies themselves reject surface as invalid_argument too.
  Options zero;
  zero.max_o = 0;
  CHECK_THAT(error_of([&] { gnmr_test::make("gnmr", 3, zero); }), Contains("max_o"));
  Options badbeta;
  badbeta.beta = 1.0f;
  CHECK_THROWS_AS(gnmr_test::make("spam", 3, badbeta), std::invalid_argument);
  Options dw;
  dw.delta_window = 9;  // GnmrTrigger's ring holds 8
  CHECK_THROWS_AS(gnmr_test::make("gnmr", 3, dw), std::invalid_argument);
  CHECK_THROWS_AS(gnmr_test::make("gnmr", 0), std::invalid_argument);
}

}  // namespace

TEST_CASE("make_default is the preset default: the recommended controller by one name", "[dyn]") {
  auto a = gnmr_test::make_default(7);
  auto b = gnmr_test::make("default", 7);
  CHECK(a->name() == "default");  // as gnmr::cuda::make_default's
  CHECK(b->name() == "default");
  same_run(*a, *b, 31);
  presets::Options o;
  o.rate = 1e-4f;
  auto c = gnmr_test::make_default(7, o);
  auto d = gnmr_test::make("default", 7, o);
  same_run(*c, *d, 32);
}
