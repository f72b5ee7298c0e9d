// demo/arms.hpp — the benchmark's arms: what rule a run adds to the recipe,
// and where its promotions come from.
//
// An arm is a controller name, overrides, a promotion source and a
// precision. Controllers come from gnmr's preset table (presets::make,
// cuda::make_device); controller_source() is part of a run's cache key, so
// results of the stand-ins the benchmark used before the library shipped
// gnmr-promote and gnmr-clip are never reused.
//
// No torch and no CUDA header here: cuda_backend.cu builds the device twin
// of the same controller with cuda::make_device (same names, same options).
#pragma once

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gnmr/presets/table.hpp"
#include "promotion.hpp"

namespace demo {

// kEnds: the first and last blocks (static-layers); kLate: every operator
// for the last steps (late-switch); both sized by the model, need no run.
enum class Table : std::uint8_t { kNone, kRandom, kFixed, kAll, kEnds, kLate };

struct ArmDef {
  std::string name;
  std::string controller = "none";  // preset name, or a layered "outer+inner" (gnmr/host/layered.hpp)
  gnmr::presets::Options overrides;  // the arm's own; --max-o etc. add to them
  PromoteFrom promote = PromoteFrom::kController;
  Table table = Table::kNone;
  bool high = false;                  // every GEMM in high precision (no quantization work at all)
  bool replaces_recipe_clip = false;  // zclip: its rule is the clip
  std::string depends_on;             // an arm of the same seed that must run first
  std::string what;                   // one line for --help and the docs
};

// The arm table. Switching an arm to a library preset is a one-word change
// of its controller field.
inline const std::vector<ArmDef>& arm_table() {
  using P = PromoteFrom;
  static const std::vector<ArmDef> t = {
      {"low", "none", {}, P::kController, Table::kNone, false, false, "", "always low precision: the recipe alone"},
      {"high", "none", {}, P::kTable, Table::kAll, true, false, "", "always high precision: the reference and the cost ceiling"},
      {"gnmr", "gnmr", {}, P::kController, Table::kNone, false, false, "", "the default gnmr preset"},
      {"gnmr-promote", "gnmr-promote", {}, P::kController, Table::kNone, false, false, "",
       "GNMR signal; promote the operator for the lock and clip to kappa*mu"},
      {"gnmr-clip", "gnmr-clip", {}, P::kController, Table::kNone, false, false, "", "GNMR signal; clip only"},
      {"gnmr-systemic", "gnmr-systemic", {}, P::kController, Table::kNone, false, false, "",
       "GNMR with the systemic rule (the preset gnmr-systemic)"},
      {"random-at-triggers", "gnmr-promote", {}, P::kRedirect, Table::kNone, false, false, "",
       "gnmr-promote's controller and clips, each promotion moved to a random operator"},
      {"random", "none", {}, P::kTable, Table::kRandom, false, false, "gnmr-promote",
       "gnmr-promote's promoted operator-steps at random operators and steps"},
      {"fixed-list", "none", {}, P::kTable, Table::kFixed, false, false, "gnmr-promote",
       "head + last layers always high, sized to gnmr-promote's high-precision share"},
      {"clip", "clip", {}, P::kController, Table::kNone, false, false, "", "global clipping at 1.0 (with --recipe-clip 0)"},
      {"zclip", "zclip", {}, P::kController, Table::kNone, false, true, "", "ZClip, replacing the recipe's clip"},
      {"adagc", "adagc", {}, P::kController, Table::kNone, false, false, "", "AdaGC, per unit"},
      {"spam", "spam", {}, P::kController, Table::kNone, false, false, "", "SPAM's spike rule per unit, with its DeltaT=500 timer"},
      {"skip-step", "skip-step", {}, P::kController, Table::kNone, false, false, "", "OLMo-core's skip-step"},
      {"stabilizer", "stabilizer", {}, P::kController, Table::kNone, false, false, "",
       "Stable-SPAM's AdaGN (GradientStabilizer)"},
      // GNMR inside the stabilizer (issue 20): the library's layered controller.
      {"stabilizer-high", "stabilizer", {}, P::kTable, Table::kAll, true, false, "",
       "the stabilizer with every GEMM in high precision: what is left to close under it"},
      {"stabilizer+gnmr-promote", "stabilizer+gnmr-promote", {}, P::kController, Table::kNone, false, false, "",
       "the stabilizer with GNMR inside it: gnmr-promote's promotions and clips"},
      {"stabilizer+gnmr", "stabilizer+gnmr", {}, P::kController, Table::kNone, false, false, "",
       "the stabilizer with GNMR inside it: the chosen gnmr preset"},
      {"stabilizer+random", "stabilizer", {}, P::kTable, Table::kRandom, false, false, "stabilizer+gnmr-promote",
       "the stabilizer with stabilizer+gnmr-promote's promoted operator-steps at random operators and steps"},
      // Thresholds set per unit from a false-alarm rate (issue 31).
      {"gnmr-calibrated", "gnmr-calibrated", {}, P::kController, Table::kNone, false, false, "",
       "calibrated trigger (rate, floor); promote the operator for the lock and clip to kappa*mu"},
      {"stabilizer+gnmr-calibrated", "stabilizer+gnmr-calibrated", {}, P::kController, Table::kNone, false, false, "",
       "the stabilizer with gnmr-calibrated inside it"},
      {"default", "default", {}, P::kController, Table::kNone, false, false, "",
       "the library's default preset (gnmr::presets::kDefaultPreset)"},
      {"default-random", "stabilizer", {}, P::kTable, Table::kRandom, false, false, "default",
       "the stabilizer with default's promoted operator-steps at random operators and steps"},
      // Run-time promotion against the NVFP4 recipe's static choices
      // (docs/record/nvfp4.md, "The demo's arms").
      {"static-layers", "none", {}, P::kTable, Table::kEnds, false, false, "",
       "the first and last blocks' operators always in high precision (NVIDIA's NVFP4 rule, scaled)"},
      {"late-switch", "none", {}, P::kTable, Table::kLate, false, false, "",
       "every operator in high precision for the last steps, at static-layers' share"},
      {"noise-floor", "gnmr-noise-floor", {}, P::kController, Table::kNone, false, false, "",
       "promote the units whose gradient is below noise_c times its rounding noise (nvfp4-recipe only)"},
      {"noise-floor-random", "none", {}, P::kTable, Table::kRandom, false, false, "noise-floor",
       "noise-floor's promoted operator-steps at random operators and steps"},
  };
  return t;
}

// A preset name or a valid layered name ("stabilizer+gnmr").
inline bool library_has(const std::string& preset) {
  if (gnmr::presets::is_layered(preset)) {
    try {
      gnmr::presets::split_layered(preset);
      return true;
    } catch (const std::invalid_argument&) {
      return false;
    }
  }
  const auto n = gnmr::presets::names();
  return std::find(n.begin(), n.end(), preset) != n.end();
}

// "lib": part of a run's cache key, so results from the benchmark's own
// stand-ins (before the library shipped gnmr-promote/gnmr-clip) are never reused.
inline const char* controller_source(const std::string& c) { return library_has(c) ? "lib" : "missing"; }

// The arms of the NVFP4 comparison: asked for by name, not in "all" (the
// noise-floor trigger needs --format nvfp4-recipe's noise).
inline bool nvfp4_arm(const ArmDef& a) {
  return a.table == Table::kEnds || a.table == Table::kLate || a.controller == "gnmr-noise-floor" ||
         a.depends_on == "noise-floor";
}

// Arms usable with this library build (every arm of the table, since the
// library has gnmr-promote, gnmr-clip and gnmr-systemic).
inline bool arm_available(const ArmDef& a) {
  return library_has(a.controller);
}

inline const ArmDef& find_arm(const std::string& name) {
  for (const auto& a : arm_table())
    if (a.name == name) {
      if (!arm_available(a))
        throw std::invalid_argument("arm '" + name + "' needs the preset '" + a.controller +
                                    "', which this gnmr build does not have");
      return a;
    }
  std::string all;
  for (const auto& a : arm_table()) all += (all.empty() ? "" : ", ") + a.name;
  throw std::invalid_argument("unknown arm '" + name + "'; arms: " + all);
}

// --- overrides as text (cache keys, logs) ---------------------------------

inline std::string options_text(const gnmr::presets::Options& o) {
  std::ostringstream s;
  s.precision(9);
  const auto put = [&s](const char* k, auto v) { s << (s.tellp() > 0 ? "," : "") << k << "=" << v; };
  if (o.tau) put("tau", *o.tau);
  if (o.delta) put("delta", *o.delta);
  if (o.warmup) put("warmup", *o.warmup);
  if (o.window) put("window", *o.window);
  if (o.delta_window) put("delta_window", *o.delta_window);
  if (o.beta) put("beta", *o.beta);
  if (o.max_o) put("max_o", *o.max_o);
  if (o.lock) put("lock", *o.lock);
  if (o.cooldown) put("cooldown", *o.cooldown);
  if (o.kappa) put("kappa", *o.kappa);
  if (o.max_norm) put("max_norm", *o.max_norm);
  if (o.z) put("z", *o.z);
  if (o.clip_factor) put("clip_factor", *o.clip_factor);
  if (o.mean) put("mean", *o.mean);
  if (o.systemic_action) put("systemic_action", *o.systemic_action);
  if (o.systemic_share) put("systemic_share", *o.systemic_share);
  if (o.systemic_maxo) put("systemic_maxo", *o.systemic_maxo);
  if (o.systemic_kappa) put("systemic_kappa", *o.systemic_kappa);
  if (o.systemic_beta) put("systemic_beta", *o.systemic_beta);
  if (o.systemic_max_grants) put("systemic_max_grants", *o.systemic_max_grants);
  if (o.deny_action) put("deny_action", *o.deny_action);
  if (o.deny_kappa) put("deny_kappa", *o.deny_kappa);
  if (o.rate) put("rate", *o.rate);
  if (o.floor) put("floor", *o.floor);
  if (o.ceiling) put("ceiling", *o.ceiling);
  if (o.noise_c) put("noise_c", *o.noise_c);
  return s.str();
}

}  // namespace demo
