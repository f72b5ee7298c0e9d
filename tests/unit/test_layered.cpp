// Layered controllers (gnmr/host/layered.hpp, gnmr/step/layered.hpp): an
// outer rule and a GNMR preset in one step. Each layered decision is checked
// against the two rules run on their own, separately built, on the same
// partials, combined here by the documented rule written out longhand
// (scales multiply, the outer's skip/reset/non-finite flags join the
// inner's, promotion from the inner only); a global outer is fed the global
// norm of the inner's finite norms. Names, overrides,
// state round trips and all-or-nothing loads too.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gnmr/host/layered.hpp"
#include "gnmr/io/state.hpp"
#include "gnmr/presets/make.hpp"

#include "../support/dyn_runs.hpp"
#include "../support/make_once.hpp"

namespace {

namespace presets = gnmr::presets;
using presets::Options;

// Rows of L2 partials (squares of dyntest's norms: spikes, a few NaNs).
std::vector<std::vector<float>> partial_rows(std::uint64_t seed, std::size_t units, int steps) {
  auto r = dyntest::rows(seed, units, steps);
  for (auto& row : r)
    for (auto& x : row) x = x * x;
  return r;
}

// The same flags and scale bits on every unit of this step.
void require_same_decisions(const gnmr::DynController& a, const gnmr::DynController& b) {
  REQUIRE(a.num_units() == b.num_units());
  for (std::size_t u = 0; u < a.num_units(); ++u) {
    INFO("unit " << u);
    REQUIRE(a.decisions()[u].flags == b.decisions()[u].flags);
    REQUIRE(a.decisions()[u].scale == b.decisions()[u].scale);
  }
}

constexpr std::uint32_t kOuterFlags = gnmr::kSkip | gnmr::kResetMoments | gnmr::kNonFinite;

// The layered run against the two rules alone, step by step.
void check_layered(const std::string& outer, const std::string& inner, std::size_t units, std::uint64_t seed,
                   const Options& oo = {}, int steps = 300) {
  auto layered = gnmr_test::make(outer + "+" + inner, units, oo);  // oo: keys only the outer takes
  const bool global = presets::is_global(outer);
  auto o = gnmr_test::make(outer, global ? 1 : units, oo);
  auto i = gnmr_test::make(inner, units);
  CHECK(layered->name() == outer + "+" + inner);
  CHECK(layered->num_units() == units);
  CHECK(layered->max_in_recovery() == i->max_in_recovery());
  int outer_acted = 0, inner_acted = 0, promoted = 0;
  for (const auto& p : partial_rows(seed, units, steps)) {
    const auto& s = layered->step(p);
    const auto& si = i->step(p);
    if (global) {  // G over the inner's finite norms, in the documented order
      std::vector<float> norms(units);
      for (std::size_t u = 0; u < units; ++u) norms[u] = i->reports()[u].norm;
      std::vector<double> scratch(gnmr::detail::total_scratch_size(units) + 1);
      const float g = std::sqrt(static_cast<float>(gnmr::detail::total_sq_tree(norms.data(), units, scratch.data())));
      o->step_norms(&g, 1);
    } else {
      o->step(p);
    }
    REQUIRE(s.step == si.step);
    REQUIRE(s.triggered == si.triggered);
    REQUIRE(s.granted == si.granted);
    REQUIRE(s.skip_step == (o->summary().skip_step || si.skip_step ? 1u : 0u));
    for (std::size_t u = 0; u < units; ++u) {
      INFO("step " << s.step << " unit " << u);
      const gnmr::UnitDecision od = o->decisions()[global ? 0 : u], id = i->decisions()[u];
      const gnmr::UnitDecision d = layered->decisions()[u];
      REQUIRE(d.flags == (id.flags | (od.flags & kOuterFlags)));
      REQUIRE(d.scale == od.scale * id.scale);
      REQUIRE(layered->reports()[u].scale == d.scale);
      REQUIRE(layered->reports()[u].flags == d.flags);
      REQUIRE(std::memcmp(&layered->reports()[u].norm, &i->reports()[u].norm, sizeof(float)) == 0);
      REQUIRE(((d.flags & gnmr::kPromote) != 0) == ((id.flags & gnmr::kPromote) != 0));
      outer_acted += od.scale < 1.0f || (od.flags & gnmr::kSkip);
      inner_acted += id.scale < 1.0f;
      promoted += (d.flags & gnmr::kPromote) != 0;
    }
    REQUIRE(layered->promoted_units() == i->promoted_units());
  }
  // The rows must exercise both rules, or the checks above prove little.
  CHECK(outer_acted > 0);
  CHECK(inner_acted > 0);
  if (inner == "gnmr" || inner == "gnmr-promote") CHECK(promoted > 0);
}

TEST_CASE("a layered controller combines a per-unit outer rule with GNMR as documented", "[layered]") {
  check_layered("stabilizer", "gnmr", 6, 11);
  check_layered("stabilizer", "gnmr-promote", 6, 12);
  check_layered("adagc", "gnmr-clip", 5, 13);
  check_layered("spam", "gnmr", 5, 14);
}

TEST_CASE("a global outer rule sees the global norm of the finite units and acts on every unit", "[layered]") {
  Options clip;
  clip.max_norm = 2.0f;  // acts on most steps of these rows
  check_layered("clip", "gnmr", 7, 21, clip);
  check_layered("zclip", "gnmr-promote", 7, 22);
  check_layered("skip-step", "gnmr", 7, 23);

  // A NaN unit is skipped by GNMR alone: the global rule still sees a
  // finite total and the other units update.
  auto l = gnmr_test::make("clip+gnmr", 4);
  std::vector<float> p = {1.0f, 4.0f, std::numeric_limits<float>::quiet_NaN(), 4.0f};
  l->step(p);
  const auto& d = l->decisions();
  CHECK((d[2].flags & gnmr::kSkip) != 0);
  CHECK((d[2].flags & gnmr::kNonFinite) != 0);
  for (std::size_t u : {0u, 1u, 3u}) {
    CHECK((d[u].flags & gnmr::kSkip) == 0);
    CHECK(std::isfinite(d[u].scale));
    CHECK(d[u].scale == Approx(1.0 / 3.0).epsilon(1e-5));  // torch's max_norm / (total + 1e-6), total 3
  }
}

TEST_CASE("min combine takes the smaller scale; product is the default", "[layered]") {
  const gnmr::UnitDecision o{0.5f, gnmr::kSkip | gnmr::kTriggered | gnmr::kPromote};
  const gnmr::UnitDecision i{0.25f, gnmr::kTriggered | gnmr::kGranted};
  const auto p = gnmr::layer_decision(o, i, gnmr::ScaleCombine::kProduct);
  const auto m = gnmr::layer_decision(o, i, gnmr::ScaleCombine::kMin);
  CHECK(p.scale == 0.125f);
  CHECK(m.scale == 0.25f);
  // The outer's trigger and promotion do not join; its skip does.
  CHECK(p.flags == (gnmr::kSkip | gnmr::kTriggered | gnmr::kGranted));
  CHECK(m.flags == p.flags);

  auto a = gnmr::LayeredController(gnmr_test::make("stabilizer", 4), gnmr_test::make("gnmr", 4), gnmr::ScaleCombine::kMin);
  CHECK(a.combine_rule() == gnmr::ScaleCombine::kMin);
  CHECK(a.name() == "stabilizer+gnmr");
  for (const auto& r : partial_rows(5, 4, 100)) {
    a.step(r);
    for (std::size_t u = 0; u < 4; ++u) {
      const float so = a.outer().decisions()[u].scale, si = a.inner().decisions()[u].scale;
      REQUIRE(a.decisions()[u].scale == (so < si ? so : si));
    }
  }
}

TEST_CASE("step_norms and step decide alike for a layered controller", "[layered]") {
  auto a = gnmr_test::make("clip+gnmr", 5), b = gnmr_test::make("clip+gnmr", 5);
  auto c = gnmr_test::make("stabilizer+gnmr", 5), d = gnmr_test::make("stabilizer+gnmr", 5);
  for (const auto& norms : dyntest::rows(31, 5, 200)) {
    std::vector<float> p(norms.size()), fin(norms.size());  // fin: L2's finish of p
    for (std::size_t u = 0; u < p.size(); ++u) {
      p[u] = norms[u] * norms[u];
      fin[u] = std::sqrt(p[u]);
    }
    a->step(p);
    b->step_norms(fin);
    c->step(p);
    d->step_norms(fin);
    require_same_decisions(*a, *b);
    require_same_decisions(*c, *d);
  }
}

TEST_CASE("layered names and overrides are checked and routed", "[layered]") {
  CHECK(presets::is_layered("stabilizer+gnmr"));
  CHECK_FALSE(presets::is_layered("gnmr"));
  CHECK_FALSE(presets::is_global("clip+gnmr"));
  CHECK_THROWS_WITH(gnmr_test::make("gnmr+stabilizer", 3), Catch::Contains("outer rule"));
  CHECK_THROWS_WITH(gnmr_test::make("none+gnmr", 3), Catch::Contains("outer rule"));
  CHECK_THROWS_WITH(gnmr_test::make("clip+zclip", 3), Catch::Contains("inner rule"));
  CHECK_THROWS_WITH(gnmr_test::make("clip+gnmr+x", 3), Catch::Contains("one '+'"));
  CHECK_THROWS_WITH(gnmr_test::make("nope+gnmr", 3), Catch::Contains("unknown preset 'nope'"));
  CHECK_THROWS_AS(presets::is_global("nope+gnmr"), std::invalid_argument);

  // Keys GNMR takes go to GNMR; keys only the outer takes go to the outer.
  Options o;
  o.tau = 7.0f;            // spam and gnmr both take it: gnmr's
  o.restart_every = 123;   // spam's only
  o.max_o = 2;             // gnmr's only
  const auto split = presets::layered_options(presets::split_layered("spam+gnmr"), o);
  CHECK_FALSE(split.first.tau.has_value());
  CHECK(*split.first.restart_every == 123);
  CHECK_FALSE(split.first.max_o.has_value());
  CHECK(*split.second.tau == 7.0f);
  CHECK_FALSE(split.second.restart_every.has_value());
  CHECK(*split.second.max_o == 2);
  auto l = gnmr_test::make("spam+gnmr", 4, o);
  CHECK(l->max_in_recovery() == 2u);
  Options bad;
  bad.z = 2.0f;  // neither spam nor gnmr
  CHECK_THROWS_WITH(gnmr_test::make("spam+gnmr", 4, bad), Catch::Contains("applies to neither"));
  const auto keys = presets::overrides_of("spam+gnmr");
  CHECK(std::find(keys.begin(), keys.end(), "restart_every") != keys.end());
  CHECK(std::find(keys.begin(), keys.end(), "max_o") != keys.end());

  CHECK_THROWS_AS(gnmr::LayeredController(gnmr_test::make("stabilizer", 3), gnmr_test::make("gnmr", 4)),
                  std::invalid_argument);
  CHECK_THROWS_AS(gnmr::LayeredController(nullptr, gnmr_test::make("gnmr", 4)), std::invalid_argument);
  auto ok = gnmr_test::make("stabilizer+gnmr", 4);
  CHECK_THROWS_AS(ok->step(std::vector<float>(3, 1.0f)), std::invalid_argument);
}

// Every override a layered name routes must be one the split can take away
// from the side that does not accept it: a key clear_option forgot reaches
// both rules and the outer refuses it (deny_action inside "default" once did).
TEST_CASE("every override can be routed to one side of a layered name", "[layered]") {
  Options all;
  all.tau = 1.0f; all.delta = 1.0f; all.warmup = 1; all.window = 1; all.delta_window = 1; all.beta = 0.5f;
  all.max_o = 1; all.lock = 1; all.cooldown = 1; all.kappa = 1.0f; all.max_norm = 1.0f; all.z = 1.0f;
  all.clip_factor = 1.0f; all.mean = "ema"; all.restart_every = 1; all.systemic_action = "none";
  all.systemic_share = 0.5f; all.systemic_maxo = 1; all.systemic_kappa = 1.0f; all.systemic_beta = 0.5f;
  all.systemic_max_grants = 1; all.deny_action = "none"; all.deny_kappa = 1.0f; all.rate = 1e-3;
  all.floor = 1.0f; all.ceiling = 16.0f;
  const auto keys = presets::detail::options_given(all);
  CHECK(keys.size() == 26u);
  for (const auto& k : keys) {
    Options one = all;
    presets::detail::clear_option(one, k);
    const auto left = presets::detail::options_given(one);
    CHECK(left.size() == keys.size() - 1);
    CHECK(std::find(left.begin(), left.end(), k) == left.end());
  }
  // The recommended controller takes its inner rule's denied-unit override.
  Options none;
  none.deny_action = "none";
  CHECK_NOTHROW(gnmr_test::make("default", 4, none));
  CHECK_NOTHROW(gnmr_test::make_default(4, none));
  // Inside a layered preset the calibrated rule leaves its denied units to the
  // outer rule unless told otherwise; deny_kappa alone still means a clip.
  CHECK(*presets::plan_layered("default", 4, {}).inner.deny_action == "none");
  Options kap;
  kap.deny_kappa = 2.0f;
  const auto pk = presets::plan_layered("default", 4, kap);
  CHECK_FALSE(pk.inner.deny_action.has_value());
  CHECK(*pk.inner.deny_kappa == 2.0f);
  CHECK_NOTHROW(gnmr_test::make("default", 4, kap));
  Options tgt;
  tgt.deny_action = "clip-target";
  CHECK(*presets::plan_layered("default", 4, tgt).inner.deny_action == "clip-target");
  CHECK_FALSE(presets::plan_layered("stabilizer+gnmr", 4, {}).inner.deny_action.has_value());
}

TEST_CASE("a layered controller's state round-trips and a bad blob changes nothing", "[layered]") {
  const auto rs = partial_rows(41, 6, 240);
  auto a = gnmr_test::make("stabilizer+gnmr", 6);
  for (int t = 0; t < 160; ++t) a->step(rs[static_cast<std::size_t>(t)]);
  const auto blob = a->save();
  auto b = gnmr_test::make("stabilizer+gnmr", 6);
  b->load(blob);
  CHECK(b->steps_done() == a->steps_done());
  for (int t = 160; t < 240; ++t) {
    const auto& r = rs[static_cast<std::size_t>(t)];
    a->step(r);
    b->step(r);
    require_same_decisions(*a, *b);
  }

  // Every truncation, and a flipped byte in the inner part (its checksum),
  // throws StateError and leaves both layers as they were.
  auto c = gnmr_test::make("stabilizer+gnmr", 6);
  for (int t = 0; t < 50; ++t) c->step(rs[static_cast<std::size_t>(t)]);
  const auto before = c->save();
  for (std::size_t cut : {std::size_t{0}, std::size_t{10}, std::size_t{20}, blob.size() / 2, blob.size() - 1}) {
    INFO("cut " << cut);
    CHECK_THROWS_AS(c->load(blob.data(), cut), gnmr::StateError);
    CHECK(c->save() == before);
  }
  auto flipped = blob;
  flipped[flipped.size() - 20] ^= 0x40u;
  CHECK_THROWS_AS(c->load(flipped), gnmr::StateError);
  CHECK(c->save() == before);
  // Not a layered blob, or another layering's: rejected.
  auto g = gnmr_test::make("gnmr", 6);
  CHECK_THROWS_AS(c->load(g->save()), gnmr::StateError);
  auto other = gnmr_test::make("adagc+gnmr", 6);
  CHECK_THROWS_AS(other->load(blob), gnmr::StateError);
  CHECK(c->save() == before);

  // reset() returns both layers to their initial state: the same decisions
  // as a fresh controller from there on.
  c->reset();
  auto fresh = gnmr_test::make("stabilizer+gnmr", 6);
  CHECK(c->steps_done() == 0);
  for (int t = 0; t < 120; ++t) {
    const auto& r = rs[static_cast<std::size_t>(t)];
    c->step(r);
    fresh->step(r);
    require_same_decisions(*c, *fresh);
  }
}

}  // namespace
