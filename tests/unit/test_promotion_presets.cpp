// The presets gnmr-promote (GNMR's signal; clip to kappa * mu and promote
// for the lock) and gnmr-clip (today's gnmr under a name of its own), and
// the typed aliases behind them (presets/typed.hpp): by name they decide
// exactly like the typed controllers on a spiky trace with NaN, they take
// exactly gnmr's overrides and each override reaches its policy, gnmr-promote
// is gnmr's clip plus kPromote on the units in recovery, and the state blob
// tells the two recoveries apart.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstddef>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "gnmr/io/state.hpp"
#include "gnmr/presets/make.hpp"
#include "../support/make_once.hpp"

namespace {

namespace presets = gnmr::presets;
using presets::Options;

// Rows of per-unit norms: noisy levels, spikes of 3x to 33x (some on several
// units at once, so maxO is contended), and a few NaN / Inf entries.
std::vector<std::vector<float>> spiky(std::uint64_t seed, std::size_t units, int steps) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  std::vector<std::vector<float>> out;
  for (int t = 0; t < steps; ++t) {
    std::vector<float> r(units);
    const bool burst = ud(rng) < 0.02;
    for (std::size_t u = 0; u < units; ++u) {
      double x = (0.5 + 0.3 * static_cast<double>(u)) * (0.8 + 0.4 * ud(rng));
      if (burst || ud(rng) < 0.03) x *= 3.0 + 30.0 * ud(rng);
      const double p = ud(rng);
      r[u] = p > 0.997 ? std::numeric_limits<float>::quiet_NaN()
             : p > 0.995 ? std::numeric_limits<float>::infinity()
                         : static_cast<float>(x);
    }
    out.push_back(r);
  }
  return out;
}

// Same rows into both: decisions and reports must be equal bit for bit.
template <class A, class B>
int same_run(A& a, B& b, std::uint64_t seed, int steps = 600) {
  REQUIRE(a.num_units() == b.num_units());
  int promoted = 0;
  for (const auto& r : spiky(seed, b.num_units(), steps)) {
    const auto& sa = a.step_norms(r);
    const auto& sb = b.step_norms(r);
    REQUIRE(sa.step == sb.step);
    // Up to the last field: StepSummary has tail padding, whose bytes are
    // unspecified (clang leaves them, g++ happened to zero them).
    constexpr std::size_t kBytes = offsetof(gnmr::StepSummary, total_mean) + sizeof(float);
    REQUIRE(std::memcmp(&sa, &sb, kBytes) == 0);
    for (std::size_t u = 0; u < b.num_units(); ++u) {
      INFO("step " << sb.step << " unit " << u);
      REQUIRE(std::memcmp(&a.decisions()[u], &b.decisions()[u], sizeof(gnmr::UnitDecision)) == 0);
      REQUIRE(std::memcmp(&a.reports()[u], &b.reports()[u], sizeof(gnmr::UnitReport)) == 0);
      promoted += (b.decisions()[u].flags & gnmr::kPromote) ? 1 : 0;
    }
  }
  return promoted;
}

const std::vector<std::string>& gnmr_overrides() {
  return presets::detail::find_preset("gnmr").overrides;
}

}  // namespace

TEST_CASE("typed aliases: one line per combination, on either backend", "[presets][promotion]") {
  using presets::ClipAndPromote;
  using presets::GnmrWith;
  STATIC_REQUIRE(std::is_same<ClipAndPromote, gnmr::Compose<gnmr::ClipToMean, gnmr::PromotePrecision>>::value);
  STATIC_REQUIRE(std::is_same<presets::GnmrPromote,
                              gnmr::GnmrController<gnmr::L2Norm, gnmr::EmaMean, gnmr::GnmrTrigger,
                                                   ClipAndPromote, gnmr::MaxO>>::value);
  STATIC_REQUIRE(std::is_same<presets::GnmrClip, gnmr::GnmrController<>>::value);
  STATIC_REQUIRE(std::is_same<presets::GnmrPromote, presets::Gnmr>::value);  // gnmr = clip + promote (+ systemic)
  STATIC_REQUIRE(std::is_same<GnmrWith<gnmr::Ladder>, presets::GnmrLadder>::value);
  STATIC_REQUIRE(std::is_same<presets::GnmrPromoteOnly::Policies::RecoveryT, gnmr::PromotePrecision>::value);
  // The backend is a template parameter: any controller template of the
  // five policies (gnmr::cuda::DeviceController in a .cu file).
  STATIC_REQUIRE(std::is_same<GnmrWith<ClipAndPromote, gnmr::GnmrController>, presets::GnmrPromote>::value);

  const auto p = presets::gnmr_promote(3, 0.5f);
  CHECK(p.policies().recovery.first.kappa == 0.5f);
  CHECK(presets::gnmr_promote(3).policies().recovery.first.kappa == 1.0f);
  CHECK(presets::gnmr_clip(3, 2.0f).policies().recovery.kappa == 2.0f);
  CHECK(p.policies().budget.max_o == 4);
  CHECK(p.policies().budget.lock == 8);
  CHECK(p.policies().trigger.tau == 3.0f);
}

