// tools/replay_options.hpp — gnmr-replay's command line and --config file.
//
// Every setting has one key, used both as a flag (--tau 2.5) and as a
// config line (tau = 2.5); '-' and '_' are interchangeable in keys. The
// config file is read first, wherever --config appears, so flags always win.
// Problems are UsageError (exit status 2), with the config line if any.
#pragma once

#include <cstdint>
#include <fstream>
#include <locale>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "gnmr/io/trace.hpp"
#include "gnmr/presets/make.hpp"

namespace replay {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Options {
  std::string trace;
  std::vector<std::string> presets;  // empty: {"default"}
  gnmr::presets::Options over;       // overrides for presets::make
  std::string events, plot, summary;
  std::string aux;  // a second trace: each unit's aux norm a step (--aux)
  int top = 10;
  bool quiet = false;
  bool help = false;
};

inline const char* usage() {
  return R"(usage: gnmr-replay TRACE.csv [options]

Runs gnmr controllers over a recorded trace of per-unit gradient norms
(CSV: header 'step,<unit1>,<unit2>,...', then one row 'step,<norm1>,...' per
step; nan/inf/-inf cells are valid) and reports what they did.

  --aux FILE       each unit's aux norm, a trace of the same units and
                   steps (gnmr-noise-floor: the quantization noise's norm;
                   Controller.trace(path, aux=...) writes it); needed by the
                   presets whose trigger reads it, ignored by the others

  --preset NAME[,NAME...]  presets to run, one run each (default: default,
                           i.e. stabilizer+gnmr-calibrated):
                           none clip zclip adagc spam skip-step stabilizer
                           gnmr gnmr-ladder gnmr-promote gnmr-clip
                           gnmr-systemic gnmr-calibrated gnmr-noise-floor
                           default. clip, zclip and skip-step are
                           global: they see one unit, the L2 norm
                           sqrt(sum n_i^2) of each row. OUTER+INNER
                           (stabilizer+gnmr, clip+gnmr-promote, ...) is a
                           layered controller: a peer's rule with a GNMR
                           preset inside it, in one step; settings go to
                           the GNMR preset when it takes them.
 GNMR settings (gnmr, gnmr-ladder; some also apply to other presets):
  --tau X          ratio threshold r > tau              (gnmr default 3)
  --delta X        Delta-GNMR threshold d > delta       (default 1.5)
  --warmup N       samples in the mean before a verdict (default 10)
  --delta-window N Delta-GNMR horizon w, <= 8           (default 4)
  --mean KIND      ema | cumulative | window            (default ema)
  --beta X         EMA decay                            (default 0.99)
  --window N       window length for --mean window (<= 64); skip-step's window
  --maxo N         at most N units in recovery at once  (default 4)
  --lock N         recovery lasts N steps               (default 8)
  --cooldown N     steps after a lock before a new grant (default 0)
  --restart-every N  stabilizer: Stable-SPAM's restart every N steps (0 = off, the default);
                     spam: SPAM's DeltaT timer (500 by default; 0 = off)
  --kappa X        clip a unit in recovery to kappa * mean (default 1)
 Systemic rule (gnmr presets; on in gnmr, gnmr-systemic, gnmr-calibrated
 and default, off in the others unless an action is given;
 docs/algorithm.md, "Systemic steps"):
  --systemic-action A  off | clip-triggered | global-clip | skip | hold
                       (gnmr, gnmr-systemic default clip-triggered;
                       gnmr-calibrated, default: hold at share 0.1, at
                       least 2, one grant a step)
  --systemic-share X   systemic when more than X * N units trigger (default 0.5)
  --systemic-maxo X    ... or more than X * maxO units (default 0: not used)
  --systemic-kappa X   clip level: kappa * mean of each unit (clip-triggered),
                       kappa * the total norm's mean (global-clip) (default 1)
  --systemic-beta X    EMA decay of the total norm's mean (default 0.99)
  --systemic-max-grants N  at most N slots granted on one step (0: no cap;
                       gnmr-calibrated, default: 1)
 Calibrated trigger (gnmr-calibrated, default; docs/algorithm.md, "Calibrated trigger"):
  --rate X         target false alarms per unit-step    (default 1e-3)
  --floor X        smallest jump (a factor) that fires  (default 2)
  --ceiling X      a ratio above X fires always, from step 2 (default 16; inf: none)
 Noise-floor trigger (gnmr-noise-floor; docs/algorithm.md, "Noise-floor trigger"):
  --noise-c X      a unit fires while its norm < X * its aux norm (default sqrt(3))
 Denied units (gnmr presets; docs/algorithm.md, "Denied units"):
  --deny-action A  what a denied (or held) unit gets: none | clip | clip-target
                   (gnmr: clip; gnmr-calibrated and default: clip-target; others: none)
  --deny-kappa X   clip a denied unit to X * mean without a slot (gnmr: 1; others: off)
  --max-norm X     clip, zclip: the fixed norm limit
  --z X            zclip, skip-step: the z-score threshold
  --clip-factor X  zclip
 Outputs:
  --events FILE    JSON Lines event log (trigger/grant/deny/release/
                   nonfinite/systemic/global_skip); with several presets FILE gets
                   the preset name before its extension
  --plot FILE      PNG of ratios over time and recoveries (needs gnuplot)
  --summary FILE   CSV, one row per run
  --top N          units in the per-unit table (default 10)
  --config FILE    key=value lines with the keys above (no dashes needed,
                   '#' comments); command-line flags override the file
  --quiet          no progress on stderr
  --help           this text
Exit status: 0 ok, 1 bad trace or failed output, 2 bad usage.
)";
}

