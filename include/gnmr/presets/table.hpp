// gnmr/presets/table.hpp — presets chosen by name at run time.
//
// A CLI, a replay tool or a framework binding picks a method by its name
// ("gnmr", "zclip", ...) and a few overrides; with_preset() turns that into
// the typed controller of gnmr/presets/typed.hpp and hands it to the caller's
// function, so the host facade (presets::make, gnmr/presets/make.hpp) and the
// CUDA one (gnmr::cuda::make_device, gnmr/cuda/presets.cuh) share a single
// table of names, overrides and range checks (gnmr/presets/options.hpp; the
// "outer+inner" names: gnmr/presets/layered_names.hpp, included here).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gnmr/presets/layered_names.hpp"
#include "gnmr/presets/options.hpp"
#include "gnmr/presets/typed.hpp"

namespace gnmr {
namespace presets {

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
  // with the systemic rule and the denied-unit clip on (docs/record/stability.md
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
    if (o.ceiling) t.ceiling = *o.ceiling;
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
    return f(GnmrCalibrated(num_units, {}, m, t, r, b, detail::gnmr_options(o, calibrated_systemic_rule(), calibrated_denied_rule())));
  }
  if (name == "gnmr-noise-floor") {
    NoiseFloorTrigger t;
    if (o.noise_c) t.c = *o.noise_c;
    if (o.warmup) t.warmup = u32("warmup", *o.warmup);
    EmaMean m;
    if (o.beta) m.beta = *o.beta;
    MaxO b;
    if (o.max_o) b.max_o = detail::i32("max_o", *o.max_o);
    if (o.lock) b.lock = detail::i32("lock", *o.lock);
    if (o.cooldown) b.cooldown = detail::i32("cooldown", *o.cooldown);
    return f(GnmrNoiseFloor(num_units, {}, m, t, PromotePrecision{}, b, {}));
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
