// DynController's state and wrappers: state round-trips through the virtual
// save()/load(), another preset's blob is refused and changes nothing,
// DynAdapter wraps any typed controller, and presets::with_preset hands over
// exactly the controller that make() wraps (the path make_device() takes).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../support/dyn_runs.hpp"
#include "gnmr/host/dyn_controller.hpp"
#include "gnmr/io/state.hpp"
#include "gnmr/presets/make.hpp"
#include "../support/make_once.hpp"

namespace {

namespace presets = gnmr::presets;
using presets::Options;
using dyntest::rows;
using dyntest::same_run;
using dyntest::units_for;

TEST_CASE("DynController state round-trips through save()/load()", "[dyn]") {
  for (const auto& name : presets::names()) {
    INFO(name);
    const std::size_t n = units_for(name);
    auto a = gnmr_test::make(name, n);
    const auto tr = rows(41, n, 500);
    for (int t = 0; t < 250; ++t) auxsteps::step_norms(*a, tr[t]);
    const std::vector<std::uint8_t> blob = a->save();
    auto b = gnmr_test::make(name, n);
    b->load(blob);
    CHECK(b->steps_done() == 250);
    for (int t = 250; t < 500; ++t) {
      const auto& sa = auxsteps::step_norms(*a, tr[t]);
      const auto& sb = auxsteps::step_norms(*b, tr[t]);
      REQUIRE(sa.step == sb.step);
      for (std::size_t u = 0; u < n; ++u) {
        REQUIRE(a->decisions()[u].scale == b->decisions()[u].scale);
        REQUIRE(a->decisions()[u].flags == b->decisions()[u].flags);
        REQUIRE(std::memcmp(&a->reports()[u], &b->reports()[u], sizeof(gnmr::UnitReport)) == 0);
      }
    }
  }
}

// save_into writes save()'s bytes, for every preset (typed and layered,
// the default included) at every point of a run; a buffer of another size
// is refused with the two sizes and nothing is written.
TEST_CASE("save_into writes save()'s bytes; a wrong size writes nothing", "[dyn][state]") {
  std::vector<std::string> all = presets::names();
  for (const auto& name : all) {
    INFO(name);
    const std::size_t n = units_for(name);
    auto a = gnmr_test::make(name, n);
    const auto tr = rows(43, n, 120);
    std::vector<std::uint8_t> into(a->state_bytes(), 0xA5u);
    for (int t = 0; t < 120; ++t) {
      if (t % 40 == 0 || t == 119) {
        const std::vector<std::uint8_t> blob = a->save();
        REQUIRE(a->state_bytes() == blob.size());
        std::fill(into.begin(), into.end(), static_cast<std::uint8_t>(0xA5u + t));  // poisoned
        a->save_into(into.data(), into.size());
        REQUIRE(into == blob);
      }
      auxsteps::step_norms(*a, tr[t]);
    }
    std::vector<std::uint8_t> small(a->state_bytes() - 1, 0x11u);
    CHECK_THROWS_WITH(a->save_into(small.data(), small.size()),
                      Catch::Contains(std::to_string(small.size()) + " bytes") &&
                          Catch::Contains(std::to_string(a->state_bytes())));
    CHECK(std::all_of(small.begin(), small.end(), [](std::uint8_t b) { return b == 0x11u; }));
  }
  // The recommended controller too (make_default's layered controller).
  auto d = gnmr_test::make_default(7);
  const auto tr = rows(44, 7, 60);
  for (int t = 0; t < 60; ++t) d->step_norms(tr[t]);
  std::vector<std::uint8_t> into(d->state_bytes());
  d->save_into(into.data(), into.size());
  CHECK(into == d->save());
}

TEST_CASE("loading another preset's blob fails and changes nothing", "[dyn]") {
  auto g = gnmr_test::make("gnmr", 5);
  auto h = gnmr_test::make("gnmr", 5);
  const auto tr = rows(51, 5, 200);
  for (int t = 0; t < 100; ++t) g->step_norms(tr[t]), h->step_norms(tr[t]);
  auto z = gnmr_test::make("adagc", 5);
  z->step_norms(tr[0]);
  CHECK_THROWS_AS(g->load(z->save()), gnmr::StateError);        // other policies
  CHECK_THROWS_AS(g->load(gnmr_test::make("gnmr", 4)->save()), gnmr::StateError);  // other N
  Options win;
  win.mean = std::string("window");
  CHECK_THROWS_AS(g->load(gnmr_test::make("gnmr", 5, win)->save()), gnmr::StateError);
  auto blob = h->save();
  blob[blob.size() / 2] ^= 0x40u;  // corrupted
  CHECK_THROWS_AS(g->load(blob), gnmr::StateError);
  CHECK(g->steps_done() == 100);
  for (int t = 100; t < 200; ++t) {
    g->step_norms(tr[t]);
    h->step_norms(tr[t]);
    for (std::size_t u = 0; u < 5; ++u) REQUIRE(g->decisions()[u].scale == h->decisions()[u].scale);
  }
}

TEST_CASE("DynAdapter wraps any controller; partials and unit sizes go through", "[dyn]") {
  using Rms = gnmr::GnmrController<gnmr::RmsNorm>;
  auto d = gnmr::make_dyn(Rms(2));
  CHECK(d->name() == "rms/ema/gnmr/clip_to_mean/maxo");
  const std::vector<float> partials = {16.0f, 9.0f};
  CHECK_THROWS_AS(d->step(partials), std::logic_error);  // RMS needs the sizes
  CHECK_THROWS_AS(d->set_unit_numel(std::vector<std::uint64_t>{4, 0}), std::invalid_argument);
  CHECK_THROWS_AS(d->set_unit_numel(std::vector<std::uint64_t>{4}), std::invalid_argument);
  d->set_unit_numel(std::vector<std::uint64_t>{4, 1});
  d->step(partials);
  CHECK(d->reports()[0].norm == 2.0f);  // sqrt(16 / 4)
  CHECK(d->reports()[1].norm == 3.0f);  // sqrt(9 / 1)

  // The typed controller stays reachable through the adapter.
  gnmr::DynAdapter<presets::ZClip> ad(presets::zclip(1), "mine");
  CHECK(ad.name() == "mine");
  CHECK(ad.controller().policies().trigger.z == 2.5f);

  // step() from L2 partials equals step_norms() from their square roots.
  auto p = gnmr_test::make("gnmr", 3);
  auto q = gnmr_test::make("gnmr", 3);
  for (int t = 0; t < 50; ++t) {
    const float k = 1.0f + static_cast<float>(t % 4);  // exact squares
    const std::vector<float> norms = {k, 2.0f * k, t == 30 ? 40.0f : 0.5f * k};
    const std::vector<float> sq = {k * k, 4.0f * k * k, norms[2] * norms[2]};
    p->step(sq);
    q->step_norms(norms);
    for (std::size_t u = 0; u < 3; ++u) REQUIRE(p->decisions()[u].scale == q->decisions()[u].scale);
  }
  CHECK(p->summary().step == 50);
}

}  // namespace