namespace detail {

inline std::string norm_key(std::string k) {
  for (char& c : k)
    if (c == '_') c = '-';
  if (k == "max-o") k = "maxo";
  return k;
}

inline float to_float(const std::string& key, const std::string& v) {
  float f = 0.0f;
  if (!gnmr::parse_float(v, f))
    throw UsageError(key + ": '" + v + "' is not a number");
  return f;
}
inline double to_double(const std::string& key, const std::string& v) {
  std::istringstream is(v);
  is.imbue(std::locale::classic());
  double d = 0.0;
  if (v.empty() || !(is >> d) || is.peek() != std::char_traits<char>::eof())
    throw UsageError(key + ": '" + v + "' is not a number");
  return d;
}
inline std::int64_t to_int(const std::string& key, const std::string& v) {
  std::int64_t i = 0;
  if (!gnmr::parse_int64(v, i))
    throw UsageError(key + ": '" + v + "' is not an integer");
  return i;
}

inline std::vector<std::string> split_list(const std::string& v) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : v + ",") {
    if (c == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (c != ' ') {
      cur += c;
    }
  }
  return out;
}

inline bool takes_value(const std::string& k) { return k != "quiet" && k != "help"; }

// Applies one setting; false if the key is unknown.
inline bool apply(Options& o, const std::string& key, const std::string& v) {
  const std::string k = norm_key(key);
  auto& p = o.over;
  if (k == "preset") {
    o.presets = split_list(v);
    if (o.presets.empty()) throw UsageError("preset: no preset named");
    for (const auto& n : o.presets) {
      try {
        gnmr::presets::is_global(n);  // throws for an unknown name
      } catch (const std::invalid_argument& e) {
        throw UsageError(std::string("preset: ") + e.what());
      }
    }
  } else if (k == "tau") {
    p.tau = to_float(k, v);
  } else if (k == "delta") {
    p.delta = to_float(k, v);
  } else if (k == "warmup") {
    p.warmup = to_int(k, v);
  } else if (k == "window") {
    p.window = to_int(k, v);
  } else if (k == "delta-window") {
    p.delta_window = to_int(k, v);
  } else if (k == "beta") {
    p.beta = to_float(k, v);
  } else if (k == "maxo") {
    p.max_o = to_int(k, v);
  } else if (k == "lock") {
    p.lock = to_int(k, v);
  } else if (k == "cooldown") {
    p.cooldown = to_int(k, v);
  } else if (k == "kappa") {
    p.kappa = to_float(k, v);
  } else if (k == "mean") {
    if (v != "ema" && v != "cumulative" && v != "window")
      throw UsageError("mean: '" + v + "' is not one of ema, cumulative, window");
    p.mean = v;
  } else if (k == "systemic-action") {
    gnmr::SystemicAction a;
    if (!gnmr::parse_systemic_action(v, a))
      throw UsageError("systemic-action: '" + v + "' is not one of off, clip-triggered, global-clip, skip, hold");
    p.systemic_action = v;
  } else if (k == "systemic-share") {
    p.systemic_share = to_double(k, v);
  } else if (k == "systemic-maxo") {
    p.systemic_maxo = to_double(k, v);
  } else if (k == "systemic-kappa") {
    p.systemic_kappa = to_float(k, v);
  } else if (k == "systemic-beta") {
    p.systemic_beta = to_float(k, v);
  } else if (k == "systemic-max-grants") {
    p.systemic_max_grants = to_int(k, v);
  } else if (k == "deny-action") {
    gnmr::DeniedAction a;
    if (!gnmr::parse_denied_action(v, a))
      throw UsageError("deny-action: '" + v + "' is not one of none, clip, clip-target");
    p.deny_action = v;
  } else if (k == "deny-kappa") {
    p.deny_kappa = to_float(k, v);
  } else if (k == "rate") {
    p.rate = to_float(k, v);
  } else if (k == "floor") {
    p.floor = to_float(k, v);
  } else if (k == "ceiling") {
    p.ceiling = to_float(k, v);
  } else if (k == "noise-c") {
    p.noise_c = to_float(k, v);
  } else if (k == "max-norm") {
    p.max_norm = to_float(k, v);
  } else if (k == "z") {
    p.z = to_float(k, v);
  } else if (k == "clip-factor") {
    p.clip_factor = to_float(k, v);
  } else if (k == "restart-every") {
    p.restart_every = to_int(k, v);
  } else if (k == "events") {
    o.events = v;
  } else if (k == "aux") {
    o.aux = v;
  } else if (k == "plot") {
    o.plot = v;
  } else if (k == "summary") {
    o.summary = v;
  } else if (k == "top") {
    const std::int64_t t = to_int(k, v);
    if (t < 0 || t > 100000) throw UsageError("top: must be in [0, 100000]");
    o.top = static_cast<int>(t);
  } else if (k == "quiet") {
    o.quiet = v.empty() || v == "1" || v == "true" || v == "yes";
  } else {
    return false;
  }
  return true;
}

