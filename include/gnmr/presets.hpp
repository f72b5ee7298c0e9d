// gnmr/presets.hpp — the peers' methods as presets of one controller.
//
// SPEC §2: global clipping (torch clip_grad_norm_), ZClip, AdaGC, SPAM,
// skip-step (OLMo-core) and GradientStabilizer (Stable-SPAM's AdaGN) are
// each a choice of the five policies, with the peer's published defaults
// (PEERS.md (b)); tests/unit/test_presets.cpp checks every one against an
// independent double-precision reimplementation of the peer's rule. What a
// preset deliberately does differently (the current sample is never in its
// own statistic, non-finite norms are skipped rather than propagated, ...)
// is in docs/presets.md.
//
// Two ways in: the typed aliases and factories below (zero overhead, what a
// CUDA kernel instantiates), or presets::make(name, units, options), which
// returns a DynController for code that picks a method at run time.
// Presets whose rule is global (clip, zclip, skip-step) are meant for ONE
// unit: sum the per-tensor L2 partials into unit 0 (is_global() tells).
#pragma once

#include <cfloat>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "gnmr/controller.hpp"
#include "gnmr/dyn.hpp"
#include "gnmr/policy/budget.hpp"
#include "gnmr/policy/ladder.hpp"
#include "gnmr/policy/mean.hpp"
#include "gnmr/policy/mean_var.hpp"
#include "gnmr/policy/norm.hpp"
#include "gnmr/policy/recovery.hpp"
#include "gnmr/policy/stabilizer.hpp"
#include "gnmr/policy/trigger.hpp"
#include "gnmr/policy/zscore.hpp"

