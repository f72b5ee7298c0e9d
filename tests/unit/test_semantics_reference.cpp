// GnmrController against an independent double-precision model of docs/algorithm.md
// on long random traces: per-unit noise, isolated spikes, bursts where
// many units spike at once (budget contention), dips, zeros and
// NaN/+Inf/-Inf norms, over randomly drawn hyperparameters (maxO, lock,
// cool-down, warm-up, w, tau, delta, beta, kappa) and three mean trackers
// (bias-corrected EMA, cumulative, window).
//
// The model (semantics_ref.hpp) is a plain re-reading of docs/algorithm.md
// written without looking at step/step.hpp: containers, doubles, a full
// sort for the slot selection. Flags, lock counts, step numbers and the summary's counts and
// max-ratio unit must match exactly; means, ratios, deltas, risks and
// scales within 1e-4 relative (fp32 vs double). To keep "exactly" honest
// when fp32 and double could land on different sides of a comparison, a
// step whose model values come within 1e-3 of a threshold (r vs tau,
// d vs delta), of a rival's risk, or of the runner-up ratio is redrawn
// before either side sees it; the redraw rate is checked to stay small.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "semantics_ref.hpp"
#include "semantics_util.hpp"

namespace {

using namespace semtest;

// ---- Portable random numbers (std distributions differ between libraries).
struct Rng {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uni() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  int pick(int lo, int hi) { return lo + static_cast<int>(next() % (hi - lo + 1)); }
  double gauss() {
    const double u1 = 1.0 - uni(), u2 = uni();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

std::vector<float> draw_step(Rng& rng, std::vector<double>& base) {
  std::vector<float> n(base.size());
  const bool burst = rng.uni() < 0.05;
  for (std::size_t i = 0; i < base.size(); ++i) {
    base[i] *= std::exp(0.01 * rng.gauss());
    double x = base[i] * std::exp(0.2 * rng.gauss());
    const double u = rng.uni();
    if ((burst && rng.uni() < 0.6) || u < 0.06) x *= 2.0 + 48.0 * rng.uni();
    else if (u < 0.09) x *= 0.05;
    else if (u < 0.095) x = 0.0;
    n[i] = static_cast<float>(x);
    const double v = rng.uni();
    if (v < 0.004) n[i] = kNaN;
    else if (v < 0.008) n[i] = kInf;
    else if (v < 0.01) n[i] = -kInf;
  }
  return n;
}

bool close(double got, double want, double mag) {
  return std::fabs(got - want) <= 1e-4 * mag + 1e-30;
}

template <class MeanPolicy>
void run_against_reference(const Cfg& cfg, MeanPolicy mean, std::uint64_t seed) {
  gnmr::ControllerOptions opt;
  opt.zero_is_sample = cfg.zero_is_sample;
  if (cfg.hold) {
    opt.systemic.action = gnmr::SystemicAction::kHold;
    opt.systemic.share = cfg.share;
    opt.systemic.min_count = cfg.min_count;
    opt.systemic.max_grants = cfg.max_grants;
  }
  opt.denied.action = static_cast<gnmr::DeniedAction>(cfg.deny);
  opt.denied.kappa = static_cast<float>(cfg.deny_kappa);
  gnmr::GnmrController<gnmr::L2Norm, MeanPolicy> c(
      cfg.units, {}, mean,
      trig(static_cast<float>(cfg.tau), static_cast<float>(cfg.delta), cfg.warmup, cfg.w),
      clip(static_cast<float>(cfg.kappa)), maxo(cfg.max_o, cfg.lock, cfg.cooldown), opt);
  Ref ref(cfg);
  Rng rng{seed};
  std::vector<double> base(cfg.units);
  for (double& b : base) b = std::pow(10.0, -2.0 + 4.0 * rng.uni());
  int redraws = 0;
  INFO(describe(cfg) << " seed=" << seed);
  for (int t = 1; t <= cfg.steps; ++t) {
    std::vector<float> norms = draw_step(rng, base);
    for (int tries = 0; ref.ambiguous(norms, t); ++tries) {
      REQUIRE(tries < 200);
      ++redraws;
      norms = draw_step(rng, base);
    }
    const RefSummary want = ref.step(norms);
    const gnmr::StepSummary got = c.step_norms(norms);
    INFO("t = " << t);
    REQUIRE(got.step == t);
    REQUIRE(got.triggered == want.triggered);
    REQUIRE(got.granted == want.granted);
    REQUIRE(got.in_recovery == want.in_recovery);
    REQUIRE(got.denied == want.denied);
    REQUIRE(got.nonfinite == want.nonfinite);
    REQUIRE(got.released == want.released);
    REQUIRE(got.max_ratio_unit == want.max_unit);
    REQUIRE(close(got.max_ratio, want.max_ratio, std::fabs(want.max_ratio)));
    REQUIRE(got.in_recovery <= static_cast<std::uint32_t>(cfg.max_o));
    REQUIRE(got.skip_step == 0u);
    REQUIRE(got.systemic == want.systemic);
    for (std::size_t i = 0; i < cfg.units; ++i) {
      const gnmr::UnitReport& r = c.reports()[i];
      const gnmr::UnitDecision& d = c.decisions()[i];
      const RefOut& o = ref.out()[i];
      INFO("unit " << i << " norm " << norms[i] << " ref: mean " << o.mean << " r " << o.ratio
                   << " d " << o.delta << " rho " << o.risk << " scale " << o.scale);
      REQUIRE(flag_names(r.flags) == flag_names(o.flags));
      REQUIRE(d.flags == r.flags);
      REQUIRE(d.scale == r.scale);
      REQUIRE(r.lock_left == o.lock_left);
      REQUIRE(close(r.mean, o.mean, std::fabs(o.mean)));
      if (!o.finite) {
        REQUIRE(r.risk == kInf);
        REQUIRE(r.scale == 0.0f);
        continue;
      }
      REQUIRE(close(r.ratio, o.ratio, std::fabs(o.ratio)));
      const double mag = std::fabs(o.ratio) + std::fabs(o.hist);
      REQUIRE(close(r.delta, o.delta, mag));
      REQUIRE(close(r.risk, o.risk,
                    std::fabs(o.risk) + mag / std::min(cfg.tau, cfg.delta)));
      REQUIRE(close(r.scale, o.scale, std::fabs(o.scale)));
    }
  }
  // The screen must not hollow the test out.
  CHECK(redraws < cfg.steps / 5 + 5);
}

Cfg random_cfg(Rng& r, MeanKind kind) {
  const double taus[] = {1.5, 2.0, 3.0, 4.0, std::numeric_limits<double>::infinity()};
  const double deltas[] = {0.5, 1.0, 1.5, 3.0, std::numeric_limits<double>::infinity()};
  const double betas[] = {0.5, 0.9, 0.99};
  const double kappas[] = {0.5, 1.0, 2.0};
  const std::size_t units[] = {1, 3, 7, 16};
  Cfg c;
  c.kind = kind;
  c.beta = static_cast<double>(static_cast<float>(betas[r.pick(0, 2)]));
  c.mean_window = r.pick(1, 16);
  c.tau = static_cast<double>(static_cast<float>(taus[r.pick(0, 4)]));
  do {
    c.delta = static_cast<double>(static_cast<float>(deltas[r.pick(0, 4)]));
  } while (std::isinf(c.tau) && std::isinf(c.delta));
  c.warmup = static_cast<std::uint32_t>(r.pick(0, 6));
  c.w = r.pick(1, 8);
  c.max_o = r.pick(1, 4);
  c.lock = r.pick(1, 5);
  c.cooldown = r.pick(0, 3);
  c.kappa = kappas[r.pick(0, 2)];
  c.eps = static_cast<double>(1e-12f);
  c.units = units[r.pick(0, 3)];
  c.steps = 400;
  c.zero_is_sample = r.pick(0, 1) == 1;
  return c;
}

// Hold, the per-step cap and the denied-unit rule, from a generator of
// their own (the configurations above keep their draws).
void draw_rules(Rng& r, Cfg& c) {
  const double shares[] = {0.1, 0.25, 0.5};
  const double kappas[] = {0.5, 1.0, 2.0};
  c.hold = r.pick(0, 1) == 1;
  c.share = shares[r.pick(0, 2)];
  c.min_count = static_cast<std::uint32_t>(r.pick(0, 2));
  c.max_grants = static_cast<std::uint32_t>(r.pick(0, 2));
  c.deny = r.pick(0, 2);
  c.deny_kappa = static_cast<double>(static_cast<float>(kappas[r.pick(0, 2)]));
}

}  // namespace

TEST_CASE("controller matches a double-precision reference model: EMA mean",
          "[semantics][reference]") {
  Rng r{0x5eed0001};
  for (int k = 0; k < 24; ++k) {
    const Cfg cfg = random_cfg(r, MeanKind::kEma);
    run_against_reference(cfg, ema(static_cast<float>(cfg.beta)), 1000 + k);
  }
}

TEST_CASE("controller matches a double-precision reference model: cumulative mean",
          "[semantics][reference]") {
  Rng r{0x5eed0002};
  for (int k = 0; k < 12; ++k)
    run_against_reference(random_cfg(r, MeanKind::kCumulative), gnmr::CumulativeMean{}, 2000 + k);
}

TEST_CASE("controller matches a double-precision reference model: window mean",
          "[semantics][reference]") {
  Rng r{0x5eed0003};
  for (int k = 0; k < 12; ++k) {
    const Cfg cfg = random_cfg(r, MeanKind::kWindow);
    gnmr::WindowMean<16> wm;
    wm.window = cfg.mean_window;
    run_against_reference(cfg, wm, 3000 + k);
  }
}

TEST_CASE("controller matches the model with hold, the per-step cap and the denied-unit rule",
          "[semantics][reference]") {
  // The EMA configurations of the first case, each with rules drawn on top
  // (hold at a share, min_count, max_grants, a denied clip to kappa * mu or
  // to the trigger's target), more units for contention.
  Rng r{0x5eed0001}, rules{0x5eed0005};
  std::size_t held = 0;
  for (int k = 0; k < 24; ++k) {
    Cfg cfg = random_cfg(r, MeanKind::kEma);
    draw_rules(rules, cfg);
    cfg.units = std::max<std::size_t>(cfg.units, 7);
    if (k % 3 == 0) cfg.hold = true;
    held += cfg.hold;
    run_against_reference(cfg, ema(static_cast<float>(cfg.beta)), 5000 + k);
  }
  CHECK(held >= 8);
}

TEST_CASE("controller matches the model on the default hyperparameters", "[semantics][reference]") {
  // docs/algorithm.md defaults: beta 0.99, tau 3, delta 1.5, warmup 10, w 4, maxO 4,
  // lock 8, cooldown 0, kappa 1; 32 units, contention from the bursts.
  Cfg cfg{MeanKind::kEma, static_cast<double>(0.99f), 16, 3.0, 1.5, 10, 4, 4, 8, 0, 1.0,
          static_cast<double>(1e-12f), 32, 1500};
  run_against_reference(cfg, gnmr::EmaMean{}, 4242);
}
