// gnmr/presets/layered_names.hpp — layered preset names ("outer+inner",
// gnmr/step/layered.hpp): parsing, how overrides split between the two
// presets, the plan presets::make and cuda::make_device build from, and
// which presets are global rules. The single presets' table is
// gnmr/presets/options.hpp; with_preset is gnmr/presets/table.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gnmr/presets/options.hpp"

namespace gnmr {
namespace presets {

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
  // gnmr-noise-floor needs each step's aux signal, which the layered
  // controllers do not carry.
  if (!is_gnmr(l.inner) || l.inner == "gnmr-noise-floor")
    throw std::invalid_argument("gnmr: the inner rule of '" + name + "' must be a GNMR preset (gnmr, gnmr-promote, "
                                "gnmr-clip, gnmr-systemic, gnmr-ladder, gnmr-calibrated; not gnmr-noise-floor, "
                                "whose steps take each unit's noise)");
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
  if (k == "systemic_max_grants") o.systemic_max_grants.reset();
  if (k == "deny_action") o.deny_action.reset();
  if (k == "deny_kappa") o.deny_kappa.reset();
  if (k == "rate") o.rate.reset();
  if (k == "floor") o.floor.reset();
  if (k == "ceiling") o.ceiling.reset();
  if (k == "noise_c") o.noise_c.reset();
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
  // Inside an outer rule, the calibrated preset leaves the units it does not
  // grant (denied by the budget or the one-grant cap, or on a held step) to
  // the outer rule, which bounds every unit: clipping them to the trigger's
  // target as well shrank them twice and cost the default on learning-rate
  // bursts (chosen on development seeds, docs/record/stability-verdict.md,
  // "The denied and held units inside the default"). Alone, gnmr-calibrated
  // keeps calibrated_denied_rule(); an explicit deny_action (or deny_kappa,
  // which alone means deny_action=clip) is kept as given.
  if (p.names.inner == "gnmr-calibrated" && !p.inner.deny_action && !p.inner.deny_kappa)
    p.inner.deny_action = "none";
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

}  // namespace presets
}  // namespace gnmr
