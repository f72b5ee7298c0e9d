// GnmrController against an independent double-precision model of docs/algorithm.md
// on long random traces: per-unit noise, isolated spikes, bursts where
// many units spike at once (budget contention), dips, zeros and
// NaN/+Inf/-Inf norms, over randomly drawn hyperparameters (maxO, lock,
// cool-down, warm-up, w, tau, delta, beta, kappa) and three mean trackers
// (bias-corrected EMA, cumulative, window).
//
// The model is a plain re-reading of docs/algorithm.md written without looking at
// detail/step.hpp: containers, doubles, a full sort for the slot
// selection. Flags, lock counts, step numbers and the summary's counts and
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

#include "semantics_util.hpp"

namespace {

using namespace semtest;

enum class MeanKind { kEma, kCumulative, kWindow };

struct Cfg {
  MeanKind kind;
  double beta;      // EMA
  int mean_window;  // WindowMean
  double tau, delta;
  std::uint32_t warmup;
  int w;
  int max_o, lock, cooldown;
  double kappa;
  double eps;
  std::size_t units;
  int steps;
  bool zero_is_sample = false;  // ControllerOptions: is n = 0 a sample?
};

std::string describe(const Cfg& c) {
  std::ostringstream os;
  os << "mean=" << (c.kind == MeanKind::kEma ? "ema" : c.kind == MeanKind::kCumulative ? "cum" : "win")
     << " beta=" << c.beta << " W=" << c.mean_window << " tau=" << c.tau << " delta=" << c.delta
     << " warmup=" << c.warmup << " w=" << c.w << " maxO=" << c.max_o << " lock=" << c.lock
     << " cooldown=" << c.cooldown << " kappa=" << c.kappa << " N=" << c.units
     << " zero_is_sample=" << c.zero_is_sample;
  return os.str();
}

// ---- The reference model ---------------------------------------------------
struct RefUnit {
  double m = 0.0, sum = 0.0;
  std::uint64_t k = 0;
  std::deque<double> win;     // last W accepted samples (window mean)
  std::deque<double> ratios;  // last w defined ratios of finite steps
  std::int64_t granted_at = 0;
};

struct RefOut {
  std::uint32_t flags = 0;
  double mean = 0, ratio = 0, delta = 0, risk = 0, scale = 1, hist = 0;
  int lock_left = 0;
  bool finite = true, defined = false, triggered = false, zero = false;
};

struct RefSummary {
  std::uint32_t triggered = 0, granted = 0, in_recovery = 0, denied = 0, nonfinite = 0,
                released = 0;
  double max_ratio = 0;
  int max_unit = -1;
};

class Ref {
 public:
  Ref(const Cfg& c) : c_(c), u_(c.units) {}

  double mean(const RefUnit& u) const {
    if (u.k == 0) return 0.0;
    switch (c_.kind) {
      case MeanKind::kEma:
        return u.m / (1.0 - std::pow(c_.beta, static_cast<double>(u.k)));
      case MeanKind::kCumulative:
        return u.sum / static_cast<double>(u.k);
      default:
        return std::accumulate(u.win.begin(), u.win.end(), 0.0) / u.win.size();
    }
  }
  void push(RefUnit& u, double x) const {
    ++u.k;
    u.m = c_.beta * u.m + (1.0 - c_.beta) * x;
    u.sum += x;
    u.win.push_back(x);
    if (static_cast<int>(u.win.size()) > c_.mean_window) u.win.pop_front();
  }

  // Phase 1 of docs/algorithm.md for unit i at step t (pure).
  RefOut evaluate(std::size_t i, float norm, std::int64_t t) const {
    const RefUnit& u = u_[i];
    RefOut o;
    const std::int64_t g = u.granted_at;
    const bool in_rec = g > 0 && t < g + c_.lock;
    if (in_rec) o.flags |= gnmr::kInRecovery;
    else if (g > 0 && t < g + c_.lock + c_.cooldown) o.flags |= gnmr::kCooldown;
    if (g > 0 && t == g + c_.lock) o.flags |= gnmr::kReleased;
    o.mean = mean(u);
    if (!std::isfinite(norm)) {
      o.finite = false;
      o.flags |= gnmr::kNonFinite | gnmr::kSkip;
      o.risk = std::numeric_limits<double>::infinity();
      o.scale = 0.0;
      return o;
    }
    const double n = norm;
    if (n == 0.0 && !c_.zero_is_sample) {  // no gradient: not a sample at all
      o.zero = true;
      o.flags |= gnmr::kZeroNorm;
      return o;
    }
    if (u.k == 0) {
      o.flags |= gnmr::kWarmup;
      return o;
    }
    o.defined = true;
    o.ratio = n / std::max(o.mean, c_.eps);
    if (!u.ratios.empty()) {
      o.hist = std::accumulate(u.ratios.begin(), u.ratios.end(), 0.0) / u.ratios.size();
      o.delta = o.ratio - o.hist;
    }
    if (u.k < c_.warmup) {
      o.flags |= gnmr::kWarmup;
      return o;
    }
    o.risk = std::max({o.ratio / c_.tau, o.delta / c_.delta, 0.0});
    o.triggered = o.ratio > c_.tau || o.delta > c_.delta;
    if (o.triggered) o.flags |= gnmr::kTriggered;
    return o;
  }