TEST_CASE("with_preset hands over the controller that make() wraps", "[dyn][presets]") {
  // The CUDA facade (gnmr::cuda::make_device) is built on with_preset: the
  // typed controller it receives must be make()'s, policies and overrides
  // included: same blob header (policy fingerprint, state size, steps) and
  // the same decisions and reports on the same partials. (The payloads are
  // not compared byte for byte: a UnitState's padding bytes are unspecified.)
  gnmr::presets::Options o;
  o.max_o = 2;
  o.tau = 2.5f;
  gnmr::presets::Options oc;  // the calibrated trigger takes rate, not tau
  oc.max_o = 2;
  oc.rate = 1e-2f;
  gnmr::presets::Options on;  // the noise floor takes noise_c
  on.max_o = 2;
  on.noise_c = 2.0f;
  for (const std::string& name : gnmr::presets::names()) {
    if (gnmr::presets::is_layered(name)) continue;  // "default": test_layered.cpp, test_calibrated.cpp
    const bool gnmr_like = name.rfind("gnmr", 0) == 0;
    const gnmr::presets::Options& opt = name == "gnmr-calibrated"    ? oc
                                        : name == "gnmr-noise-floor" ? on
                                        : gnmr_like                  ? o
                                                                     : gnmr::presets::Options{};
    const std::size_t n = gnmr::presets::is_global(name) ? 1 : 5;
    auto dyn = gnmr_test::make(name, n, opt);
    std::vector<std::vector<float>> trace = {{1.0f, 4.0f, 1.0f, 0.5f, 2.0f}, {1.1f, 3.9f, 0.9f, 0.6f, 2.1f},
                                             {1.0f, 400.0f, 1.0f, 0.5f, 2.0f}};
    for (auto& p : trace) p.resize(n);
    const auto blob = gnmr::presets::with_preset(name, n, opt, [&](auto c) {
      for (const auto& p : trace) {
        auxsteps::step(*dyn, p.data(), n);
        auxsteps::step(c, p.data(), n);
        for (std::size_t i = 0; i < n; ++i) {
          CHECK(c.decisions()[i].flags == dyn->decisions()[i].flags);
          CHECK(c.decisions()[i].scale == dyn->decisions()[i].scale);
          CHECK(c.reports()[i].risk == dyn->reports()[i].risk);
        }
      }
      return gnmr::save_state(c);
    });
    const auto other = dyn->save();
    REQUIRE(blob.size() == other.size());
    CHECK(std::equal(blob.begin(), blob.begin() + gnmr::kStateHeaderBytes, other.begin()));
    const std::uint32_t slots =
        gnmr::presets::with_preset(name, n, opt, [](auto c) { return c.policies().budget.slots(); });
    CHECK(slots == dyn->max_in_recovery());
    if (gnmr_like) CHECK(slots == 2u);
  }
  CHECK_THROWS_AS(gnmr::presets::with_preset("nope", 1, {}, [](auto) { return 0; }), std::invalid_argument);
  CHECK_THROWS_WITH(gnmr::presets::with_preset("default", 4, {}, [](auto) { return 0; }),
                    Catch::Matchers::Contains("layered preset"));
}
