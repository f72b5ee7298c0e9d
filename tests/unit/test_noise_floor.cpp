// The noise-floor trigger (gnmr/policy/trigger_noise.hpp) and the aux
// signal that carries each unit's quantization noise into a step
// (step_with_aux): the preset gnmr-noise-floor against a double-precision
// model of its rule written from docs/algorithm.md ("Noise-floor trigger"),
// on random norms, noise levels and faults; the refusals (no aux, a layered
// controller); the overrides; the state blob.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gnmr/gnmr.hpp"
#include "../support/make_once.hpp"

namespace {

using gnmr::UnitDecision;

// The preset's rule, in doubles, with containers: a unit is a candidate at
// step t when its norm is finite and > 0, it has >= warmup accepted samples
// (finite, non-zero norms of earlier steps), its noise a is finite and > 0,
// n < c a, and it is neither in its lock nor cooling down. The free slots
// (max_o minus the units in their lock) go to the highest c a / n, ties to
// the lower index. A unit is promoted on every step of its lock.
struct Model {
  double c;
  std::uint32_t warmup;
  int max_o, lock, cooldown;
  std::vector<std::uint32_t> count;
  std::vector<std::int64_t> granted_at;

  Model(std::size_t n, double c_, std::uint32_t w, int m, int l, int cd)
      : c(c_), warmup(w), max_o(m), lock(l), cooldown(cd), count(n, 0), granted_at(n, 0) {}

  bool in_lock(std::size_t i, std::int64_t t) const {
    return granted_at[i] > 0 && t - granted_at[i] < lock;
  }
  bool eligible(std::size_t i, std::int64_t t) const {
    return granted_at[i] == 0 || t - granted_at[i] >= lock + cooldown;
  }
  // Returns each unit's {triggered, granted, promoted, skipped}; `cand_out`
  // the candidates' risks for the boundary check.
  std::vector<std::uint32_t> step(std::int64_t t, const std::vector<float>& n, const std::vector<float>& a) {
    const std::size_t N = n.size();
    std::vector<std::uint32_t> flags(N, 0);
    std::vector<std::pair<double, std::size_t>> cand;
    int held = 0;
    for (std::size_t i = 0; i < N; ++i) {
      const bool lk = in_lock(i, t);
      held += lk ? 1 : 0;
      if (lk) flags[i] |= gnmr::kInRecovery;
      if (!std::isfinite(n[i])) {
        flags[i] |= gnmr::kSkip;
        continue;
      }
      if (n[i] == 0.0f || count[i] < warmup || !std::isfinite(a[i]) || !(a[i] > 0.0f)) continue;
      const double floor = c * static_cast<double>(a[i]);
      if (static_cast<double>(n[i]) < floor) {
        flags[i] |= gnmr::kTriggered;
        if (!lk && eligible(i, t)) cand.push_back({floor / n[i], i});
      }
    }
    std::sort(cand.begin(), cand.end(), [](const auto& x, const auto& y) {
      return x.first > y.first || (x.first == y.first && x.second < y.second);
    });
    const std::size_t free = static_cast<std::size_t>(std::max(0, max_o - held));
    for (std::size_t j = 0; j < std::min(free, cand.size()); ++j) {
      const std::size_t i = cand[j].second;
      granted_at[i] = t;
      flags[i] |= gnmr::kGranted | gnmr::kInRecovery;
    }
    for (std::size_t i = 0; i < N; ++i) {
      if (flags[i] & gnmr::kInRecovery) flags[i] |= gnmr::kPromote;
      if (std::isfinite(n[i]) && n[i] != 0.0f) ++count[i];
    }
    return flags;
  }
};

// A unit's norm is away from its floor by more than float rounding.
bool clear_of_boundary(float n, float a, double c) {
  const double f = c * static_cast<double>(a);
  return !std::isfinite(n) || !std::isfinite(a) || std::fabs(static_cast<double>(n) - f) > 1e-5 * f;
}

}  // namespace

