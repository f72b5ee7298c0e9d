// tests/unit/presets_ref.hpp — the peers' published rules, reimplemented in
// double precision from the peers' own code (docs/presets.md, Peers: snapshots named in
// docs/presets.md), plus the trace generator and the comparator the preset
// tests share (test_presets.cpp, test_presets_more.cpp).
//
// Each reference is written line for line where it matters (what is in the
// statistic when, what the clip coefficient's denominator is) and never
// calls gnmr. Verdicts must agree exactly except on ties — steps where the
// reference's own decision margin is below 1e-5 relative, where fp32 and
// double may legitimately round to different sides (at such a step both
// scales are within 1e-5 of 1, so the scale check still holds). The number
// of ties is checked to stay tiny, so a comparison cannot pass vacuously.
// Scales agree within 1e-5 relative.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <random>
#include <vector>

#include "gnmr/presets/make.hpp"

namespace presets_ref {

using gnmr::kNonFinite;
using gnmr::kResetMoments;
using gnmr::kSkip;
using gnmr::kTriggered;
namespace presets = gnmr::presets;

constexpr double kTieRel = 1e-5;    // a margin below this is a tie
constexpr double kScaleRel = 1e-5;  // scale tolerance, relative
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

// A gradient-norm trace: slowly decaying level, multiplicative noise,
// rare spikes of 2x..40x and rare dips. Values are fp32, as a norm kernel
// would produce them; the references read the same floats.
inline std::vector<float> trace(std::uint64_t seed, int steps, double level, double noise = 0.15,
                         double spike_p = 0.02) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  std::vector<float> out;
  for (int t = 0; t < steps; ++t) {
    double x = level * (0.4 + 0.6 * std::exp(-t / 800.0)) * std::exp(noise * nd(rng));
    const double u = ud(rng);
    if (u < spike_p) x *= 2.0 + 38.0 * ud(rng);
    else if (u < spike_p * 1.5) x *= 0.3;
    out.push_back(static_cast<float>(x));
  }
  return out;
}

struct RefVerdict {
  bool acted;     // the peer changed the gradient (clip coefficient < 1, skip)
  double scale;   // what the peer multiplies the gradient by (0 for a skip)
  double margin;  // relative distance of the decision from its threshold
};

// Compares one step of one unit; counts ties instead of failing on them.
struct Comparator {
  int steps = 0, ties = 0, acted = 0;
  void operator()(const RefVerdict& ref, const gnmr::UnitDecision& d, bool triggered, int t,
                  int unit) {
    ++steps;
    acted += ref.acted ? 1 : 0;
    INFO("step " << t << " unit " << unit << " ref.scale " << ref.scale << " ours " << d.scale
                 << " margin " << ref.margin);
    if (ref.margin < kTieRel) {
      ++ties;
    } else {
      REQUIRE(triggered == ref.acted);
    }
    REQUIRE(std::fabs(static_cast<double>(d.scale) - ref.scale) <=
            kScaleRel * std::fabs(ref.scale) + 1e-12);
  }
  void finish(int min_acted = -1) const {
    INFO("steps " << steps << " acted " << acted << " ties " << ties);
    CHECK(acted > (min_acted < 0 ? steps / 200 : min_acted));  // the trace exercised the rule
    CHECK(acted < steps);            // ... and not on every step
    CHECK(ties <= steps / 500 + 1);  // ties are rare: the check is not vacuous
  }
};

inline double rel_margin(double a, double b) {
  const double inf = std::numeric_limits<double>::infinity();
  if (std::isinf(a) || std::isinf(b)) return inf;  // e.g. max_grad_norm = None
  const double den = std::max(std::fabs(a), std::fabs(b));
  return den > 0 ? std::fabs(a - b) / den : inf;
}

inline bool is_triggered(const gnmr::UnitDecision& d) { return (d.flags & kTriggered) != 0u; }

// ------------------------------------------------------------ torch -------
// torch/nn/utils/clip_grad.py: clip_coef = max_norm / (total_norm + 1e-6);
// clip_coef_clamped = clamp(clip_coef, max=1.0); grads *= clip_coef_clamped.
inline RefVerdict torch_clip(double n, double max_norm) {
  const double coef = max_norm / (n + 1e-6);
  return {coef < 1.0, std::min(coef, 1.0), rel_margin(coef, 1.0)};
}

// ------------------------------------------------------------ ZClip -------
// bluorion-com/ZClip zclip/zclip.py, mode="zscore", clip_option="adaptive_scaling".
struct ZClipRef {
  double alpha = 0.97, z_thresh = 2.5, max_grad_norm = 1.0, eps = 1e-6, clip_factor = 1.0;
  std::size_t warmup_steps = 25;
  std::vector<double> buffer;
  bool initialized = false;
  double mean = 0, var = 0;

