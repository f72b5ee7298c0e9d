// tests/unit/semantics_ref.hpp — the independent double-precision model of
// docs/algorithm.md that test_semantics_reference.cpp runs GnmrController
// against: a configuration (Cfg: mean tracker, thresholds, budget) and Ref,
// a plain re-reading of the algorithm written without looking at
// step/step.hpp (containers, doubles, a full sort for the slot selection).
#pragma once

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

namespace semtest {

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
  // The systemic action hold, the per-step cap and the denied-unit rule
  // (docs/algorithm.md, "Systemic steps" and "Denied units"): with hold on,
  // a step where more than C = clamp(floor(share N), min_count, N) units
  // trigger grants nothing (its unserved units are SYSTEMIC, not DENIED),
  // and any other step at most max_grants (0: no cap); deny: 0 none, 1 clip
  // to deny_kappa * mu, 2 clip to the trigger's target tau * mu, applied to
  // denied units and to a held step's unserved ones.
  bool hold = false;
  double share = 0.5;
  std::uint32_t min_count = 0;
  std::uint32_t max_grants = 0;
  int deny = 0;
  double deny_kappa = 1.0;
};

inline std::string describe(const Cfg& c) {
  std::ostringstream os;
  os << "mean=" << (c.kind == MeanKind::kEma ? "ema" : c.kind == MeanKind::kCumulative ? "cum" : "win")
     << " beta=" << c.beta << " W=" << c.mean_window << " tau=" << c.tau << " delta=" << c.delta
     << " warmup=" << c.warmup << " w=" << c.w << " maxO=" << c.max_o << " lock=" << c.lock
     << " cooldown=" << c.cooldown << " kappa=" << c.kappa << " N=" << c.units
     << " zero_is_sample=" << c.zero_is_sample << " hold=" << c.hold << " share=" << c.share
     << " min_count=" << c.min_count << " max_grants=" << c.max_grants << " deny=" << c.deny
     << " deny_kappa=" << c.deny_kappa;
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
                released = 0, systemic = 0;
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

  // C of the hold rule, from its definition (double, a decimal share meaning
  // what it says: within 1e-9 of an integer is that integer).
  std::size_t hold_threshold(std::size_t n) const {
    const double x = c_.share * static_cast<double>(n);
    const double r = std::round(x);
    double cc = std::fabs(x - r) <= 1e-9 * std::max(1.0, std::fabs(x)) ? r : std::floor(x);
    cc = std::max(cc, static_cast<double>(c_.min_count));
    return static_cast<std::size_t>(std::min(cc, static_cast<double>(n)));
  }

  RefSummary step(const std::vector<float>& norms) {
    const std::int64_t t = ++t_;
    const std::size_t n = norms.size();
    out_.assign(n, RefOut{});
    std::size_t held = 0, triggered = 0;
    std::vector<std::size_t> cand;
    for (std::size_t i = 0; i < n; ++i) {
      out_[i] = evaluate(i, norms[i], t);
      held += (out_[i].flags & gnmr::kInRecovery) ? 1 : 0;
      triggered += out_[i].triggered ? 1 : 0;
      if (candidate(out_[i])) cand.push_back(i);
    }
    const bool held_step = c_.hold && triggered > hold_threshold(n);
    // Free slots to the highest risk, ties to the lower index.
    std::sort(cand.begin(), cand.end(), [&](std::size_t a, std::size_t b) {
      if (out_[a].risk != out_[b].risk) return out_[a].risk > out_[b].risk;
      return a < b;
    });
    std::size_t free_slots = held >= static_cast<std::size_t>(c_.max_o) ? 0 : c_.max_o - held;
    if (held_step) free_slots = 0;
    if (c_.hold && c_.max_grants > 0) free_slots = std::min<std::size_t>(free_slots, c_.max_grants);
    for (std::size_t j = 0; j < cand.size() && j < free_slots; ++j) {
      out_[cand[j]].flags |= gnmr::kGranted | gnmr::kInRecovery;
      u_[cand[j]].granted_at = t;
    }
    RefSummary s;
    s.systemic = held_step ? 4u : 0u;
    for (std::size_t i = 0; i < n; ++i) {
      RefOut& o = out_[i];
      RefUnit& u = u_[i];
      const bool unserved = o.triggered && !(o.flags & gnmr::kInRecovery);
      if (unserved) o.flags |= held_step ? gnmr::kSystemic : gnmr::kDenied;
      const bool in_rec = (o.flags & gnmr::kInRecovery) != 0;
      o.lock_left = in_rec ? static_cast<int>(u.granted_at + c_.lock - t) : 0;
      if (o.finite) {
        const double x = norms[i];
        if (in_rec) o.scale = x > 0 ? std::min(1.0, c_.kappa * o.mean / x) : 1.0;
        if (unserved && c_.deny != 0 && x > 0) {
          const double level = c_.deny == 1 ? c_.deny_kappa * o.mean : c_.tau * o.mean;
          o.scale = std::min(o.scale, std::min(1.0, level / x));
        }
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

}  // namespace semtest
