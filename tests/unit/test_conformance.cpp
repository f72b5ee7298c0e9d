// Conformance: every controller entry docs/api.md and docs/cuda.md document
// on the host, called on every controller kind a user meets — the typed
// GnmrController<...>, a DynController from presets::make, the recommended
// controller (gnmr::make_default: a LayeredController behind DynController)
// and a DynController held by make_dyn — through one template. A
// documented call that one kind lacks does not compile, and fails the
// build of this test; a call that compiles but misbehaves fails below.
// (The device kinds: tests/cuda/test_conformance.cu, compiled with nvcc.)
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gnmr/gnmr.hpp"
#include "../support/make_once.hpp"

namespace {

// One unit spikes at step 25; every documented entry is called on the way.
template <class Ctl>
void exercise(Ctl& ctl, const std::string& kind) {
  INFO(kind);
  const std::size_t n = ctl.num_units();
  REQUIRE(n == 4);
  // Partials from gradients (host_unit_partials), then the step's forms.
  std::vector<float> g0(64, 0.01f), g1(64, 0.02f), g2(64, 0.03f), g3(64, 0.04f);
  const std::vector<gnmr::Segment> segs = {{g0.data(), g0.size(), gnmr::DType::kF32, 0},
                                           {g1.data(), g1.size(), gnmr::DType::kF32, 1},
                                           {g2.data(), g2.size(), gnmr::DType::kF32, 2},
                                           {g3.data(), g3.size(), gnmr::DType::kF32, 3}};
  std::vector<float> partials(n);
  std::ostringstream events;
  gnmr::EventLog log(events);
  const std::vector<std::string> names = {"a", "b", "c", "d"};
  gnmr::NoReduce none;
  const std::vector<std::uint64_t> numel(n, 64);
  ctl.set_unit_numel(numel.data(), n);
  CHECK(ctl.partial_combine() == gnmr::Combine::kSum);
  for (int step = 1; step <= 30; ++step) {
    g0[5] = step == 25 ? 80.0f : 0.01f + 0.0005f * static_cast<float>(step % 3);
    gnmr::host_unit_partials(segs, partials);
    const gnmr::StepSummary* s = nullptr;
    switch (step % 4) {
      case 0: s = &ctl.step(partials.data(), n); break;
      case 1: s = &ctl.step(partials); break;
      case 2: s = &gnmr::reduce_and_step(ctl, none, partials.data(), n); break;
      default: {
        std::vector<float> norms(n);
        for (std::size_t i = 0; i < n; ++i) norms[i] = std::sqrt(partials[i]);
        s = step % 8 == 3 ? &ctl.step_norms(norms.data(), n) : &ctl.step_norms(norms);
      }
    }
    CHECK(s->step == step);
    CHECK(&ctl.summary() == s);
    log.write_from(ctl, names);
  }
  CHECK(ctl.steps_done() == 30);
  const gnmr::UnitDecision d = ctl.decisions()[0];
  CHECK(d.scale >= 0.0f);  // the stabilizer may scale a calm unit up; nothing is negative
  CHECK(ctl.reports().size() == n);
  CHECK(ctl.decisions().size() == n);
  const std::vector<std::uint32_t>& promoted = ctl.promoted_units();
  for (std::size_t j = 1; j < promoted.size(); ++j) CHECK(promoted[j - 1] < promoted[j]);
  CHECK(ctl.max_in_recovery() >= 1u);
  CHECK(!ctl.name().empty());
  CHECK(events.str().find("\"event\":\"trigger\"") != std::string::npos);  // the spike at step 25
  // State: the member and the free forms, a blob that loads back as it was.
  const std::vector<std::uint8_t> blob = ctl.save();
  CHECK(gnmr::save_state(ctl) == blob);
  gnmr::StateLoadOptions opt;
  ctl.reset();
  CHECK(ctl.steps_done() == 0);
  ctl.load(blob);
  CHECK(ctl.save() == blob);
  ctl.reset();
  ctl.load(blob.data(), blob.size(), opt);
  CHECK(ctl.steps_done() == 30);
  ctl.reset();
  gnmr::load_state(ctl, blob.data(), blob.size());
  gnmr::load_state(ctl, blob);
  CHECK(ctl.save() == blob);
  std::vector<std::uint8_t> bad = blob;
  bad[bad.size() / 2] ^= 0x5a;
  CHECK_THROWS_AS(ctl.load(bad), gnmr::StateError);
  CHECK(ctl.save() == blob);  // unchanged
}

}  // namespace

TEST_CASE("conformance: every documented host entry on every controller kind", "[conformance]") {
  SECTION("typed GnmrController<>") {
    gnmr::GnmrController<> c(4);
    exercise(c, "GnmrController<>");
  }
  SECTION("typed gnmr-calibrated") {
    auto c = gnmr::presets::gnmr_calibrated(4);
    exercise(c, "presets::gnmr_calibrated");
  }
  SECTION("DynController from presets::make") {
    auto c = gnmr_test::make("gnmr", 4);
    exercise(*c, "gnmr_test::make(gnmr)");
  }
  SECTION("the recommended controller, gnmr::make_default") {
    auto c = gnmr_test::make_default(4);
    exercise(*c, "make_default");
  }
  SECTION("DynController from make_dyn") {
    auto c = gnmr::make_dyn(gnmr::presets::stabilizer(4));
    exercise(*c, "make_dyn(stabilizer)");
  }
}

TEST_CASE("conformance: reducers take every controller kind, by reference or by pointer", "[conformance]") {
  std::vector<float> p = {1.0f, 2.0f, 3.0f, 4.0f};
  gnmr::NoReduce none;
  auto dflt = gnmr_test::make_default(4);
  gnmr::reduce_and_step(*dflt, none, p.data(), p.size());
  gnmr::reduce_and_step(dflt, none, p.data(), p.size());  // the unique_ptr itself
  CHECK(dflt->steps_done() == 2);
  gnmr::ReducedController<std::unique_ptr<gnmr::DynController>> owned(gnmr_test::make_default(4), gnmr::NoReduce{});
  owned.step(p.data(), p.size());
  CHECK(owned.controller().steps_done() == 1);
  CHECK(owned.controller().name() == "default");
  gnmr::ReducedController<gnmr::GnmrController<>> typed(gnmr::GnmrController<>(4), gnmr::NoReduce{});
  typed.step(p.data(), p.size());
  CHECK(typed.controller().steps_done() == 1);
  // A max-combine norm says so, through every face.
  auto linf = gnmr::make_dyn(gnmr::GnmrController<gnmr::LinfNorm>(4));
  CHECK(linf->partial_combine() == gnmr::Combine::kMax);
  CHECK(gnmr::GnmrController<gnmr::LinfNorm>::partial_combine() == gnmr::Combine::kMax);
}
