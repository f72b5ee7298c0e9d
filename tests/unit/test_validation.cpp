// Bad input to GnmrController (docs/algorithm.md, State and bad input): nonsense hyperparameters are
// rejected at construction with a std::invalid_argument whose message
// names the policy parameter; bad per-step input (wrong size, null
// pointer, missing or zero unit sizes) is rejected before anything is
// touched, so the controller's state, step count and outputs are byte for
// byte what they were, and the next good step gives what it would have.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "gnmr/policy/mean_peers.hpp"
#include "semantics_util.hpp"

using namespace semtest;
using Catch::Matchers::Contains;

namespace {

// f() must throw E (or a subclass) whose what() contains every needle.
template <class E, class F>
void expect_throw(F&& f, std::initializer_list<const char*> needles) {
  try {
    f();
  } catch (const E& e) {
    const std::string what = e.what();
    INFO("what(): " << what);
    for (const char* n : needles) CHECK_THAT(what, Contains(n));
    return;
  } catch (const std::exception& e) {
    FAIL("wrong exception type, what(): " << e.what());
  }
  FAIL("no exception");
}

template <class F>
void expect_bad(F&& f, std::initializer_list<const char*> needles) {
  expect_throw<std::invalid_argument>(std::forward<F>(f), needles);
}

const float kNegInf = -std::numeric_limits<float>::infinity();

}  // namespace

TEST_CASE("construction: unit count", "[validation]") {
  expect_bad([] { Ctl c(0); }, {"unit"});
  expect_bad([] { Ctl c(std::size_t{1} << 31); }, {"units"});
  CHECK_NOTHROW(Ctl(1));
}

TEST_CASE("construction: MaxO / Unlimited budget", "[validation]") {
  expect_bad([] { make(2, ema(0.99f), trig(3, 1.5f, 10), maxo(0, 8, 0)); }, {"MaxO", "max_o"});
  expect_bad([] { make(2, ema(0.99f), trig(3, 1.5f, 10), maxo(-1, 8, 0)); }, {"max_o"});
  expect_bad([] { make(2, ema(0.99f), trig(3, 1.5f, 10), maxo(4, 0, 0)); }, {"MaxO", "lock"});
  expect_bad([] { make(2, ema(0.99f), trig(3, 1.5f, 10), maxo(4, -3, 0)); }, {"lock"});
  expect_bad([] { make(2, ema(0.99f), trig(3, 1.5f, 10), maxo(4, 8, -1)); }, {"MaxO", "cooldown"});
  CHECK_NOTHROW(make(2, ema(0.99f), trig(3, 1.5f, 10), maxo(1, 1, 0)));
  using U = gnmr::GnmrController<gnmr::L2Norm, gnmr::EmaMean, gnmr::GnmrTrigger, gnmr::ClipToMean,
                                 gnmr::Unlimited>;
  gnmr::Unlimited u;
  u.lock = 0;
  expect_bad([&] { U c(1, {}, {}, {}, {}, u); }, {"Unlimited", "lock"});
  u.lock = 1;
  u.cooldown = -2;
  expect_bad([&] { U c(1, {}, {}, {}, {}, u); }, {"Unlimited", "cooldown"});
}

TEST_CASE("construction: GnmrTrigger tau, delta, window", "[validation]") {
  const auto with = [](float tau, float delta, int window = 4) {
    return [=] { make(1, ema(0.99f), trig(tau, delta, 10, window), maxo(4, 8, 0)); };
  };
  expect_bad(with(kNaN, 1.5f), {"GnmrTrigger", "tau"});
  expect_bad(with(-1.0f, 1.5f), {"tau"});
  expect_bad(with(0.0f, 1.5f), {"tau"});
  expect_bad(with(kNegInf, 1.5f), {"tau"});
  expect_bad(with(3.0f, kNaN), {"GnmrTrigger", "delta"});
  expect_bad(with(3.0f, -0.5f), {"delta"});
  expect_bad(with(3.0f, 0.0f), {"delta"});
  // +inf switches one test off; both off would never trigger.
  CHECK_NOTHROW(with(kInf, 1.5f)());
  CHECK_NOTHROW(with(3.0f, kInf)());
  expect_bad(with(kInf, kInf), {"tau", "delta"});
  // w in [1, Cap] (Cap = 8 for GnmrTrigger).
  expect_bad(with(3.0f, 1.5f, 0), {"GnmrTrigger", "window"});
  expect_bad(with(3.0f, 1.5f, 9), {"window", "8"});
  CHECK_NOTHROW(with(3.0f, 1.5f, 8)());
  CHECK_NOTHROW(with(3.0f, 1.5f, 1)());
}

TEST_CASE("construction: mean trackers", "[validation]") {
  for (float beta : {1.0f, 1.5f, -0.1f, kNaN, kInf}) {
    INFO("beta = " << beta);
    expect_bad([=] { make(1, ema(beta), trig(3, 1.5f, 10), maxo(4, 8, 0)); }, {"EmaMean", "beta"});
  }
  CHECK_NOTHROW(make(1, ema(0.0f), trig(3, 1.5f, 10), maxo(4, 8, 0)));
  CHECK_NOTHROW(make(1, ema(0.999999f), trig(3, 1.5f, 10), maxo(4, 8, 0)));

  using W = gnmr::GnmrController<gnmr::L2Norm, gnmr::WindowMean<8>>;
  for (int window : {0, -1, 9, 100}) {
    INFO("window = " << window);
    gnmr::WindowMean<8> wm;
    wm.window = window;
    expect_bad([&] { W c(1, {}, wm); }, {"WindowMean", "window"});
  }
  gnmr::WindowMean<8> wm;
  wm.window = 8;
  CHECK_NOTHROW(W(1, {}, wm));

  using V = gnmr::GnmrController<gnmr::L2Norm, gnmr::EmaMeanVar>;
  gnmr::EmaMeanVar mv;
  mv.alpha = 1.0f;
  expect_bad([&] { V c(1, {}, mv); }, {"EmaMeanVar", "alpha"});
  mv.alpha = 0.97f;
  mv.seed = 0;
  expect_bad([&] { V c(1, {}, mv); }, {"EmaMeanVar", "seed"});
}