TEST_CASE("gnmr-promote and gnmr-clip by name decide exactly like the typed controllers",
          "[presets][promotion]") {
  CHECK_FALSE(presets::is_global("gnmr-promote"));
  CHECK_FALSE(presets::is_global("gnmr-clip"));
  {
    auto d = gnmr_test::make("gnmr-promote", 6);
    CHECK(d->name() == "gnmr-promote");
    CHECK(d->max_in_recovery() == 4u);
    auto c = presets::gnmr_promote(6);
    CHECK(same_run(*d, c, 101) > 0);  // the trace does promote
  }
  {
    auto d = gnmr_test::make("gnmr-clip", 6);
    auto c = presets::gnmr_clip(6);
    CHECK(same_run(*d, c, 102) == 0);  // clipping only: never kPromote
    auto g = gnmr_test::make("gnmr", 6);
    auto typed = presets::gnmr_preset(6);
    same_run(*g, typed, 103);  // gnmr: clip + promote with the systemic rule on
  }
}

TEST_CASE("gnmr-promote is gnmr's clip plus kPromote for every unit in recovery",
          "[presets][promotion]") {
  auto prom = presets::gnmr_promote(7);
  auto clip = presets::gnmr_clip(7);
  auto only = presets::gnmr_promote_only(7);
  int in_recovery = 0, clipped = 0, nonfinite_in_lock = 0;
  for (const auto& r : spiky(104, 7, 800)) {
    prom.step_norms(r);
    clip.step_norms(r);
    only.step_norms(r);
    for (std::size_t u = 0; u < 7; ++u) {
      INFO("step " << prom.steps_done() << " unit " << u);
      const gnmr::UnitDecision a = prom.decisions()[u], b = clip.decisions()[u], o = only.decisions()[u];
      REQUIRE(std::memcmp(&a.scale, &b.scale, sizeof(float)) == 0);
      REQUIRE((a.flags & ~gnmr::kPromote) == b.flags);
      REQUIRE(o.flags == a.flags);
      // Promoted exactly while in recovery, a non-finite step of the lock
      // included (docs/algorithm.md: the promotion holds; the unit is skipped).
      REQUIRE(((a.flags & gnmr::kPromote) != 0u) == ((a.flags & gnmr::kInRecovery) != 0u));
      nonfinite_in_lock += (a.flags & gnmr::kNonFinite) && (a.flags & gnmr::kInRecovery) ? 1 : 0;
      // Promotion alone leaves a finite gradient as it is.
      if (!(a.flags & gnmr::kNonFinite)) REQUIRE(o.scale == 1.0f);
      in_recovery += (a.flags & gnmr::kInRecovery) ? 1 : 0;
      clipped += a.scale < 1.0f && !(a.flags & gnmr::kNonFinite);
    }
    // The host's compact view lists exactly the units a scan would find.
    std::vector<std::uint32_t> scan;
    for (std::uint32_t u = 0; u < 7; ++u)
      if (prom.decisions()[u].flags & gnmr::kPromote) scan.push_back(u);
    REQUIRE(prom.promoted_units() == scan);
    REQUIRE(clip.promoted_units().empty());
  }
  CHECK(in_recovery > 50);
  CHECK(nonfinite_in_lock > 0);  // the trace reaches the non-finite-in-lock case
  CHECK(clipped > 10);
}

TEST_CASE("gnmr-promote and gnmr-clip take exactly gnmr's overrides", "[presets][promotion]") {
  for (const char* name : {"gnmr-promote", "gnmr-clip"}) {
    INFO(name);
    CHECK(presets::detail::find_preset(name).overrides == gnmr_overrides());
    // Each of gnmr's knobs is accepted alone (mean-dependent ones with their mean) ...
    for (const std::string& k : gnmr_overrides()) {
      INFO(k);
      Options o;
      if (k == "tau") o.tau = 2.0f;
      if (k == "delta") o.delta = 1.0f;
      if (k == "warmup") o.warmup = 4;
      if (k == "window") o.window = 8, o.mean = std::string("window");
      if (k == "delta_window") o.delta_window = 2;
      if (k == "beta") o.beta = 0.9f;
      if (k == "max_o") o.max_o = 2;
      if (k == "lock") o.lock = 3;
      if (k == "cooldown") o.cooldown = 1;
      if (k == "kappa") o.kappa = 0.5f;
      if (k == "mean") o.mean = std::string("cumulative");
      CHECK_NOTHROW(gnmr_test::make(name, 3, o));
    }
    // ... and the peers' knobs are refused, naming gnmr's.
    Options z;
    z.z = 2.0f;
    try {
      gnmr_test::make(name, 3, z);
      FAIL("override z accepted");
    } catch (const std::invalid_argument& e) {
      CHECK_THAT(e.what(), Catch::Matchers::Contains("'z' does not apply to preset '" + std::string(name)));
      CHECK_THAT(e.what(), Catch::Matchers::Contains("kappa"));
    }
    Options mn;
    mn.max_norm = 1.0f;
    CHECK_THROWS_AS(gnmr_test::make(name, 3, mn), std::invalid_argument);
    Options bad;
    bad.kappa = 0.0f;  // ClipToMean rejects it
    CHECK_THROWS_AS(gnmr_test::make(name, 3, bad), std::invalid_argument);
  }
}

