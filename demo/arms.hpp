// demo/arms.hpp — the benchmark's arms: what rule a run adds to the recipe,
// and where its promotions come from.
//
// An arm is a controller name, overrides, a promotion source and a
// precision. Controllers come from gnmr's preset table (presets::make,
// cuda::make_device) whenever the library has the name; the few the
// benchmark needs before the library ships them are built here from the
// same policies (bench_controller below). When the library gains a name,
// the library's preset is used automatically and the run's cache key
// changes with it (controller_source() is part of the key), so no stale
// result is reused.
//
// No torch and no CUDA header here: cuda_backend.cu builds the device twin
// of the same controller through with_arm_controller().
#pragma once

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gnmr/preset_select.hpp"
#include "promotion.hpp"

namespace demo {

enum class Table : std::uint8_t { kNone, kRandom, kFixed, kAll };

struct ArmDef {
  std::string name;
  std::string controller = "none";  // preset name, or <global>+<per-unit> (legacy)
  gnmr::presets::Options overrides;  // the arm's own; --max-o etc. add to them
  PromoteFrom promote = PromoteFrom::kController;
  Table table = Table::kNone;
  bool high = false;                  // every GEMM in high precision (no quantization work at all)
  bool replaces_recipe_clip = false;  // zclip: its rule is the clip
  std::string depends_on;             // an arm of the same seed that must run first
  std::string what;                   // one line for --help and the docs
};

// The arm table. Switching an arm to a library preset is a one-word change
// of its controller field (and nothing at all for gnmr-promote / gnmr-clip,
// see bench_controller).
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
       "GNMR with the systemic rule (needs the library's gnmr-systemic preset)"},
      {"random-at-triggers", "gnmr-promote", {}, P::kRedirect, Table::kNone, false, false, "",
       "gnmr-promote's controller and clips, each promotion moved to a random operator"},
      {"random", "none", {}, P::kTable, Table::kRandom, false, false, "gnmr-promote",
       "gnmr-promote's promoted operator-steps at random operators and steps"},
      {"fixed-list", "none", {}, P::kTable, Table::kFixed, false, false, "gnmr-promote",
       "head + last layers always high, sized to gnmr-promote's high-precision share"},
      {"clip", "clip", {}, P::kController, Table::kNone, false, false, "", "global clipping at 1.0 (with --recipe-clip 0)"},
      {"zclip", "zclip", {}, P::kController, Table::kNone, false, true, "", "ZClip, replacing the recipe's clip"},
      {"adagc", "adagc", {}, P::kController, Table::kNone, false, false, "", "AdaGC, per unit"},
      {"spam", "spam", {}, P::kController, Table::kNone, false, false, "", "SPAM's spike rule, per unit"},
      {"skip-step", "skip-step", {}, P::kController, Table::kNone, false, false, "", "OLMo-core's skip-step"},
      {"stabilizer", "stabilizer", {}, P::kController, Table::kNone, false, false, "",
       "Stable-SPAM's AdaGN (GradientStabilizer)"},
  };
  return t;
}

inline bool library_has(const std::string& preset) {
  const auto n = gnmr::presets::names();
  return std::find(n.begin(), n.end(), preset) != n.end();
}

// The controllers the benchmark builds itself while the library lacks them.
inline bool bench_has(const std::string& c) { return c == "gnmr-promote" || c == "gnmr-clip"; }

// "lib" or "bench": part of a run's cache key (see the file comment).
inline const char* controller_source(const std::string& c) {
  return library_has(c) ? "lib" : bench_has(c) ? "bench" : "missing";
}

// Arms usable with this library build (gnmr-systemic appears when it lands).
inline bool arm_available(const ArmDef& a) {
  return a.controller.find('+') != std::string::npos || library_has(a.controller) || bench_has(a.controller);
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

// f(typed controller) for a preset name (library first, then the bench's
// own). gnmr-promote: GNMR's default signal and budget with
// Compose<ClipToMean, PromotePrecision>, the gnmr overrides; gnmr-clip:
// today's gnmr preset under its own name.
template <class F>
auto with_arm_controller(const std::string& name, std::size_t units, const gnmr::presets::Options& o, F&& f)
    -> decltype(f(gnmr::presets::pass_through(1))) {
  namespace d = gnmr::presets::detail;
  if (library_has(name)) return gnmr::presets::with_preset(name, units, o, f);
  if (name == "gnmr-clip") return gnmr::presets::with_preset("gnmr", units, o, f);
  if (name == "gnmr-promote") {
    d::check_overrides(d::find_preset("gnmr"), o);
    gnmr::Compose<gnmr::ClipToMean, gnmr::PromotePrecision> rec{gnmr::ClipToMean{}, {}};
    if (o.kappa) rec.first.kappa = *o.kappa;
    return d::gnmr_any_mean(units, rec, o, f);
  }
  return gnmr::presets::with_preset(name, units, o, f);  // throws: unknown name
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
  return s.str();
}

}  // namespace demo