  RefVerdict step(double g) {
    if (!initialized) {
      buffer.push_back(g);
      if (buffer.size() >= warmup_steps) {  // _initialize_ema
        double s = 0;
        for (double x : buffer) s += x;
        mean = s / buffer.size();
        double v = 0;
        for (double x : buffer) v += (x - mean) * (x - mean);
        var = v / buffer.size();
        initialized = true;
        buffer.clear();
      }
      // torch.nn.utils.clip_grad_norm_(params, max_grad_norm) during warm-up
      return torch_clip(g, max_grad_norm);
    }
    // _compute_clip_val
    const double std_ = std::sqrt(var);
    const double z = (g - mean) / (std_ + eps);
    bool have_clip = false;
    double clip_val = 0;
    if (z > z_thresh) {
      const double eta = z / z_thresh;
      clip_val = (mean + (z_thresh * std_) / eta) * clip_factor;
      have_clip = true;
    }
    // _apply_clipping / apply_in_place_clipping
    const double adaptive = have_clip ? clip_val : g;
    const double effective = std::min(adaptive, max_grad_norm);
    const double coef = g > effective ? effective / (g + 1e-6) : 1.0;
    // _update_ema (skip_update_on_spike = False)
    const double x = have_clip ? clip_val : g;
    mean = alpha * mean + (1 - alpha) * x;
    var = alpha * var + (1 - alpha) * (x - mean) * (x - mean);
    return {coef < 1.0, coef,
            std::min(rel_margin(z, z_thresh), rel_margin(g, max_grad_norm))};
  }
};

// ------------------------------------------------------------ AdaGC -------
// lishuai-97/AdaGC megatron-gpt2.patch, class AdaGC (per tensor). Steps
// 1..start_clip_steps: global clip at max_norm, and each tensor's statistic
// is the minimum of its (globally clipped) norm. Later: clip tensor i when
// n_i > clip_ratio * avg_i, to clip_ratio * avg_i / (n_i + eps); avg_i
// follows an EMA of the clipped norm.
struct AdaGCRef {
  double clip_ratio = 1.04, beta = 0.99, eps = 1e-6, max_norm = 1.0;
  int start_clip_steps = 100, steps = 0;
  std::vector<double> state;
  std::vector<bool> have;

  std::vector<RefVerdict> step(const std::vector<float>& norms) {
    ++steps;
    const std::size_t n = norms.size();
    state.resize(n), have.resize(n);
    std::vector<RefVerdict> out(n);
    if (steps <= start_clip_steps) {
      double sq = 0;
      for (float x : norms) sq += double(x) * x;
      const double total = std::sqrt(sq);
      const double coeff = max_norm / (total + eps);
      const double s = coeff < 1.0 ? coeff : 1.0;
      for (std::size_t i = 0; i < n; ++i) {
        const double nv = norms[i] * s;
        if (!have[i] || nv < state[i]) state[i] = nv;
        have[i] = true;
        out[i] = {coeff < 1.0, s, rel_margin(coeff, 1.0)};
      }
      return out;
    }
    for (std::size_t i = 0; i < n; ++i) {
      double nv = norms[i];
      const double avg = state[i];
      RefVerdict v{false, 1.0, rel_margin(nv, clip_ratio * avg)};
      if (nv > clip_ratio * avg) {
        v.acted = true;
        v.scale = (clip_ratio * avg) / (nv + eps);
        nv = clip_ratio * avg;
      }
      state[i] = avg * beta + nv * (1.0 - beta);
      out[i] = v;
    }
    return out;
  }
};

inline std::vector<std::vector<float>> unit_traces(std::uint64_t seed, int units, int steps,
                                            double noise = 0.15) {
  std::vector<std::vector<float>> tr;
  for (int u = 0; u < units; ++u)
    tr.push_back(trace(seed * 100 + u, steps, std::pow(10.0, -3.0 + u % 5), noise));
  return tr;
}