TEST_CASE("every gnmr-promote override reaches its policy", "[presets][promotion]") {
  SECTION("all knobs, mean = ema") {
    Options o;
    o.tau = 2.0f, o.delta = 1.0f, o.warmup = 5, o.delta_window = 2, o.beta = 0.9f;
    o.max_o = 2, o.lock = 3, o.cooldown = 1, o.kappa = 0.5f;
    auto d = gnmr_test::make("gnmr-promote", 6, o);
    gnmr::GnmrTrigger t;
    t.tau = 2.0f, t.delta = 1.0f, t.warmup = 5, t.window = 2;
    presets::GnmrPromote c(6, {}, gnmr::EmaMean{0.9f}, t,
                           presets::ClipAndPromote{gnmr::ClipToMean{0.5f}, {gnmr::PromotePrecision{}}},
                           gnmr::MaxO{2, 3, 1});
    CHECK(d->max_in_recovery() == 2u);
    CHECK(same_run(*d, c, 105) > 0);
  }
  SECTION("mean = window") {
    Options o;
    o.mean = std::string("window"), o.window = 8, o.kappa = 2.0f;
    auto d = gnmr_test::make("gnmr-promote", 6, o);
    gnmr::WindowMean<64> m;
    m.window = 8;
    gnmr::GnmrController<gnmr::L2Norm, gnmr::WindowMean<64>, gnmr::GnmrTrigger, presets::ClipAndPromote> c(
        6, {}, m, {}, presets::ClipAndPromote{gnmr::ClipToMean{2.0f}, {gnmr::PromotePrecision{}}});
    same_run(*d, c, 106);
  }
  SECTION("gnmr-clip: kappa and mean = cumulative") {
    Options o;
    o.mean = std::string("cumulative"), o.kappa = 0.7f;
    auto d = gnmr_test::make("gnmr-clip", 6, o);
    gnmr::GnmrController<gnmr::L2Norm, gnmr::CumulativeMean> c(6, {}, {}, {}, gnmr::ClipToMean{0.7f});
    same_run(*d, c, 107);
  }
  SECTION("kappa changes the clip and nothing else") {
    Options o;
    o.kappa = 0.25f;
    auto a = gnmr_test::make("gnmr-promote", 5);
    auto b = gnmr_test::make("gnmr-promote", 5, o);
    int smaller = 0;
    for (const auto& r : spiky(108, 5, 400)) {
      a->step_norms(r);
      b->step_norms(r);
      for (std::size_t u = 0; u < 5; ++u) {
        REQUIRE(a->decisions()[u].flags == b->decisions()[u].flags);
        REQUIRE(b->decisions()[u].scale <= a->decisions()[u].scale);
        smaller += b->decisions()[u].scale < a->decisions()[u].scale;
      }
    }
    CHECK(smaller > 0);
  }
}

TEST_CASE("the state blob tells gnmr-promote from gnmr-clip; gnmr and gnmr-promote share one",
          "[presets][promotion][state]") {
  const auto tr = spiky(109, 4, 300);
  auto prom = gnmr_test::make("gnmr-promote", 4);
  auto clip = gnmr_test::make("gnmr-clip", 4);
  auto plain = gnmr_test::make("gnmr", 4);
  for (int t = 0; t < 150; ++t) prom->step_norms(tr[t]), clip->step_norms(tr[t]), plain->step_norms(tr[t]);
  const auto before = clip->save();
  CHECK_THROWS_AS(clip->load(prom->save()), gnmr::StateError);
  CHECK(clip->save() == before);  // refused: nothing changed
  CHECK_THROWS_AS(prom->load(clip->save()), gnmr::StateError);
  CHECK_THROWS_AS(gnmr_test::make("gnmr", 4)->load(clip->save()), gnmr::StateError);
  // Same policies under other names and options (the systemic rule is an
  // option): the blob moves between them.
  CHECK_NOTHROW(gnmr_test::make("gnmr", 4)->load(prom->save()));
  CHECK_NOTHROW(gnmr_test::make("gnmr-systemic", 4)->load(clip->save()));
  auto resumed = gnmr_test::make("gnmr", 4);
  resumed->load(plain->save());
  auto resumed_p = gnmr_test::make("gnmr-promote", 4);
  resumed_p->load(prom->save());
  for (int t = 150; t < 300; ++t) {
    plain->step_norms(tr[t]);
    resumed->step_norms(tr[t]);
    prom->step_norms(tr[t]);
    resumed_p->step_norms(tr[t]);
    for (std::size_t u = 0; u < 4; ++u) {
      REQUIRE(std::memcmp(&plain->decisions()[u], &resumed->decisions()[u], sizeof(gnmr::UnitDecision)) == 0);
      REQUIRE(std::memcmp(&prom->decisions()[u], &resumed_p->decisions()[u], sizeof(gnmr::UnitDecision)) == 0);
    }
  }
}