TEST_CASE("noise floor: the preset's decisions equal the double-precision model", "[noise_floor]") {
  using namespace gnmr;
  std::mt19937_64 rng(20261128);
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  const float kInf = std::numeric_limits<float>::infinity();
  int checked_triggers = 0, checked_grants = 0, checked_denied = 0;
  for (int cfg = 0; cfg < 24; ++cfg) {
    const std::size_t N = 1 + rng() % 40;
    const double c = std::vector<double>{1.7320508, 1.0, 2.5}[rng() % 3];
    const std::uint32_t warmup = static_cast<std::uint32_t>(rng() % 6);
    const int max_o = 1 + static_cast<int>(rng() % 4), lock = 1 + static_cast<int>(rng() % 6),
              cooldown = static_cast<int>(rng() % 3);
    presets::Options o;
    o.noise_c = static_cast<float>(c);
    o.warmup = warmup;
    o.max_o = max_o;
    o.lock = lock;
    o.cooldown = cooldown;
    auto ctl = gnmr_test::make("gnmr-noise-floor", N, o);
    REQUIRE(ctl->needs_aux());
    Model m(N, static_cast<float>(c), warmup, max_o, lock, cooldown);
    std::lognormal_distribution<double> ln(0.0, 0.6);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    // Per unit, a gradient norm that decays and a noise level that does not:
    // units cross their floor at different steps.
    std::vector<double> g0(N), a0(N), decay(N);
    for (std::size_t i = 0; i < N; ++i) {
      g0[i] = 4.0 * ln(rng);
      a0[i] = ln(rng);
      decay[i] = 0.9 + 0.1 * u(rng);
    }
    for (std::int64_t t = 1; t <= 40; ++t) {
      std::vector<float> sq(N), asq(N), n(N), a(N);
      // Redrawn until every unit is clear of its floor by more than float
      // rounding, so the fp32 rule and the fp64 model must agree.
      for (bool clear = false; !clear;) {
      for (std::size_t i = 0; i < N; ++i) {
        double g = g0[i] * std::pow(decay[i], static_cast<double>(t)) * ln(rng) / 1.2;
        double an = a0[i] * (0.8 + 0.4 * u(rng));
        const double r = u(rng);
        float gs = static_cast<float>(g * g), as = static_cast<float>(an * an);
        if (r < 0.02) gs = kNaN;
        else if (r < 0.03) gs = kInf;
        else if (r < 0.05) gs = 0.0f;
        else if (r < 0.07) as = kNaN;
        else if (r < 0.09) as = 0.0f;
        else if (r < 0.10) as = kInf;
        sq[i] = gs;
        asq[i] = as;
        // What the L2 norm policy finishes them to (sqrt in fp32).
        n[i] = std::sqrt(gs);
        a[i] = std::sqrt(as);
      }
      clear = true;
      for (std::size_t i = 0; i < N; ++i) clear = clear && clear_of_boundary(n[i], a[i], static_cast<float>(c));
      }
      const auto want = m.step(t, n, a);
      ctl->step_with_aux(sq.data(), asq.data(), N);
      const auto& dec = ctl->decisions();
      for (std::size_t i = 0; i < N; ++i) {
        INFO("cfg " << cfg << " step " << t << " unit " << i << " n " << n[i] << " a " << a[i]);
        const std::uint32_t mask = kTriggered | kGranted | kInRecovery | kPromote | kSkip;
        CHECK((dec[i].flags & mask) == want[i]);
        CHECK(dec[i].scale == ((want[i] & kSkip) ? 0.0f : 1.0f));  // nothing is clipped
        checked_triggers += (want[i] & kTriggered) ? 1 : 0;
        checked_grants += (want[i] & kGranted) ? 1 : 0;
        checked_denied += (dec[i].flags & kDenied) ? 1 : 0;
      }
    }
  }
  // The cases exercised what they are meant to: triggers, grants, denials.
  CHECK(checked_triggers > 500);
  CHECK(checked_grants > 50);
  CHECK(checked_denied > 50);
}

TEST_CASE("noise floor: the slots go to the units deepest under their floor", "[noise_floor]") {
  using namespace gnmr;
  presets::Options o;
  o.warmup = 0;
  o.max_o = 2;
  auto ctl = gnmr_test::make("gnmr-noise-floor", 4, o);
  // Norms 1, 1, 1, 10; noise 1, 2, 0.8, 1: floors 1.73, 3.46, 1.39, 1.73.
  const std::vector<float> sq{1.0f, 1.0f, 1.0f, 100.0f}, asq{1.0f, 4.0f, 0.64f, 1.0f};
  ctl->step_with_aux(sq.data(), asq.data(), 4);
  const auto& r = ctl->reports();
  CHECK((r[1].flags & kGranted) != 0u);  // risk 3.46
  CHECK((r[0].flags & kGranted) != 0u);  // risk 1.73
  CHECK((r[2].flags & kDenied) != 0u);   // risk 1.39, no slot left
  CHECK((r[3].flags & kTriggered) == 0u);
  CHECK(r[1].risk == Approx(2.0 * 1.7320508).epsilon(1e-6));
  CHECK(ctl->promoted_units() == std::vector<std::uint32_t>{0u, 1u});
}