namespace gnmr {
namespace presets {

// ---------------------------------------------------------------- types ----
// Never acts on a finite norm (a fixed threshold at the largest float), but
// a non-finite unit is still skipped: the safety action holds for every preset.
using PassThrough = GnmrController<L2Norm, NoMean, FixedThreshold, ClipToTarget, Unlimited>;
// torch.nn.utils.clip_grad_norm_: scale = min(1, max_norm / (n + 1e-6)).
using GlobalClip = GnmrController<L2Norm, NoMean, FixedThreshold, ClipToTarget, Unlimited>;
// ZClip (bluorion-com/ZClip zclip/zclip.py).
using ZClip = GnmrController<L2Norm, EmaMeanVar, ZScoreTrigger, ClipToTarget, Unlimited>;
// AdaGC, per-tensor mode (lishuai-97/AdaGC megatron-gpt2.patch, class AdaGC).
using AdaGC = GnmrController<L2Norm, MinSeededEma, GnmrTrigger, ClipToTarget, Unlimited>;
// SPAM's spike rule at unit granularity (TianjinYellow/SPAM-Optimizer SPAM.py).
using Spam =
    GnmrController<L2Norm, EmaSquareMean, GnmrTrigger, Compose<ClipToTarget, ResetMoments>, Unlimited>;
// OLMo-core SkipStepOptimizer (optim/skip_step_optimizer.py).
using SkipStep = GnmrController<L2Norm, WindowMean<128>, ZScoreTrigger, GlobalSkip, Unlimited>;
// Stable-SPAM's AdaGN ("GradientStabilizer", galore_torch/stablespam.py).
using Stabilizer = GnmrController<L2Norm, NoMean, AlwaysTrigger, NormReplace, Unlimited>;
// GNMR itself (SPEC §1 defaults) and with the escalation ladder.
using Gnmr = GnmrController<>;
using GnmrLadder = GnmrController<L2Norm, EmaMean, GnmrTrigger, Ladder, MaxO>;

// ------------------------------------------------ published parameters ----
// Field names follow the peer's own arguments so a user can copy a config.
struct TorchClipParams {
  float max_norm = 1.0f;
  float eps = 1e-6f;  // torch adds it to the norm: max_norm / (n + eps)
};
struct ZClipParams {
  float alpha = 0.97f;
  float z_thresh = 2.5f;
  std::uint32_t warmup_steps = 25;
  float max_grad_norm = 1.0f;  // +inf for ZClip's None
  float eps = 1e-6f;
  ZScoreTrigger::Clip clip_option = ZScoreTrigger::Clip::kAdaptive;
  float clip_factor = 1.0f;
};
struct AdaGCParams {
  float clip_ratio = 1.04f;
  float beta = 0.99f;
  float eps = 1e-6f;
  std::uint32_t start_clip_steps = 100;
};
struct SpamParams {
  float threshold = 5000.0f;  // theta: a spike is n^2 > theta * v
  float beta2 = 0.999f;
  // SPAM checks from its grad_accu_steps-th step on (current_step >= 20),
  // i.e. once grad_accu_steps - 1 samples are in v.
  std::uint32_t grad_accu_steps = 20;
};
struct SkipStepParams {
  int rolling_interval_length = 128;  // at most 128 (WindowMean<128>)
  float sigma_factor = 6.0f;
  // OLMo-core decides once max(20, len/2) values, the current one included,
  // are in its list: max(20, len/2) - 1 earlier samples. 0 = that rule.
  std::uint32_t warmup = 0;
  // Feed the z threshold on a skipped step (our rule); false = OLMo-core's
  // raw feed.
  bool clamp_feed = true;
};
struct StabilizerParams {
  float gamma1 = 0.7f;
  float gamma2 = 0.9f;
  float eps = 1e-8f;
};

// ----------------------------------------------------------- factories ----
inline PassThrough pass_through(std::size_t num_units) {
  return PassThrough(num_units, {}, {}, FixedThreshold{FLT_MAX, 0.0f}, ClipToTarget{0.0f},
                     Unlimited{1, 0});
}

inline GlobalClip global_clip(std::size_t num_units = 1, const TorchClipParams& p = {}) {
  return GlobalClip(num_units, {}, {}, FixedThreshold{p.max_norm, p.eps}, ClipToTarget{p.eps},
                    Unlimited{1, 0});
}

inline ZClip zclip(std::size_t num_units = 1, const ZClipParams& p = {}) {
  ZScoreTrigger t;
  t.z = p.z_thresh;
  t.warmup = p.warmup_steps;
  t.eps = p.eps;
  t.max_norm = p.max_grad_norm;
  t.clip = p.clip_option;
  t.clip_factor = p.clip_factor;
  t.clamp_feed = true;  // ZClip feeds its clip value to the EMA
  return ZClip(num_units, {}, EmaMeanVar{p.alpha, p.warmup_steps}, t,
               ClipToTarget{1e-6f},  // ZClip's apply_in_place_clipping adds 1e-6
               Unlimited{1, 0});
}

inline AdaGC adagc(std::size_t num_units, const AdaGCParams& p = {}) {
  GnmrTrigger t;
  t.tau = p.clip_ratio;
  t.delta = inf_f();
  t.warmup = p.start_clip_steps;
  t.clamp_feed = true;  // the EMA follows the clipped norm, clip_ratio * EMA
  return AdaGC(num_units, {}, MinSeededEma{p.beta, p.start_clip_steps}, t, ClipToTarget{p.eps},
               Unlimited{1, 0});
}

inline Spam spam(std::size_t num_units, const SpamParams& p = {}) {
  GnmrTrigger t;
  t.tau = fm::sqrt(p.threshold);  // n / sqrt(v) > sqrt(theta)  <=>  n^2 > theta v
  t.delta = inf_f();
  t.warmup = p.grad_accu_steps > 0 ? p.grad_accu_steps - 1 : 0;
  t.clamp_feed = true;  // v follows the clipped value sqrt(theta v)
  using R = Compose<ClipToTarget, ResetMoments>;
  return Spam(num_units, {}, EmaSquareMean{p.beta2}, t, R{ClipToTarget{0.0f}, {ResetMoments{}}},
              Unlimited{1, 0});
}

inline std::uint32_t skip_step_warmup(int rolling_interval_length) {
  const int gate = rolling_interval_length / 2 > 20 ? rolling_interval_length / 2 : 20;
  return static_cast<std::uint32_t>(gate - 1);
}

inline SkipStep skip_step(std::size_t num_units = 1, const SkipStepParams& p = {}) {
  ZScoreTrigger t;
  t.feed_rule = ZScoreTrigger::Feed::kThreshold;  // the step is skipped: no clip value
  t.z = p.sigma_factor;
  t.warmup = p.warmup != 0 ? p.warmup : skip_step_warmup(p.rolling_interval_length);
  t.eps = 0.0f;  // OLMo-core: (x - mean) <= sigma_factor * std
  t.max_norm = inf_f();
  t.clamp_feed = p.clamp_feed;
  WindowMean<128> w;
  w.window = p.rolling_interval_length;
  w.bessel = true;  // torch.std_mean is unbiased by default
  return SkipStep(num_units, {}, w, t, GlobalSkip{}, Unlimited{1, 0});
}

inline Stabilizer stabilizer(std::size_t num_units, const StabilizerParams& p = {}) {
  // AdaGN advances its statistics on every step, zero norms included.
  ControllerOptions opt;
  opt.zero_is_sample = true;
  return Stabilizer(num_units, {}, {}, AlwaysTrigger{}, NormReplace{p.gamma1, p.gamma2, p.eps},
                    Unlimited{1, 0}, opt);
}

// (Not called plain gnmr(): inside gnmr::presets that name would hide the namespace.)
inline Gnmr gnmr_default(std::size_t num_units) { return Gnmr(num_units); }

inline GnmrLadder gnmr_ladder(std::size_t num_units, const Ladder& ladder = {}) {
  return GnmrLadder(num_units, {}, {}, {}, ladder, {});
}

// -------------------------------------------------- run-time selection ----
// Overrides for make(). Each applies to the presets listed; giving one to a
// preset it does not apply to is an error (a silently ignored knob is worse).
struct Options {
  std::optional<float> tau;    // gnmr*, adagc (clip_ratio), spam (sqrt(theta))
  std::optional<float> delta;  // gnmr*
  std::optional<std::int64_t> warmup;  // samples in the statistic before a verdict:
                                       // gnmr*, zclip, adagc, spam, skip-step
  std::optional<std::int64_t> window;  // skip-step (<= 128); gnmr* with mean=window (<= 64)
  std::optional<std::int64_t> delta_window;  // gnmr*: the Delta-GNMR horizon w (<= 8)
  std::optional<float> beta;  // gnmr* with mean=ema; adagc (beta); spam (beta2); zclip (alpha)
  std::optional<std::int64_t> max_o;     // gnmr*
  std::optional<std::int64_t> lock;      // gnmr*
  std::optional<std::int64_t> cooldown;  // gnmr*
  std::optional<float> kappa;            // gnmr*
  std::optional<float> max_norm;     // clip; zclip (max_grad_norm, +inf = none)
  std::optional<float> z;            // zclip (z_thresh); skip-step (sigma_factor)
  std::optional<float> clip_factor;  // zclip
  std::optional<std::string> mean;   // gnmr*: "ema" (default) | "cumulative" | "window"
};

namespace detail {

struct PresetInfo {
  const char* name;
  bool global;
  std::vector<std::string> overrides;
};

inline const std::vector<PresetInfo>& preset_table() {
  static const std::vector<PresetInfo> t = {
      {"none", false, {}},
      {"clip", true, {"max_norm"}},
      {"zclip", true, {"z", "warmup", "beta", "max_norm", "clip_factor"}},
      {"adagc", false, {"tau", "beta", "warmup"}},
      {"spam", false, {"tau", "beta", "warmup"}},
      {"skip-step", true, {"z", "window", "warmup"}},
      {"stabilizer", false, {}},
      {"gnmr", false,
       {"tau", "delta", "warmup", "window", "delta_window", "beta", "max_o", "lock", "cooldown",
        "kappa", "mean"}},
      {"gnmr-ladder", false,
       {"tau", "delta", "warmup", "window", "delta_window", "beta", "max_o", "lock", "cooldown",
        "kappa", "mean"}},
  };
  return t;
}

inline std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "(none)" : s;
}

inline std::vector<std::string> options_given(const Options& o) {
  std::vector<std::string> g;
  if (o.tau) g.push_back("tau");
  if (o.delta) g.push_back("delta");
  if (o.warmup) g.push_back("warmup");
  if (o.window) g.push_back("window");
  if (o.delta_window) g.push_back("delta_window");
  if (o.beta) g.push_back("beta");
  if (o.max_o) g.push_back("max_o");
  if (o.lock) g.push_back("lock");
  if (o.cooldown) g.push_back("cooldown");
  if (o.kappa) g.push_back("kappa");
  if (o.max_norm) g.push_back("max_norm");
  if (o.z) g.push_back("z");
  if (o.clip_factor) g.push_back("clip_factor");
  if (o.mean) g.push_back("mean");
  return g;
}

inline const PresetInfo& find_preset(const std::string& name) {
  std::vector<std::string> all;
  for (const auto& p : preset_table()) {
    if (name == p.name) return p;
    all.push_back(p.name);
  }
  throw std::invalid_argument("gnmr: unknown preset '" + name + "'; valid presets: " + join(all));
}

inline void check_overrides(const PresetInfo& p, const Options& o) {
  for (const auto& g : options_given(o)) {
    bool ok = false;
    for (const auto& a : p.overrides) ok = ok || a == g;
    if (!ok)
      throw std::invalid_argument("gnmr: override '" + g + "' does not apply to preset '" +
                                  p.name + "'; its overrides: " + join(p.overrides));
  }
}

inline std::int64_t in_range(const char* what, std::int64_t v, std::int64_t lo, std::int64_t hi) {
  if (v < lo || v > hi)
    throw std::invalid_argument(std::string("gnmr: override '") + what + "' must be in [" +
                                std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                                std::to_string(v));
  return v;
}
inline std::uint32_t u32(const char* what, std::int64_t v) {
  return static_cast<std::uint32_t>(in_range(what, v, 0, 0xffffffffLL));
}
inline std::int32_t i32(const char* what, std::int64_t v) {
  return static_cast<std::int32_t>(in_range(what, v, -0x7fffffffLL - 1, 0x7fffffffLL));
}

template <class Mean, class Recovery>
std::unique_ptr<DynController> make_gnmr_with(const std::string& name, std::size_t n, Mean mean,
                                              Recovery rec, const Options& o) {
  GnmrTrigger t;
  if (o.tau) t.tau = *o.tau;
  if (o.delta) t.delta = *o.delta;
  if (o.warmup) t.warmup = u32("warmup", *o.warmup);
  if (o.delta_window) t.window = i32("delta_window", *o.delta_window);
  MaxO b;
  if (o.max_o) b.max_o = i32("max_o", *o.max_o);
  if (o.lock) b.lock = i32("lock", *o.lock);
  if (o.cooldown) b.cooldown = i32("cooldown", *o.cooldown);
  using C = GnmrController<L2Norm, Mean, GnmrTrigger, Recovery, MaxO>;
  return make_dyn(C(n, {}, mean, t, rec, b), name);
}

template <class Recovery>
std::unique_ptr<DynController> make_gnmr(const std::string& name, std::size_t n, Recovery rec,
                                         const Options& o) {
  const std::string kind = o.mean.value_or("ema");
  if (kind != "window" && o.window)
    throw std::invalid_argument("gnmr: override 'window' needs mean=window (got mean=" + kind + ")");
  if (kind != "ema" && o.beta)
    throw std::invalid_argument("gnmr: override 'beta' needs mean=ema (got mean=" + kind + ")");
  if (kind == "ema") {
    EmaMean m;
    if (o.beta) m.beta = *o.beta;
    return make_gnmr_with(name, n, m, rec, o);
  }
  if (kind == "cumulative") return make_gnmr_with(name, n, CumulativeMean{}, rec, o);
  if (kind == "window") {
    WindowMean<64> m;
    if (o.window) m.window = i32("window", *o.window);
    return make_gnmr_with(name, n, m, rec, o);
  }
  throw std::invalid_argument("gnmr: override 'mean' must be one of ema, cumulative, window; got '" +
                              kind + "'");
}

}  // namespace detail

// The preset names make() accepts, in a stable order.
inline std::vector<std::string> names() {
  std::vector<std::string> v;
  for (const auto& p : detail::preset_table()) v.push_back(p.name);
  return v;
}

// True for presets whose published rule is on the global norm (clip, zclip,
// skip-step): build them with one unit holding the sum of all L2 partials.
// Throws std::invalid_argument for an unknown name.
inline bool is_global(const std::string& name) { return detail::find_preset(name).global; }

// A controller for `name` with the peer's published defaults, changed by the
// overrides in `o`. Throws std::invalid_argument for an unknown name, an
// override the preset has no use for, or a value its policies reject.
inline std::unique_ptr<DynController> make(const std::string& name, std::size_t num_units,
                                           const Options& o = {}) {
  const detail::PresetInfo& info = detail::find_preset(name);
  detail::check_overrides(info, o);
  using detail::u32;
  if (name == "none") return make_dyn(pass_through(num_units), name);
  if (name == "clip") {
    TorchClipParams p;
    if (o.max_norm) p.max_norm = *o.max_norm;
    return make_dyn(global_clip(num_units, p), name);
  }
  if (name == "zclip") {
    ZClipParams p;
    if (o.z) p.z_thresh = *o.z;
    if (o.warmup) p.warmup_steps = u32("warmup", *o.warmup);
    if (o.beta) p.alpha = *o.beta;
    if (o.max_norm) p.max_grad_norm = *o.max_norm;
    if (o.clip_factor) p.clip_factor = *o.clip_factor;
    return make_dyn(zclip(num_units, p), name);
  }
  if (name == "adagc") {
    AdaGCParams p;
    if (o.tau) p.clip_ratio = *o.tau;
    if (o.beta) p.beta = *o.beta;
    if (o.warmup) p.start_clip_steps = u32("warmup", *o.warmup);
    return make_dyn(adagc(num_units, p), name);
  }
  if (name == "spam") {
    SpamParams p;
    if (o.beta) p.beta2 = *o.beta;
    auto c = spam(num_units, p);
    // tau and warmup are given in the controller's own terms (sqrt(theta),
    // samples before the first check), so they go to the trigger directly.
    if (o.tau || o.warmup) {
      auto ps = c.policies();
      if (o.tau) ps.trigger.tau = *o.tau;
      if (o.warmup) ps.trigger.warmup = u32("warmup", *o.warmup);
      c = Spam(num_units, ps.norm, ps.mean, ps.trigger, ps.recovery, ps.budget, ps.opt);
    }
    return make_dyn(std::move(c), name);
  }
  if (name == "skip-step") {
    SkipStepParams p;
    if (o.z) p.sigma_factor = *o.z;
    if (o.window)
      p.rolling_interval_length = static_cast<int>(detail::in_range("window", *o.window, 1, 128));
    if (o.warmup) {
      // 0 means "derive from the window" in SkipStepParams; an explicit 0 is honoured.
      auto c = skip_step(num_units, p);
      auto ps = c.policies();
      ps.trigger.warmup = u32("warmup", *o.warmup);
      return make_dyn(
          SkipStep(num_units, ps.norm, ps.mean, ps.trigger, ps.recovery, ps.budget, ps.opt), name);
    }
    return make_dyn(skip_step(num_units, p), name);
  }
  if (name == "stabilizer") return make_dyn(stabilizer(num_units), name);
  if (name == "gnmr") {
    ClipToMean r;
    if (o.kappa) r.kappa = *o.kappa;
    return detail::make_gnmr(name, num_units, r, o);
  }
  // gnmr-ladder
  Ladder r;
  if (o.kappa) r.kappa = *o.kappa;
  return detail::make_gnmr(name, num_units, r, o);
}

}  // namespace presets
}  // namespace gnmr