TEST_CASE("construction: ClipToMean kappa and ControllerOptions eps", "[validation]") {
  for (float kappa : {0.0f, -1.0f, kNaN, kInf}) {
    INFO("kappa = " << kappa);
    expect_bad([=] { make(1, ema(0.99f), trig(3, 1.5f, 10), maxo(4, 8, 0), kappa); },
               {"ClipToMean", "kappa"});
  }
  for (float eps : {0.0f, -1e-12f, kNaN, kInf}) {
    INFO("eps = " << eps);
    gnmr::ControllerOptions opt;
    opt.eps = eps;
    expect_bad([=] { Ctl c(1, {}, {}, {}, {}, {}, opt); }, {"ControllerOptions", "eps"});
  }
}

TEST_CASE("a rejected step leaves state, step count and outputs untouched", "[validation]") {
  // Bring a controller into a non-trivial state: warm, one unit locked.
  auto c = make(3, ema(0.5f), trig(3.0f, 1.5f, 2), maxo(1, 4, 1));
  auto twin = c;
  const std::vector<std::vector<float>> warm = {{1, 2, 3}, {1, 2, 3}, {1, 2, 3}, {50, 2, 3}};
  for (const auto& n : warm) {
    c.step_norms(n);
    twin.step_norms(n);
  }
  REQUIRE((c.reports()[0].flags & gnmr::kInRecovery) != 0u);

  const auto st = bytes_of(c.unit_states());
  const auto rp = bytes_of(c.reports());
  const auto dc = bytes_of(c.decisions());
  const auto sm = bytes_of(c.summary());
  const auto unchanged = [&] {
    CHECK(bytes_of(c.unit_states()) == st);
    CHECK(bytes_of(c.reports()) == rp);
    CHECK(bytes_of(c.decisions()) == dc);
    CHECK(bytes_of(c.summary()) == sm);
    CHECK(c.steps_done() == 4);
  };

  const std::vector<float> two = {1, 1}, four = {1, 1, 1, 1};
  expect_bad([&] { c.step_norms(two); }, {"step_norms", "expected 3", "got 2"});
  unchanged();
  expect_bad([&] { c.step_norms(four); }, {"step_norms", "got 4"});
  unchanged();
  expect_bad([&] { c.step(two); }, {"step", "expected 3"});
  unchanged();
  // Through volatile: a literal nullptr lets GCC warn about the (unreachable)
  // copy behind the check.
  const float* volatile null_f = nullptr;
  const std::uint64_t* volatile null_u = nullptr;
  expect_bad([&] { c.step_norms(null_f, 3); }, {"null"});
  unchanged();
  expect_bad([&] { c.step(null_f, 3); }, {"null"});
  unchanged();
  expect_bad([&] { c.step_norms(std::vector<float>{}); }, {"got 0"});
  unchanged();
  const std::uint64_t bad_numel[] = {4, 0, 4};
  expect_bad([&] { c.set_unit_numel(bad_numel, 3); }, {"set_unit_numel", "unit 1", "0"});
  unchanged();
  expect_bad([&] { c.set_unit_numel(bad_numel, 2); }, {"set_unit_numel"});
  unchanged();
  expect_bad([&] { c.set_unit_numel(null_u, 3); }, {"null"});
  unchanged();
  // A NaN norm is not bad input: it is a step (NONFINITE), not an error.

  // The next good step is exactly the twin's.
  c.step_norms({60, 2, 3});
  twin.step_norms({60, 2, 3});
  CHECK(bytes_of(c.unit_states()) == bytes_of(twin.unit_states()));
  CHECK(bytes_of(c.reports()) == bytes_of(twin.reports()));
  CHECK(bytes_of(c.decisions()) == bytes_of(twin.decisions()));
  CHECK(c.steps_done() == 5);
}

TEST_CASE("RMS: unit sizes are required and a rejected size list sets none", "[validation]") {
  gnmr::GnmrController<gnmr::RmsNorm> c(2);
  const auto st = bytes_of(c.unit_states());
  expect_throw<std::logic_error>([&] { c.step({4.0f, 4.0f}); }, {"rms", "set_unit_numel"});
  CHECK(c.steps_done() == 0);
  CHECK(bytes_of(c.unit_states()) == st);
  const std::uint64_t zero[] = {4, 0};
  expect_bad([&] { c.set_unit_numel(zero, 2); }, {"set_unit_numel", "0 elements"});
  // Still no sizes: the partial list was not half-applied.
  expect_throw<std::logic_error>([&] { c.step({4.0f, 4.0f}); }, {"set_unit_numel"});
  const std::uint64_t ok[] = {4, 16};
  c.set_unit_numel(ok, 2);
  c.step({4.0f, 4.0f});
  CHECK(c.reports()[0].norm == 1.0f);
  CHECK(c.reports()[1].norm == 0.5f);
  // A rejected replacement keeps the sizes in force.
  expect_bad([&] { c.set_unit_numel(zero, 2); }, {"0 elements"});
  c.step({16.0f, 16.0f});
  CHECK(c.reports()[0].norm == 2.0f);
  CHECK(c.reports()[1].norm == 1.0f);
}