// ------------------------------------------------------------- SPAM -------
// TianjinYellow/SPAM-Optimizer galore_torch/SPAM.py @e8185fb (class AdamW)
// at unit granularity (the norm in place of one element). current_step is
// total_step + 1 (1-based). The timer, on by default (DeltaT = 500): on a
// step with current_step % DeltaT == 0, exp_avg and exp_avg_sq of every
// parameter are zeroed before the update (the bias-correction count is not
// reset). The spike check runs when current_step >= grad_accu_steps and
// current_step % DeltaT >= grad_accu_steps (20 quiet steps after each
// reset): g^2 > theta * v, replaced by sqrt(theta * v) (with g's sign);
// then v <- b2 v + (1 - b2) g_clipped^2, no bias correction. delta_t = 0
// here means "never" (the peer divides by DeltaT, so it has no off value:
// a DeltaT longer than the run, as the initial commit's 1e9). The cosine
// LR re-warm after a reset scales the update, not the gradient: not here.
// beta2 is the fp32 value the preset holds (0.999f = 0.99900001287): its
// 1 - beta2 differs from 0.001 by 1.3e-5 relative, and v carries that
// factor directly (no bias correction), so the exact decimal would eat the
// whole tolerance without saying anything about the rule.
struct SpamRef {
  double theta = 5000, beta2 = static_cast<double>(0.999f), v = 0;
  int grad_accu_steps = 20, step = 0, delta_t = 500;
  bool reset = false;  // this step zeroed the moments (the timer)
  RefVerdict operator()(double g) {
    ++step;
    reset = delta_t != 0 && step % delta_t == 0;
    if (reset) v = 0;
    RefVerdict r{false, 1.0, std::numeric_limits<double>::infinity()};
    if (step >= grad_accu_steps && (delta_t == 0 || step % delta_t >= grad_accu_steps)) {
      r.margin = rel_margin(g * g, theta * v);
      if (g * g > theta * v) {
        const double gc = std::sqrt(theta * v);
        r = {true, gc / g, r.margin};
        g = gc;
      }
    }
    v = beta2 * v + (1 - beta2) * g * g;
    return r;
  }
};

// -------------------------------------------------------- skip-step -------
// allenai/OLMo-core optim/skip_step_optimizer.py: the list keeps the last
// rolling_interval_length + 1 values *including* the current one; no
// decision while len < max(2, len/2) (@fa6c501; max(20, ...) before
// OLMo-core #139); then std_mean (unbiased) of all but
// the current value, and the step proceeds iff (x - mean) <= sigma * std.
struct OlmoRef {
  std::size_t len = 128;
  double sigma = 6;
  std::deque<double> xs;
  RefVerdict operator()(double x) {
    xs.push_back(x);
    while (xs.size() > len + 1) xs.pop_front();
    if (xs.size() < std::max<std::size_t>(2, len / 2))
      return {false, 1.0, std::numeric_limits<double>::infinity()};
    const std::size_t m = xs.size() - 1;
    double s = 0;
    for (std::size_t i = 0; i < m; ++i) s += xs[i];
    const double mean = s / m;
    double ss = 0;
    for (std::size_t i = 0; i < m; ++i) ss += (xs[i] - mean) * (xs[i] - mean);
    const double sd = std::sqrt(ss / (m - 1));
    const bool proceed = (x - mean) <= sigma * sd;
    return {!proceed, proceed ? 1.0 : 0.0, rel_margin(x - mean, sigma * sd)};
  }
};

// ------------------------------------------------------- stabilizer -------
// TianjinYellow/StableSPAM galore_torch/stablespam.py, AdaGN (total_T None,
// so scale = 1): m = g1 m + (1-g1) n; v = g2 v + (1-g2) n^2 (the current
// norm included); m_hat = m / (1 - g1^k); v_hat = v / (1 - g2^k);
// grad *= (m_hat / (sqrt(v_hat) + eps)) / n when n > 0.
// The restart (update_proj_gap, 1000 in the peer's constructor; 0 here
// unless set): after the norm scaling of a step whose total_steps (1-based)
// is a multiple of it, state['step'] = 1 (m and v kept; the next step uses
// k = 2) and Adam's exp_avg, exp_avg_sq are zeroed (restarted() says so).
struct AdaGNRef {
  double g1 = 0.7, g2 = 0.9, eps = 1e-8, m = 0, v = 0;
  int k = 0, restart_every = 0;
  long total_steps = 0;
  bool restarted = false;
  double operator()(double n) {
    ++k;
    ++total_steps;
    m = g1 * m + (1 - g1) * n;
    v = g2 * v + (1 - g2) * n * n;
    const double mh = m / (1 - std::pow(g1, k)), vh = v / (1 - std::pow(g2, k));
    const double c = mh / (std::sqrt(vh) + eps);
    restarted = restart_every != 0 && total_steps % restart_every == 0;
    if (restarted) k = 1;
    return n > 0 ? c / n : 1.0;
  }
};

}  // namespace presets_ref
