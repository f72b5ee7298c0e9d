// gnmr/presets/options.hpp — the overrides a preset takes by name
// (presets::Options), the table of preset names and the overrides each
// accepts, and the range checks and GNMR option plumbing every preset
// factory shares. gnmr/presets/table.hpp builds on it (with_preset), and
// gnmr/presets/layered_names.hpp (the "outer+inner" names).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gnmr/presets/typed.hpp"

namespace gnmr {
namespace presets {


// -------------------------------------------------- run-time selection ----
// Overrides for with_preset() / make(). Each applies to the presets listed; giving one to a
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
  std::optional<float> max_norm;     // clip; zclip (max_grad_norm, +inf = none); adagc (clip_grad
                                     // of its warm-up global clip, +inf = none)
  std::optional<float> z;            // zclip (z_thresh); skip-step (sigma_factor)
  std::optional<float> clip_factor;  // zclip
  std::optional<std::string> mean;   // gnmr*: "ema" (default) | "cumulative" | "window"
  std::optional<std::int64_t> restart_every;  // stabilizer: Stable-SPAM's restart period (0 = off, the
                                              // default); spam: SPAM's DeltaT timer (500; 0 = off)
  // The systemic rule (gnmr/step/systemic.hpp), gnmr*: "off" | "clip-triggered" |
  // "global-clip" | "skip". gnmr and gnmr-ladder have it off, and take the
  // other systemic_* knobs only together with an action; gnmr-systemic has
  // it on (clip-triggered, share 0.5: provisional defaults).
  std::optional<std::string> systemic_action;
  std::optional<double> systemic_share;  // systemic when more than share * N units trigger
  std::optional<double> systemic_maxo;   // ... or more than systemic_maxo * maxO (0: off)
  std::optional<float> systemic_kappa;   // clip level of the systemic action
  std::optional<float> systemic_beta;    // EMA decay of the total norm's mean (global-clip)
  std::optional<std::int64_t> systemic_max_grants;  // at most this many grants a step (0: no cap)
  // The denied-unit rule, gnmr*: what a denied (or, under hold, held) unit
  // gets: "none" | "clip" (to deny_kappa * mu) | "clip-target" (to the
  // trigger's target). deny_kappa alone sets the clip level and the action
  // "clip". Off in gnmr-clip, -promote, -ladder, -systemic; "clip" in gnmr;
  // "clip-target" in gnmr-calibrated.
  std::optional<std::string> deny_action;
  std::optional<float> deny_kappa;
  // gnmr-calibrated (CalibratedTrigger): the target false-alarm rate per
  // unit-step, the smallest jump (a factor) that may fire, and the ratio
  // above which a unit fires always (the guard while it calibrates).
  std::optional<float> rate;
  std::optional<float> floor;
  std::optional<float> ceiling;
  // gnmr-noise-floor (NoiseFloorTrigger): a unit is a candidate while its
  // norm is below noise_c times its quantization noise's norm (sqrt(3)).
  std::optional<float> noise_c;
};

// The name a user gets without naming a preset (Python's Controller and
// optim.AdamW, the HF and Lightning callbacks, gnmr-replay), and what the
// name "default" stands for everywhere a name is taken: the stabilizer with
// the calibrated promotion inside it, the best measured configuration
// (docs/presets.md, "The default"; docs/record/stability-verdict.md). The C++
// GnmrController<> keeps GNMR's own rule as its template defaults.
inline constexpr const char* kDefaultPreset = "stabilizer+gnmr-calibrated";
// "default" -> kDefaultPreset; every other name unchanged.
inline std::string resolve(const std::string& name) { return name == "default" ? std::string(kDefaultPreset) : name; }

namespace detail {

struct PresetInfo {
  const char* name;
  bool global;
  std::vector<std::string> overrides;
};

inline const std::vector<PresetInfo>& preset_table() {
  static const std::vector<std::string> gnmr_knobs = {
      "tau",      "delta", "warmup",          "window",         "delta_window",   "beta",
      "max_o",    "lock",  "cooldown",        "kappa",          "mean",           "systemic_action",
      "systemic_share",    "systemic_maxo",   "systemic_kappa", "systemic_beta",  "systemic_max_grants",
      "deny_action",       "deny_kappa"};
  static const std::vector<std::string> calibrated_knobs = {
      "rate",           "floor",          "ceiling",        "warmup",         "delta_window",   "beta",
      "max_o",          "lock",           "cooldown",       "kappa",          "systemic_action",
      "systemic_share", "systemic_maxo",  "systemic_kappa", "systemic_beta",  "systemic_max_grants",
      "deny_action",    "deny_kappa"};
  static const std::vector<PresetInfo> t = {
      {"none", false, {}},
      {"clip", true, {"max_norm"}},
      {"zclip", true, {"z", "warmup", "beta", "max_norm", "clip_factor"}},
      {"adagc", false, {"tau", "beta", "warmup", "max_norm"}},
      {"spam", false, {"tau", "beta", "warmup", "restart_every"}},
      {"skip-step", true, {"z", "window", "warmup"}},
      {"stabilizer", false, {"restart_every"}},
      {"gnmr", false, gnmr_knobs},
      {"gnmr-ladder", false, gnmr_knobs},
      {"gnmr-promote", false, gnmr_knobs},
      {"gnmr-clip", false, gnmr_knobs},
      {"gnmr-systemic", false, gnmr_knobs},
      {"gnmr-calibrated", false, calibrated_knobs},
      {"gnmr-noise-floor", false, {"noise_c", "warmup", "beta", "max_o", "lock", "cooldown"}},
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
  if (o.restart_every) g.push_back("restart_every");
  if (o.systemic_action) g.push_back("systemic_action");
  if (o.systemic_share) g.push_back("systemic_share");
  if (o.systemic_maxo) g.push_back("systemic_maxo");
  if (o.systemic_kappa) g.push_back("systemic_kappa");
  if (o.systemic_beta) g.push_back("systemic_beta");
  if (o.systemic_max_grants) g.push_back("systemic_max_grants");
  if (o.deny_action) g.push_back("deny_action");
  if (o.deny_kappa) g.push_back("deny_kappa");
  if (o.rate) g.push_back("rate");
  if (o.floor) g.push_back("floor");
  if (o.ceiling) g.push_back("ceiling");
  if (o.noise_c) g.push_back("noise_c");
  return g;
}

inline const PresetInfo& find_preset(const std::string& name) {
  std::vector<std::string> all;
  for (const auto& p : preset_table()) {
    if (name == p.name) return p;
    all.push_back(p.name);
  }
  all.push_back("default");
  throw std::invalid_argument("gnmr: unknown preset '" + name + "'; valid presets: " + join(all) +
                              ", or '<outer>+<inner>' (a layered controller)");
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

// The systemic and denied rules of the gnmr presets from the overrides;
// `systemic` is the preset's own default action, `denied` its denied-unit
// rule (deny_kappa sets the clip level and turns the rule on).
inline ControllerOptions gnmr_options(const Options& o, SystemicRule systemic, DeniedRule denied = {}) {
  ControllerOptions c;
  c.systemic = systemic;
  c.denied = denied;
  if (o.systemic_action && !parse_systemic_action(*o.systemic_action, c.systemic.action))
    throw std::invalid_argument("gnmr: override 'systemic_action' must be one of off, clip-triggered, "
                                "global-clip, skip, hold; got '" + *o.systemic_action + "'");
  const bool knobs =
      o.systemic_share || o.systemic_maxo || o.systemic_kappa || o.systemic_beta || o.systemic_max_grants;
  if (knobs && c.systemic.action == SystemicAction::kOff)
    throw std::invalid_argument("gnmr: the systemic_* overrides need the systemic rule on: give "
                                "systemic_action (clip-triggered, global-clip, skip or hold) or use preset "
                                "gnmr-systemic");
  if (o.systemic_share) c.systemic.share = *o.systemic_share;
  if (o.systemic_maxo) c.systemic.maxo_multiple = *o.systemic_maxo;
  if (o.systemic_kappa) c.systemic.kappa = *o.systemic_kappa;
  if (o.systemic_beta) c.systemic.beta = *o.systemic_beta;
  if (o.systemic_max_grants) c.systemic.max_grants = u32("systemic_max_grants", *o.systemic_max_grants);
  if (o.deny_kappa) {
    c.denied.action = DeniedAction::kClip;
    c.denied.kappa = *o.deny_kappa;
  }
  if (o.deny_action && !parse_denied_action(*o.deny_action, c.denied.action))
    throw std::invalid_argument("gnmr: override 'deny_action' must be one of none, clip, clip-target; got '" +
                                *o.deny_action + "'");
  if (o.deny_kappa && c.denied.action != DeniedAction::kClip)
    throw std::invalid_argument("gnmr: override 'deny_kappa' is the level of deny_action=clip; got deny_action=" +
                                std::string(denied_action_name(c.denied.action)));
  return c;
}

inline ControllerOptions gnmr_options(const Options& o, SystemicAction systemic, DeniedRule denied = {}) {
  SystemicRule r;
  r.action = systemic;
  return gnmr_options(o, r, denied);
}

template <class Mean, class Recovery, class F>
auto gnmr_with(std::size_t n, Mean mean, Recovery rec, const Options& o, F&& f,
               SystemicAction systemic = SystemicAction::kOff, DeniedRule denied = {}) {
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
  return f(C(n, {}, mean, t, rec, b, gnmr_options(o, systemic, denied)));
}

template <class Recovery, class F>
auto gnmr_any_mean(std::size_t n, Recovery rec, const Options& o, F&& f,
                   SystemicAction systemic = SystemicAction::kOff, DeniedRule denied = {}) {
  const std::string kind = o.mean.value_or("ema");
  if (kind != "window" && o.window)
    throw std::invalid_argument("gnmr: override 'window' needs mean=window (got mean=" + kind + ")");
  if (kind != "ema" && o.beta)
    throw std::invalid_argument("gnmr: override 'beta' needs mean=ema (got mean=" + kind + ")");
  if (kind == "ema") {
    EmaMean m;
    if (o.beta) m.beta = *o.beta;
    return gnmr_with(n, m, rec, o, f, systemic, denied);
  }
  if (kind == "cumulative") return gnmr_with(n, CumulativeMean{}, rec, o, f, systemic, denied);
  if (kind == "window") {
    WindowMean<64> m;
    if (o.window) m.window = i32("window", *o.window);
    return gnmr_with(n, m, rec, o, f, systemic, denied);
  }
  throw std::invalid_argument("gnmr: override 'mean' must be one of ema, cumulative, window; got '" +
                              kind + "'");
}

}  // namespace detail

// The preset names make() accepts, in a stable order.
inline std::vector<std::string> names() {
  std::vector<std::string> v;
  for (const auto& p : detail::preset_table()) v.push_back(p.name);
  v.push_back("default");
  return v;
}

}  // namespace presets
}  // namespace gnmr