TEST_CASE("noise floor: a step without the noise is refused and changes nothing", "[noise_floor]") {
  using namespace gnmr;
  auto ctl = gnmr_test::make("gnmr-noise-floor", 3);
  const std::vector<float> sq{1.0f, 2.0f, 3.0f}, asq{1.0f, 1.0f, 1.0f};
  const auto before = ctl->save();
  CHECK_THROWS_WITH(ctl->step(sq), Catch::Contains("step_with_aux"));
  CHECK_THROWS_WITH(ctl->step_norms(sq), Catch::Contains("step_norms_with_aux"));
  CHECK_THROWS_AS(ctl->step_with_aux(sq.data(), nullptr, 3), std::invalid_argument);
  CHECK_THROWS_AS(ctl->step_with_aux(sq.data(), asq.data(), 2), std::invalid_argument);
  CHECK(ctl->save() == before);
  CHECK(ctl->steps_done() == 0);
  // Every other typed controller takes aux and ignores it: the same bits.
  auto a = gnmr_test::make("gnmr-calibrated", 3), b = gnmr_test::make("gnmr-calibrated", 3);
  CHECK_FALSE(a->needs_aux());
  for (int t = 0; t < 20; ++t) {
    std::vector<float> x{1.0f + 0.01f * t, 2.0f, t == 15 ? 900.0f : 3.0f};
    a->step(x);
    b->step_with_aux(x.data(), asq.data(), 3);
  }
  CHECK(a->save() == b->save());
  // A layered controller has no aux path: a clear error.
  auto d = gnmr_test::make("default", 3);
  CHECK_THROWS_WITH(d->step_with_aux(sq.data(), asq.data(), 3), Catch::Contains("no aux signal"));
  // noise-floor cannot be the inner controller of a layered name.
  CHECK_THROWS_AS(gnmr_test::make("stabilizer+gnmr-noise-floor", 3), std::invalid_argument);
}

TEST_CASE("noise floor: aux_norms() is what the step judged, the bits an aux trace records", "[noise_floor]") {
  using namespace gnmr;
  auto ctl = gnmr_test::make("gnmr-noise-floor", 3);
  REQUIRE(ctl->aux_norms() == std::vector<float>(3, 0.0f));  // before any step
  const std::vector<float> sq{1.0f, 2.0f, 3.0f}, asq{0.25f, 2.0f, 0.0f};
  ctl->step_with_aux(sq.data(), asq.data(), 3);
  // L2's finish of each aux partial: sqrt, correctly rounded.
  CHECK(ctl->aux_norms() == std::vector<float>{0.5f, std::sqrt(2.0f), 0.0f});
  const std::vector<float> n{1.0f, 1.0f, 1.0f}, a{0.125f, std::nanf(""), 3.0f};
  ctl->step_norms_with_aux(n.data(), a.data(), 3);
  CHECK(ctl->aux_norms()[0] == 0.125f);
  CHECK(std::isnan(ctl->aux_norms()[1]));
  CHECK(ctl->aux_norms()[2] == 3.0f);
  // The kinds without an aux path hold none.
  CHECK(gnmr_test::make("default", 3)->aux_norms().empty());
}

TEST_CASE("noise floor: overrides, checks and the state blob", "[noise_floor]") {
  using namespace gnmr;
  presets::Options bad;
  bad.noise_c = 0.0f;
  CHECK_THROWS_WITH(gnmr_test::make("gnmr-noise-floor", 2, bad), Catch::Contains("c"));
  presets::Options tau;
  tau.tau = 3.0f;
  CHECK_THROWS_WITH(gnmr_test::make("gnmr-noise-floor", 2, tau), Catch::Contains("does not apply"));
  presets::Options nc;
  nc.noise_c = 2.0f;
  CHECK_THROWS_WITH(gnmr_test::make("gnmr-calibrated", 2, nc), Catch::Contains("does not apply"));
  // A controller resumed from a blob continues bit for bit.
  presets::Options o;
  o.warmup = 2;
  o.max_o = 1;
  o.lock = 3;
  auto a = gnmr_test::make("gnmr-noise-floor", 5, o), b = gnmr_test::make("gnmr-noise-floor", 5, o);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.1f, 4.0f);
  std::vector<std::vector<float>> sq(30, std::vector<float>(5)), asq(30, std::vector<float>(5));
  for (int t = 0; t < 30; ++t)
    for (int i = 0; i < 5; ++i) sq[t][i] = u(rng), asq[t][i] = u(rng);
  std::uint32_t grants = 0;
  for (int t = 0; t < 30; ++t) {
    if (t == 12) {
      const auto blob = a->save();
      b->load(blob.data(), blob.size(), {});
    }
    a->step_with_aux(sq[t].data(), asq[t].data(), 5);
    grants += a->summary().granted;
    if (t >= 12) {
      b->step_with_aux(sq[t].data(), asq[t].data(), 5);
      for (int i = 0; i < 5; ++i) CHECK(a->decisions()[i].flags == b->decisions()[i].flags);
    }
  }
  CHECK(grants >= 3u);  // the run had grants to carry across the blob
  CHECK(a->save() == b->save());
  CHECK(a->name() == "gnmr-noise-floor");
}