  static bool candidate(const RefOut& o) {
    return o.triggered && !(o.flags & (gnmr::kInRecovery | gnmr::kCooldown));
  }

  // Would fp32 rounding be able to flip a decision of this step?
  bool ambiguous(const std::vector<float>& norms, std::int64_t t) const {
    const double tol = 1e-3;
    std::vector<double> risks, ratios;
    for (std::size_t i = 0; i < norms.size(); ++i) {
      const RefOut o = evaluate(i, norms[i], t);
      if (!o.finite || !o.defined) continue;
      ratios.push_back(o.ratio);
      if (o.flags & gnmr::kWarmup) continue;
      if (std::isfinite(c_.tau) && std::fabs(o.ratio - c_.tau) <= tol * c_.tau) return true;
      const double mag = std::fabs(o.ratio) + std::fabs(o.hist) + c_.delta;
      if (std::isfinite(c_.delta) && std::fabs(o.delta - c_.delta) <= tol * mag) return true;
      if (candidate(o)) risks.push_back(o.risk);
    }
    const auto close_pair = [&](std::vector<double>& v) {
      std::sort(v.begin(), v.end());
      for (std::size_t j = 1; j < v.size(); ++j)
        if (v[j] - v[j - 1] <= tol * std::fabs(v[j])) return true;
      return false;
    };
    if (close_pair(risks)) return true;
    if (ratios.size() >= 2) {
      std::sort(ratios.begin(), ratios.end());
      const double a = ratios[ratios.size() - 1], b = ratios[ratios.size() - 2];
      if (a - b <= tol * std::fabs(a)) return true;
    }
    return false;
  }

  RefSummary step(const std::vector<float>& norms) {
    const std::int64_t t = ++t_;
    const std::size_t n = norms.size();
    out_.assign(n, RefOut{});
    std::size_t held = 0;
    std::vector<std::size_t> cand;
    for (std::size_t i = 0; i < n; ++i) {
      out_[i] = evaluate(i, norms[i], t);
      held += (out_[i].flags & gnmr::kInRecovery) ? 1 : 0;
      if (candidate(out_[i])) cand.push_back(i);
    }
    // Free slots to the highest risk, ties to the lower index.
    std::sort(cand.begin(), cand.end(), [&](std::size_t a, std::size_t b) {
      if (out_[a].risk != out_[b].risk) return out_[a].risk > out_[b].risk;
      return a < b;
    });
    const std::size_t free_slots =
        held >= static_cast<std::size_t>(c_.max_o) ? 0 : c_.max_o - held;
    for (std::size_t j = 0; j < cand.size() && j < free_slots; ++j) {
      out_[cand[j]].flags |= gnmr::kGranted | gnmr::kInRecovery;
      u_[cand[j]].granted_at = t;
    }
    RefSummary s;
    for (std::size_t i = 0; i < n; ++i) {
      RefOut& o = out_[i];
      RefUnit& u = u_[i];
      if (o.triggered && !(o.flags & gnmr::kInRecovery)) o.flags |= gnmr::kDenied;
      const bool in_rec = (o.flags & gnmr::kInRecovery) != 0;
      o.lock_left = in_rec ? static_cast<int>(u.granted_at + c_.lock - t) : 0;
      if (o.finite) {
        const double x = norms[i];
        if (in_rec) o.scale = x > 0 ? std::min(1.0, c_.kappa * o.mean / x) : 1.0;
        if (o.defined) {
          u.ratios.push_back(o.ratio);
          if (static_cast<int>(u.ratios.size()) > c_.w) u.ratios.pop_front();
        }
        if (!o.zero) push(u, o.triggered ? std::min(x, c_.tau * o.mean) : x);
        if (o.defined && (s.max_unit < 0 || o.ratio > s.max_ratio)) {
          s.max_ratio = o.ratio;
          s.max_unit = static_cast<int>(i);
        }
      }
      s.triggered += o.triggered;
      s.granted += (o.flags & gnmr::kGranted) ? 1 : 0;
      s.in_recovery += in_rec;
      s.denied += (o.flags & gnmr::kDenied) ? 1 : 0;
      s.nonfinite += !o.finite;
      s.released += (o.flags & gnmr::kReleased) ? 1 : 0;
    }
    return s;
  }

  const std::vector<RefOut>& out() const { return out_; }

 private:
  Cfg c_;
  std::vector<RefUnit> u_;
  std::vector<RefOut> out_;
  std::int64_t t_ = 0;
};

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

TEST_CASE("controller matches the model on the default hyperparameters", "[semantics][reference]") {
  // docs/algorithm.md defaults: beta 0.99, tau 3, delta 1.5, warmup 10, w 4, maxO 4,
  // lock 8, cooldown 0, kappa 1; 32 units, contention from the bursts.
  Cfg cfg{MeanKind::kEma, static_cast<double>(0.99f), 16, 3.0, 1.5, 10, 4, 4, 8, 0, 1.0,
          static_cast<double>(1e-12f), 32, 1500};
  run_against_reference(cfg, gnmr::EmaMean{}, 4242);
}
