// demo/settings.hpp — everything that determines a run's result, in one
// struct (RunConfig), its canonical text (the cache key's material), and the
// command-line settings that change it.
//
// A run is a pure function of its RunConfig: the same config gives the same
// bits on the same build (one torch thread, seeded init, batches and
// stressors). canonical() lists every field; the suite hashes that text
// with kBenchVersion, so a changed setting or a changed scenario definition
// is never served from a stale cache. kBenchVersion must be bumped with any
// change to the training code that can change a result.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "arms.hpp"
#include "model.hpp"
#include "quant.hpp"
#include "stress.hpp"

namespace demo {

constexpr const char* kBenchVersion = "bench-2";

struct RunConfig {
  std::string scenario = "legacy", label;
  std::uint64_t seed = 1;
  std::string data = "/usr/share/games/fortunes";
  ModelConfig model;
  // recipe: AdamW, linear warm-up then cosine decay to 10%, global clip
  int steps = 300, batch = 16, warmup = 20, eval_every = 50, val_windows = 128;
  double lr = 1e-2, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, wd = 0.1;
  double recipe_clip = 1.0;  // 0: no global clip
  bool eval_train_format = false;  // validation in the training format (default: high precision)
  QuantConfig quant;
  double fault_rate = 0.0, fault_factor = 1000.0;
  FaultKind fault_kind = FaultKind::kMixed;
  OutlierConfig outliers;
  ArmDef arm;
  // A table arm's source (arm.depends_on): that run's own overrides, so that
  // a random copy of a noise-floor run at --max-o 2 is never served from the
  // cache of the copy of one at --max-o 1 (suite.hpp, build_config).
  std::string after_overrides;
  int detect_k = 3;  // a grant within k steps of an event's start detects it
  std::string device = "cpu";
  bool keep_unit_trace = false;  // per-unit norms and ratios (legacy trace + heat map)

