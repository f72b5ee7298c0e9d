// gnmr/presets/table.hpp — presets chosen by name at run time.
//
// A CLI, a replay tool or a framework binding picks a method by its name
// ("gnmr", "zclip", ...) and a few overrides; with_preset() turns that into
// the typed controller of gnmr/presets/typed.hpp and hands it to the caller's
// function, so the host facade (presets::make, gnmr/presets/make.hpp) and the
// CUDA one (gnmr::cuda::make_device, gnmr/cuda/presets.cuh) share a single
// table of names, overrides and range checks.
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
  // The denied-unit rule, gnmr*: a denied unit is clipped to deny_kappa * mu
  // without a slot (off when not given).
  std::optional<float> deny_kappa;
  // gnmr-calibrated (CalibratedTrigger): the target false-alarm rate per
  // unit-step, and the smallest jump (a factor) that may fire.
  std::optional<float> rate;
  std::optional<float> floor;
};

// The name a user gets without naming a preset (Python's Controller and
// optim.AdamW, the HF and Lightning callbacks, gnmr-replay), and what the
// name "default" stands for everywhere a name is taken: the stabilizer with
// the calibrated promotion inside it, the best measured configuration
// (docs/presets.md, "The default"; docs/stability-verdict.md). The C++
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
      "systemic_share",    "systemic_maxo",   "systemic_kappa", "systemic_beta",  "deny_kappa"};
  static const std::vector<std::string> calibrated_knobs = {
      "rate",           "floor",          "warmup",         "delta_window",   "beta",
      "max_o",          "lock",           "cooldown",       "kappa",          "systemic_action",
      "systemic_share", "systemic_maxo",  "systemic_kappa", "systemic_beta",  "deny_kappa"};
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
  if (o.deny_kappa) g.push_back("deny_kappa");
  if (o.rate) g.push_back("rate");
  if (o.floor) g.push_back("floor");
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
inline ControllerOptions gnmr_options(const Options& o, SystemicAction systemic, DeniedRule denied = {}) {
  ControllerOptions c;
  c.systemic.action = systemic;
  c.denied = denied;
  if (o.systemic_action && !parse_systemic_action(*o.systemic_action, c.systemic.action))
    throw std::invalid_argument("gnmr: override 'systemic_action' must be one of off, clip-triggered, "
                                "global-clip, skip; got '" + *o.systemic_action + "'");
  const bool knobs = o.systemic_share || o.systemic_maxo || o.systemic_kappa || o.systemic_beta;
  if (knobs && c.systemic.action == SystemicAction::kOff)
    throw std::invalid_argument("gnmr: the systemic_* overrides need the systemic rule on: give "
                                "systemic_action (clip-triggered, global-clip or skip) or use preset "
                                "gnmr-systemic");
  if (o.systemic_share) c.systemic.share = *o.systemic_share;
  if (o.systemic_maxo) c.systemic.maxo_multiple = *o.systemic_maxo;
  if (o.systemic_kappa) c.systemic.kappa = *o.systemic_kappa;
  if (o.systemic_beta) c.systemic.beta = *o.systemic_beta;
  if (o.deny_kappa) {
    c.denied.action = DeniedAction::kClip;
    c.denied.kappa = *o.deny_kappa;
  }
  return c;
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

// ---- Layered names: "outer+inner" (gnmr/step/layered.hpp) ---------------
// An outer rule (a peer's preset, global or per unit) and a GNMR preset
// inside it, stepped together by presets::make / cuda::make_device as a
// LayeredController. The overrides go to the inner (GNMR) when it accepts
// them, else to the outer; a key neither accepts is an error.
struct LayeredName {
  std::string outer, inner;
};
inline bool is_layered(const std::string& name) { return resolve(name).find('+') != std::string::npos; }

// Splits and checks "outer+inner": both known presets, the outer not
// "none" and not a GNMR preset, the inner a GNMR preset (gnmr*). Throws
// std::invalid_argument otherwise.
inline LayeredName split_layered(const std::string& given) {
  const std::string name = resolve(given);
  const auto plus = name.find('+');
  if (plus == std::string::npos || name.find('+', plus + 1) != std::string::npos)
    throw std::invalid_argument("gnmr: a layered preset is '<outer>+<inner>' with one '+', got '" + name + "'");
  LayeredName l{name.substr(0, plus), name.substr(plus + 1)};
  detail::find_preset(l.outer);
  detail::find_preset(l.inner);
  const auto is_gnmr = [](const std::string& p) { return p.compare(0, 4, "gnmr") == 0; };
  if (l.outer == "none" || is_gnmr(l.outer))
    throw std::invalid_argument("gnmr: the outer rule of '" + name +
                                "' must be a peer's preset (clip, zclip, adagc, spam, skip-step, stabilizer)");
  if (!is_gnmr(l.inner))
    throw std::invalid_argument("gnmr: the inner rule of '" + name + "' must be a GNMR preset (gnmr, gnmr-promote, "
                                "gnmr-clip, gnmr-systemic, gnmr-ladder, gnmr-calibrated)");
  return l;
}

namespace detail {
inline void clear_option(Options& o, const std::string& k) {
  if (k == "tau") o.tau.reset();
  if (k == "delta") o.delta.reset();
  if (k == "warmup") o.warmup.reset();
  if (k == "window") o.window.reset();
  if (k == "delta_window") o.delta_window.reset();
  if (k == "beta") o.beta.reset();
  if (k == "max_o") o.max_o.reset();
  if (k == "lock") o.lock.reset();
  if (k == "cooldown") o.cooldown.reset();
  if (k == "kappa") o.kappa.reset();
  if (k == "max_norm") o.max_norm.reset();
  if (k == "z") o.z.reset();
  if (k == "clip_factor") o.clip_factor.reset();
  if (k == "mean") o.mean.reset();
  if (k == "restart_every") o.restart_every.reset();
  if (k == "systemic_action") o.systemic_action.reset();
  if (k == "systemic_share") o.systemic_share.reset();
  if (k == "systemic_maxo") o.systemic_maxo.reset();
  if (k == "systemic_kappa") o.systemic_kappa.reset();
  if (k == "systemic_beta") o.systemic_beta.reset();
  if (k == "deny_kappa") o.deny_kappa.reset();
  if (k == "rate") o.rate.reset();
  if (k == "floor") o.floor.reset();
}
inline bool accepts(const PresetInfo& p, const std::string& k) {
  for (const auto& a : p.overrides)
    if (a == k) return true;
  return false;
}
}  // namespace detail

// The overrides of a layered name, split: .first for the outer, .second for
// the inner. Throws std::invalid_argument for a key neither accepts.
inline std::pair<Options, Options> layered_options(const LayeredName& l, const Options& o) {
  const detail::PresetInfo& out = detail::find_preset(l.outer);
  const detail::PresetInfo& in = detail::find_preset(l.inner);
  std::pair<Options, Options> r{o, o};
  for (const auto& k : detail::options_given(o)) {
    if (detail::accepts(in, k)) {
      detail::clear_option(r.first, k);
    } else if (detail::accepts(out, k)) {
      detail::clear_option(r.second, k);
    } else {
      throw std::invalid_argument("gnmr: override '" + k + "' applies to neither '" + l.outer + "' nor '" +
                                  l.inner + "'; their overrides: " + detail::join(in.overrides) + "; " +
                                  detail::join(out.overrides));
    }
  }
  return r;
}

// What make() and cuda::make_device() build for a layered name: the two
// preset names, the outer's unit count (1 for a global rule) and each
// one's overrides. Throws what split_layered / layered_options throw.
struct LayeredPlan {
  LayeredName names;
  std::size_t outer_units;
  Options outer, inner;
};
inline LayeredPlan plan_layered(const std::string& name, std::size_t num_units, const Options& o);

// True for presets whose published rule is on the global norm (clip, zclip,
// skip-step): build them with one unit holding the sum of all L2 partials.
// A layered name is never global: it takes one partial per unit (its outer
// rule, if global, sums them itself). Throws std::invalid_argument for an
// unknown name.
inline bool is_global(const std::string& name) {
  if (is_layered(name)) {
    split_layered(name);
    return false;
  }
  return detail::find_preset(name).global;
}

inline LayeredPlan plan_layered(const std::string& name, std::size_t num_units, const Options& o) {
  LayeredPlan p;
  p.names = split_layered(name);
  auto split = layered_options(p.names, o);
  p.outer = std::move(split.first);
  p.inner = std::move(split.second);
  p.outer_units = is_global(p.names.outer) ? 1 : num_units;
  return p;
}

// The overrides (Options fields, by name) that preset `name` accepts; any
// other given override makes with_preset()/make() throw. A tool that applies
// one set of options to several presets uses it to drop what does not apply.
// For a layered name, the inner's then the outer's others. Throws
// std::invalid_argument for an unknown name.
inline std::vector<std::string> overrides_of(const std::string& name) {
  if (!is_layered(name)) return detail::find_preset(name).overrides;  // "default" is layered
  const LayeredName l = split_layered(name);
  std::vector<std::string> v = detail::find_preset(l.inner).overrides;
  for (const auto& k : detail::find_preset(l.outer).overrides)
    if (!detail::accepts(detail::find_preset(l.inner), k)) v.push_back(k);
  return v;
}

// Builds the typed controller for `name` — the peer's published defaults,
// changed by the overrides in `o` — and returns f(std::move(controller)).
// f is called once, with one of the preset types (presets/typed.hpp), and
// must return the same type for all of them. One table of rules for every
// backend: presets::make wraps the result in a DynController, and
// gnmr::cuda::make_device (gnmr/cuda/presets.cuh) moves its policies to a
// DeviceController. Throws std::invalid_argument for an unknown name, an
// override the preset has no use for, or a value its policies reject.
template <class F>
auto with_preset(const std::string& name, std::size_t num_units, const Options& o, F&& f)
    -> decltype(f(pass_through(1))) {
  if (is_layered(name))  // "default" included: two controllers, not one typed one
    throw std::invalid_argument("gnmr: '" + name + "' is a layered preset (" + resolve(name) +
                                "): build it with presets::make or cuda::make_device");
  const detail::PresetInfo& info = detail::find_preset(name);
  detail::check_overrides(info, o);
  using detail::u32;
  if (name == "none") return f(pass_through(num_units));
  if (name == "clip") {
    TorchClipParams p;
    if (o.max_norm) p.max_norm = *o.max_norm;
    return f(global_clip(num_units, p));
  }
  if (name == "zclip") {
    ZClipParams p;
    if (o.z) p.z_thresh = *o.z;
    if (o.warmup) p.warmup_steps = u32("warmup", *o.warmup);
    if (o.beta) p.alpha = *o.beta;
    if (o.max_norm) p.max_grad_norm = *o.max_norm;
    if (o.clip_factor) p.clip_factor = *o.clip_factor;
    return f(zclip(num_units, p));
  }
  if (name == "adagc") {
    AdaGCParams p;
    if (o.tau) p.clip_ratio = *o.tau;
    if (o.beta) p.beta = *o.beta;
    if (o.warmup) p.start_clip_steps = u32("warmup", *o.warmup);
    if (o.max_norm) p.clip_grad = *o.max_norm;
    return f(adagc(num_units, p));
  }
  if (name == "spam") {
    SpamParams p;
    if (o.beta) p.beta2 = *o.beta;
    if (o.restart_every) p.delta_t = u32("restart_every", *o.restart_every);
    // warmup is given in the controller's own terms (samples before the
    // first check), i.e. grad_accu_steps - 1; the timer's quiet window
    // follows it.
    if (o.warmup) p.grad_accu_steps = u32("warmup", *o.warmup) + 1u;
    auto c = spam(num_units, p);
    // tau is sqrt(theta): it goes to the trigger directly.
    if (o.tau) {
      auto ps = c.policies();
      ps.trigger.tau = *o.tau;
      c = Spam(num_units, ps);
    }
    return f(std::move(c));
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
      return f(SkipStep(num_units, ps));
    }
    return f(skip_step(num_units, p));
  }
  if (name == "stabilizer") {
    StabilizerParams p;
    if (o.restart_every) p.restart_every = u32("restart_every", *o.restart_every);
    return f(stabilizer(num_units, p));
  }
  // gnmr-clip: GNMR's clip alone, under a name that will not change;
  // gnmr-systemic: the same with the systemic rule on; gnmr: clip + promotion
  // with the systemic rule and the denied-unit clip on (docs/stability.md
  // chose it; docs/presets.md).
  if (name == "gnmr-clip" || name == "gnmr-systemic") {
    ClipToMean r;
    if (o.kappa) r.kappa = *o.kappa;
    return detail::gnmr_any_mean(num_units, r, o, f,
                                 name == "gnmr-systemic" ? gnmr_systemic_rule().action : SystemicAction::kOff);
  }
  if (name == "gnmr-calibrated") {
    CalibratedTrigger t;
    if (o.rate) t.rate = *o.rate;
    if (o.floor) t.floor = *o.floor;
    if (o.warmup) t.warmup = u32("warmup", *o.warmup);
    if (o.delta_window) t.window = detail::i32("delta_window", *o.delta_window);
    EmaMean m;
    if (o.beta) m.beta = *o.beta;
    ClipAndPromote r;
    if (o.kappa) r.first.kappa = *o.kappa;
    MaxO b;
    if (o.max_o) b.max_o = detail::i32("max_o", *o.max_o);
    if (o.lock) b.lock = detail::i32("lock", *o.lock);
    if (o.cooldown) b.cooldown = detail::i32("cooldown", *o.cooldown);
    return f(GnmrCalibrated(num_units, {}, m, t, r, b, detail::gnmr_options(o, SystemicAction::kOff)));
  }
  if (name == "gnmr" || name == "gnmr-promote") {
    ClipAndPromote r;
    if (o.kappa) r.first.kappa = *o.kappa;
    if (name == "gnmr") return detail::gnmr_any_mean(num_units, r, o, f, gnmr_systemic_rule().action, gnmr_denied_rule());
    return detail::gnmr_any_mean(num_units, r, o, f);
  }
  // gnmr-ladder
  Ladder r;
  if (o.kappa) r.kappa = *o.kappa;
  return detail::gnmr_any_mean(num_units, r, o, f);
}

}  // namespace presets
}  // namespace gnmr