inline std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

inline void read_config(Options& o, const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("--config: cannot open '" + path + "'");
  std::string line;
  std::size_t no = 0;
  while (std::getline(in, line)) {
    ++no;
    const std::string l = trim(line);
    if (l.empty() || l[0] == '#') continue;
    const auto eq = l.find('=');
    const std::string where = path + ":" + std::to_string(no) + ": ";
    if (eq == std::string::npos) throw UsageError(where + "expected key = value, got '" + l + "'");
    const std::string key = trim(l.substr(0, eq));
    const std::string val = trim(l.substr(eq + 1));
    if (norm_key(key) == "config") throw UsageError(where + "a config file cannot include another");
    try {
      if (!apply(o, key, val)) throw UsageError("unknown key '" + key + "'");
    } catch (const std::exception& e) {
      throw UsageError(where + e.what());
    }
  }
}

}  // namespace detail

inline Options parse_args(int argc, char** argv) {
  Options o;
  std::vector<std::string> args(argv + 1, argv + argc);
  // The config file first, so that flags override it.
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config") {
      if (i + 1 >= args.size()) throw UsageError("--config needs a file");
      detail::read_config(o, args[i + 1]);
    }
  }
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      o.help = true;
      return o;
    }
    if (a.size() > 2 && a.compare(0, 2, "--") == 0) {
      std::string key = a.substr(2), val;
      const auto eq = key.find('=');
      if (eq != std::string::npos) {
        val = key.substr(eq + 1);
        key = key.substr(0, eq);
      } else if (detail::takes_value(detail::norm_key(key))) {
        if (i + 1 >= args.size()) throw UsageError("--" + key + " needs a value");
        val = args[++i];
      }
      if (detail::norm_key(key) == "config") continue;
      try {
        if (!detail::apply(o, key, val)) throw UsageError("unknown option --" + key);
      } catch (const UsageError&) {
        throw;
      } catch (const std::exception& e) {
        throw UsageError(std::string("--") + e.what());
      }
    } else if (o.trace.empty()) {
      o.trace = a;
    } else {
      throw UsageError("more than one trace given ('" + o.trace + "' and '" + a + "')");
    }
  }
  if (o.trace.empty()) throw UsageError("no trace file given");
  if (o.presets.empty()) o.presets = {"default"};
  return o;
}

}  // namespace replay