  std::string name() const { return label.empty() ? arm.name : label; }
};

inline std::string num17(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

// Every field that can change the result, one "key=value" per line.
inline std::string canonical(const RunConfig& c) {
  std::ostringstream s;
  const auto kv = [&s](const char* k, const std::string& v) { s << k << '=' << v << '\n'; };
  const auto d = [](double v) { return num17(v); };
  kv("version", kBenchVersion);
  kv("scenario", c.scenario);
  kv("seed", std::to_string(c.seed));
  kv("data", c.data);
  kv("model", "ctx=" + std::to_string(c.model.ctx) + ",width=" + std::to_string(c.model.width) +
                  ",heads=" + std::to_string(c.model.heads) + ",layers=" + std::to_string(c.model.layers) +
                  ",mlp=" + (c.model.mlp == Mlp::kSwiGlu ? "swiglu" : "gelu"));
  kv("recipe", "steps=" + std::to_string(c.steps) + ",batch=" + std::to_string(c.batch) +
                   ",warmup=" + std::to_string(c.warmup) + ",lr=" + d(c.lr) + ",beta1=" + d(c.beta1) +
                   ",beta2=" + d(c.beta2) + ",eps=" + d(c.eps) + ",wd=" + d(c.wd) +
                   ",clip=" + d(c.recipe_clip));
  kv("eval", "every=" + std::to_string(c.eval_every) + ",windows=" + std::to_string(c.val_windows) +
                 ",format=" + (c.eval_train_format ? "train" : "high"));
  kv("quant", std::string("fwd_x=") + fmt_name(c.quant.fwd_x) + ",fwd_w=" + fmt_name(c.quant.fwd_w) +
                  ",bwd=" + fmt_name(c.quant.bwd) + ",scaling=" + scaling_name(c.quant.scaling) +
                  ",wgrad=" + std::to_string(c.quant.wgrad) + ",history=" + std::to_string(c.quant.history) +
                  (c.quant.head_high ? ",head=high" : ""));  // only when set: older keys unchanged
  kv("faults", "rate=" + d(c.fault_rate) + ",kind=" + fault_kind_name(c.fault_kind) +
                   ",factor=" + d(c.fault_factor));
  const OutlierConfig& o = c.outliers;
  kv("outliers", "per100=" + d(o.per_100) + ",factor=" + d(o.factor_min) + ":" + d(o.factor_max) +
                     ",len=" + std::to_string(o.len_min) + ":" + std::to_string(o.len_max) +
                     ",channels=" + std::to_string(o.channels) + ",first=" + std::to_string(o.first_step));
  const ArmDef& a = c.arm;
  kv("arm", a.name + ",controller=" + a.controller + "@" + controller_source(a.controller) +
                ",promote=" + std::to_string(static_cast<int>(a.promote)) +
                ",table=" + std::to_string(static_cast<int>(a.table)) + ",high=" + std::to_string(a.high) +
                ",replaces_clip=" + std::to_string(a.replaces_recipe_clip) + ",after=" + a.depends_on +
                (c.after_overrides.empty() ? "" : "{" + c.after_overrides + "}"));  // only when set: older keys unchanged
  kv("overrides", options_text(a.overrides));
  kv("detect_k", std::to_string(c.detect_k));
  kv("device", c.device);
  return s.str();
}

// --- command-line settings ------------------------------------------------

inline long to_long(const std::string& flag, const std::string& v, long lo, long hi) {
  std::size_t pos = 0;
  long x = 0;
  try {
    x = std::stol(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos != v.size() || v.empty() || x < lo || x > hi)
    throw std::invalid_argument(flag + " needs an integer in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "], got '" + v + "'");
  return x;
}

inline double to_double(const std::string& flag, const std::string& v) {
  std::size_t pos = 0;
  double x = 0;
  try {
    x = std::stod(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos != v.size() || v.empty() || !std::isfinite(x))
    throw std::invalid_argument(flag + " needs a number, got '" + v + "'");
  return x;
}

inline std::pair<double, double> to_range(const std::string& flag, const std::string& v) {
  const auto c = v.find(':');
  if (c == std::string::npos) {
    const double x = to_double(flag, v);
    return {x, x};
  }
  return {to_double(flag, v.substr(0, c)), to_double(flag, v.substr(c + 1))};
}

// gnmr-family overrides, "key=value,..." (tau, delta, warmup, lock, max_o, kappa, beta, ...).
inline void parse_gnmr_set(gnmr::presets::Options& o, const std::string& text) {
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("--gnmr-set: expected key=value, got '" + item + "'");
    const std::string k = item.substr(0, eq), v = item.substr(eq + 1), f = "--gnmr-set " + k;
    if (k == "tau") o.tau = static_cast<float>(to_double(f, v));
    else if (k == "delta") o.delta = static_cast<float>(to_double(f, v));
    else if (k == "beta") o.beta = static_cast<float>(to_double(f, v));
    else if (k == "kappa") o.kappa = static_cast<float>(to_double(f, v));
    else if (k == "warmup") o.warmup = to_long(f, v, 0, 1000000);
    else if (k == "window") o.window = to_long(f, v, 1, 64);
    else if (k == "delta_window") o.delta_window = to_long(f, v, 1, 8);
    else if (k == "max_o") o.max_o = to_long(f, v, 1, 1000000);
    else if (k == "lock") o.lock = to_long(f, v, 1, 1000000);
    else if (k == "cooldown") o.cooldown = to_long(f, v, 0, 1000000);
    else if (k == "mean") o.mean = v;
    else if (k == "systemic_action") o.systemic_action = v;
    else if (k == "systemic_share") o.systemic_share = to_double(f, v);
    else if (k == "systemic_maxo") o.systemic_maxo = to_double(f, v);
    else if (k == "systemic_kappa") o.systemic_kappa = static_cast<float>(to_double(f, v));
    else if (k == "systemic_beta") o.systemic_beta = static_cast<float>(to_double(f, v));
    else if (k == "systemic_max_grants") o.systemic_max_grants = to_long(f, v, 0, 1000000);
    else if (k == "deny_action") o.deny_action = v;
    else if (k == "deny_kappa") o.deny_kappa = static_cast<float>(to_double(f, v));
    else if (k == "rate") o.rate = static_cast<float>(to_double(f, v));
    else if (k == "floor") o.floor = static_cast<float>(to_double(f, v));
    else if (k == "ceiling") o.ceiling = static_cast<float>(to_double(f, v));
    else if (k == "noise_c") o.noise_c = static_cast<float>(to_double(f, v));
    else throw std::invalid_argument("--gnmr-set: unknown key '" + k + "'");
  }
}

struct Setting {
  const char* flag;
  const char* help;
  std::function<void(RunConfig&, const std::string&)> set;
};

// The settings a suite or a legacy run may change; each is part of the key.
inline const std::vector<Setting>& settings() {
  using R = RunConfig;
  using S = const std::string&;
  static const std::vector<Setting> t = {
      {"--steps", "optimizer steps", [](R& c, S v) { c.steps = static_cast<int>(to_long("--steps", v, 1, 10000000)); }},
      {"--layers", "transformer blocks", [](R& c, S v) { c.model.layers = static_cast<int>(to_long("--layers", v, 1, 64)); }},
      {"--width", "model width, a multiple of 4", [](R& c, S v) { c.model.width = static_cast<int>(to_long("--width", v, 4, 4096)); }},
      {"--mlp", "gelu | swiglu", [](R& c, S v) {
         if (v != "gelu" && v != "swiglu") throw std::invalid_argument("--mlp must be gelu or swiglu");
         c.model.mlp = v == "swiglu" ? Mlp::kSwiGlu : Mlp::kGelu; }},
      {"--batch", "sequences per batch (context 64)", [](R& c, S v) { c.batch = static_cast<int>(to_long("--batch", v, 1, 4096)); }},
      {"--lr", "peak AdamW learning rate", [](R& c, S v) { c.lr = to_double("--lr", v); }},
      {"--warmup", "learning-rate warm-up steps (then cosine)", [](R& c, S v) { c.warmup = static_cast<int>(to_long("--warmup", v, 0, 10000000)); }},
      {"--beta2", "AdamW beta2", [](R& c, S v) { c.beta2 = to_double("--beta2", v); }},
      {"--recipe-clip", "the recipe's global norm clip (0: none)", [](R& c, S v) { c.recipe_clip = to_double("--recipe-clip", v); }},
      {"--fwd", "forward format of activations and weights: none|e4m3|e5m2|e2m1",
       [](R& c, S v) { c.quant.fwd_x = c.quant.fwd_w = parse_fmt(v); }},
      {"--fwd-x", "forward format of the activations", [](R& c, S v) { c.quant.fwd_x = parse_fmt(v); }},
      {"--fwd-w", "forward format of the weights", [](R& c, S v) { c.quant.fwd_w = parse_fmt(v); }},
      {"--bwd", "format of the output gradients", [](R& c, S v) { c.quant.bwd = parse_fmt(v); }},
      {"--scaling", "current | delayed | block16 (NVFP4, e2m1 only) | nvfp4-recipe", [](R& c, S v) { c.quant.scaling = parse_scaling(v); }},
      {"--format", "nvfp4-recipe: NVIDIA's NVFP4 training recipe on all three GEMMs (16x16 weight blocks, stochastic "
                   "rounding of gradients, Hadamard transform on the weight gradient; CPU only)",
       [](R& c, S v) {
         if (v != "nvfp4-recipe") throw std::invalid_argument("--format takes nvfp4-recipe, got '" + v + "'");
         c.quant.fwd_x = c.quant.fwd_w = c.quant.bwd = Fmt::kE2M1;
         c.quant.scaling = Scaling::kNvfp4Recipe;
         c.quant.wgrad = true; }},
      {"--head-high", "1: the output head never quantized (as the NVFP4 recipe keeps it)",
       [](R& c, S v) { c.quant.head_high = to_long("--head-high", v, 0, 1) != 0; }},
      {"--wgrad-quant", "1: quantize the weight-gradient GEMM's inputs too", [](R& c, S v) { c.quant.wgrad = to_long("--wgrad-quant", v, 0, 1) != 0; }},
      {"--amax-history", "delayed scaling's amax history length", [](R& c, S v) { c.quant.history = static_cast<int>(to_long("--amax-history", v, 1, 1024)); }},
      {"--fault-rate", "probability per step of a gradient fault in one random unit", [](R& c, S v) { c.fault_rate = to_double("--fault-rate", v); }},
      {"--fault-kind", "scale | nan | mixed (3/4 scale, 1/4 NaN/Inf)", [](R& c, S v) { c.fault_kind = parse_fault_kind(v); }},
      {"--fault-factor", "gradient multiplier of a scale fault", [](R& c, S v) { c.fault_factor = to_double("--fault-factor", v); }},
      {"--outlier-rate", "activation-outlier events per 100 steps", [](R& c, S v) { c.outliers.per_100 = to_double("--outlier-rate", v); }},
      {"--outlier-factor", "outlier gain, X or MIN:MAX (log-uniform)", [](R& c, S v) {
         const auto r = to_range("--outlier-factor", v);
         c.outliers.factor_min = r.first, c.outliers.factor_max = r.second; }},
      {"--outlier-len", "event length in steps, N or MIN:MAX", [](R& c, S v) {
         const auto r = to_range("--outlier-len", v);
         c.outliers.len_min = static_cast<int>(r.first), c.outliers.len_max = static_cast<int>(r.second); }},
      {"--outlier-first", "no outlier event before this step", [](R& c, S v) { c.outliers.first_step = static_cast<int>(to_long("--outlier-first", v, 1, 10000000)); }},
      {"--outlier-channels", "input channels an event hits", [](R& c, S v) { c.outliers.channels = static_cast<int>(to_long("--outlier-channels", v, 1, 4096)); }},
      {"--eval-format", "high | train: the validation pass's precision", [](R& c, S v) {
         if (v != "high" && v != "train") throw std::invalid_argument("--eval-format must be high or train");
         c.eval_train_format = v == "train"; }},
      {"--detect-k", "detection window in steps after an event's start", [](R& c, S v) { c.detect_k = static_cast<int>(to_long("--detect-k", v, 0, 1000)); }},
      {"--max-o", "gnmr controllers: units in recovery at once", [](R& c, S v) { c.arm.overrides.max_o = to_long("--max-o", v, 1, 1000000); }},
      {"--gnmr-warmup", "gnmr controllers: samples before a verdict", [](R& c, S v) { c.arm.overrides.warmup = to_long("--gnmr-warmup", v, 0, 1000000); }},
      {"--gnmr-set", "gnmr controllers: overrides k=v[,k=v] (tau, delta, lock, kappa, max_o, systemic_action, systemic_share, deny_kappa, noise_c, ...)",
       [](R& c, S v) { parse_gnmr_set(c.arm.overrides, v); }},
      {"--data", "a text file, or a directory of text files", [](R& c, S v) { c.data = v; }},
      {"--device", "cpu | cuda", [](R& c, S v) {
         if (v != "cpu" && v != "cuda") throw std::invalid_argument("--device must be cpu or cuda, got '" + v + "'");
         c.device = v; }},
  };
  return t;
}

inline const Setting* find_setting(const std::string& flag) {
  for (const auto& s : settings())
    if (flag == s.flag) return &s;
  return nullptr;
}

// Arm overrides (--max-o, --gnmr-set, ...) apply to the gnmr family only;
// to any other controller they would be an error in presets::make. Each
// goes only to the arms whose preset accepts it (rate and floor to the
// calibrated ones, tau and delta to the others), so one suite can hold both.
inline void merge_arm(RunConfig& c, const ArmDef& a) {
  gnmr::presets::Options given = c.arm.overrides;
  c.arm = a;
  const std::string controller = gnmr::presets::resolve(a.controller);
  const std::string& inner = controller.substr(controller.find('+') + 1);
  if (inner.rfind("gnmr", 0) != 0) return;
  const auto accepted = gnmr::presets::detail::find_preset(inner).overrides;
  for (const auto& k : gnmr::presets::detail::options_given(given))
    if (std::find(accepted.begin(), accepted.end(), k) == accepted.end()) gnmr::presets::detail::clear_option(given, k);
  auto& o = c.arm.overrides;
  if (given.tau) o.tau = given.tau;
  if (given.delta) o.delta = given.delta;
  if (given.beta) o.beta = given.beta;
  if (given.kappa) o.kappa = given.kappa;
  if (given.warmup) o.warmup = given.warmup;
  if (given.window) o.window = given.window;
  if (given.delta_window) o.delta_window = given.delta_window;
  if (given.max_o) o.max_o = given.max_o;
  if (given.lock) o.lock = given.lock;
  if (given.cooldown) o.cooldown = given.cooldown;
  if (given.mean) o.mean = given.mean;
  if (given.systemic_action) o.systemic_action = given.systemic_action;
  if (given.systemic_share) o.systemic_share = given.systemic_share;
  if (given.systemic_maxo) o.systemic_maxo = given.systemic_maxo;
  if (given.systemic_kappa) o.systemic_kappa = given.systemic_kappa;
  if (given.systemic_beta) o.systemic_beta = given.systemic_beta;
  if (given.systemic_max_grants) o.systemic_max_grants = given.systemic_max_grants;
  if (given.deny_action) o.deny_action = given.deny_action;
  if (given.deny_kappa) o.deny_kappa = given.deny_kappa;
  if (given.rate) o.rate = given.rate;
  if (given.floor) o.floor = given.floor;
  if (given.ceiling) o.ceiling = given.ceiling;
  if (given.noise_c) o.noise_c = given.noise_c;
}

}  // namespace demo
