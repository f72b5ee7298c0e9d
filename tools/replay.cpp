// tools/replay.cpp — gnmr-replay: run controllers over a recorded norm trace.
//
// The offline half of tuning (docs/tuning.md): record per-unit norms during
// a run (gnmr::TraceWriter), then replay them here under any preset or GNMR
// setting and see what it would have done — how many triggers, grants and
// denials, how much of the run was in recovery, which units, and when. The
// replay is exact: a controller's decisions depend on the norms alone, so
// the replay makes the decisions the live run would make for those norms
// (until its own actions would have changed the later norms).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "gnmr/host/dyn_controller.hpp"
#include "gnmr/io/telemetry.hpp"
#include "gnmr/io/trace.hpp"
#include "gnmr/presets/make.hpp"
#include "replay_options.hpp"
#include "replay_plot.hpp"
#include "replay_stats.hpp"

namespace {

using replay::RunStats;
using replay::UnitStats;

// "ev.jsonl" + "gnmr" -> "ev.gnmr.jsonl" (one output file per run).
std::string per_run_path(const std::string& path, const std::string& preset, bool several) {
  if (!several || path.empty()) return path;
  const auto slash = path.find_last_of('/');
  const auto dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash))
    return path + "." + preset;
  return path.substr(0, dot) + "." + preset + path.substr(dot);
}

// The overrides that apply to `preset`; the others are listed in `dropped`.
gnmr::presets::Options applicable(const gnmr::presets::Options& o, const std::string& preset,
                                  std::vector<std::string>& dropped) {
  const auto& allowed = gnmr::presets::overrides_of(preset);
  const auto ok = [&](const char* k) {
    if (std::find(allowed.begin(), allowed.end(), k) != allowed.end()) return true;
    dropped.push_back(k);
    return false;
  };
  gnmr::presets::Options r;
  // The systemic knobs tune a rule that gnmr and gnmr-ladder only have with
  // an explicit action: in a multi-preset run they go to the presets whose
  // rule is on (gnmr-systemic; gnmr-calibrated, alone or inside a layered
  // name such as default).
  const std::string resolved = gnmr::presets::resolve(preset);
  const auto ends_with = [&](const char* tail) {
    const std::string t(tail);
    return resolved.size() >= t.size() && resolved.compare(resolved.size() - t.size(), t.size(), t) == 0;
  };
  const bool rule_on = resolved == "gnmr-systemic" || ends_with("+gnmr-systemic") || ends_with("gnmr-calibrated");
  const bool rule_off = !rule_on && !o.systemic_action;
  const auto ok_sys = [&](const char* k) {
    if (!rule_off) return ok(k);
    dropped.push_back(k);
    return false;
  };
#define GNMR_KEEP_SYS(field) \
  if (o.field && ok_sys(#field)) r.field = o.field;
#define GNMR_KEEP(field) \
  if (o.field && ok(#field)) r.field = o.field;
  GNMR_KEEP(tau) GNMR_KEEP(delta) GNMR_KEEP(warmup) GNMR_KEEP(window) GNMR_KEEP(delta_window)
  GNMR_KEEP(beta) GNMR_KEEP(max_o) GNMR_KEEP(lock) GNMR_KEEP(cooldown) GNMR_KEEP(kappa)
  GNMR_KEEP(max_norm) GNMR_KEEP(z) GNMR_KEEP(clip_factor) GNMR_KEEP(mean) GNMR_KEEP(restart_every)
  GNMR_KEEP(systemic_action) GNMR_KEEP_SYS(systemic_share) GNMR_KEEP_SYS(systemic_maxo)
  GNMR_KEEP_SYS(systemic_kappa) GNMR_KEEP_SYS(systemic_beta) GNMR_KEEP_SYS(systemic_max_grants)
  GNMR_KEEP(deny_action) GNMR_KEEP(deny_kappa)
  GNMR_KEEP(rate) GNMR_KEEP(floor) GNMR_KEEP(ceiling) GNMR_KEEP(noise_c)
#undef GNMR_KEEP
#undef GNMR_KEEP_SYS
  return r;
}

// One global L2 norm from a row of per-unit norms: sqrt(sum n_i^2) in
// double; NaN if any norm is NaN, +inf if any is infinite.
float global_norm(const float* row, std::size_t n) {
  double ss = 0.0;
  bool nan = false, inf = false;
  for (std::size_t i = 0; i < n; ++i) {
    const float v = row[i];
    if (std::isnan(v)) nan = true;
    else if (std::isinf(v)) inf = true;
    else ss += static_cast<double>(v) * static_cast<double>(v);
  }
  if (nan) return gnmr::nan_f();
  if (inf) return gnmr::inf_f();
  return static_cast<float>(std::sqrt(ss));
}

bool shows_norm(const std::string& preset) {
  return preset == "none" || preset == "clip" || preset == "stabilizer";
}

// The trace of each unit's aux norm (--aux): the same units, in the same
// order, and the same steps as the norm trace, or an error naming the first
// difference (a replay that paired norms and aux of different steps would
// be silently wrong).
void check_aux(const gnmr::Trace& t, const gnmr::Trace& aux, const std::string& path) {
  if (aux.names != t.names) {
    std::size_t u = 0;
    while (u < t.names.size() && u < aux.names.size() && t.names[u] == aux.names[u]) ++u;
    throw std::runtime_error(path + ": its units differ from the trace's (" + std::to_string(aux.num_units()) +
                             " against " + std::to_string(t.num_units()) + "; first difference at column " +
                             std::to_string(u + 2) + ")");
  }
  if (aux.steps != t.steps) {
    std::size_t s = 0;
    while (s < t.steps.size() && s < aux.steps.size() && t.steps[s] == aux.steps[s]) ++s;
    throw std::runtime_error(path + ": its steps differ from the trace's (" + std::to_string(aux.num_steps()) +
                             " rows against " + std::to_string(t.num_steps()) + "; first difference at row " +
                             std::to_string(s + 1) + ")");
  }
}

// Does preset `p` step on each unit's aux signal (gnmr-noise-floor)? The
// layered controllers never do.
bool reads_aux(const std::string& p) {
  return !gnmr::presets::is_layered(p) && gnmr::presets::make(p, 1)->needs_aux();
}

// Reads the trace at `path` into `t`: 0, or 1 with the reason on stderr.
int load_trace(const std::string& path, const char* what, gnmr::Trace& t) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "gnmr-replay: cannot open %s '%s'\n", what, path.c_str());
    return 1;
  }
  try {
    t = gnmr::read_trace(in);
  } catch (const gnmr::TraceError& e) {
    std::fprintf(stderr, "gnmr-replay: %s:%zu: %s\n", path.c_str(), e.line, e.message.c_str());
    return 1;
  }
  return 0;
}

RunStats run_one(const gnmr::Trace& t, const gnmr::Trace* aux, const std::string& preset,
                 const replay::Options& opt, bool several) {
  const bool global = gnmr::presets::is_global(preset);
  RunStats st;
  st.preset = preset;
  st.units = global ? 1 : t.num_units();
  st.names = global ? std::vector<std::string>{"global"} : t.names;
  st.per_unit.assign(st.units, UnitStats{});
  st.has_ratio = !shows_norm(preset);

  std::vector<std::string> dropped;
  const gnmr::presets::Options over = several ? applicable(opt.over, preset, dropped) : opt.over;
  if (!dropped.empty() && !opt.quiet) {
    std::string d;
    for (const auto& k : dropped) d += " " + k;
    std::cerr << "gnmr-replay: " << preset << " ignores:" << d << "\n";
  }
  std::unique_ptr<gnmr::DynController> c;
  try {
    c = gnmr::presets::make(preset, st.units, over);
  } catch (const std::invalid_argument& e) {
    throw replay::UsageError(e.what());
  }

  std::ofstream ev_file;
  std::unique_ptr<gnmr::EventLog> log;
  if (!opt.events.empty()) {
    const std::string p = per_run_path(opt.events, preset, several);
    ev_file.open(p);
    if (!ev_file) throw std::runtime_error("cannot write the event log '" + p + "'");
    log.reset(new gnmr::EventLog(ev_file));
  }
  std::unique_ptr<replay::PlotData> plot;
  if (!opt.plot.empty())
    plot.reset(new replay::PlotData(st.units, t.num_steps(), t.steps.front(), t.steps.back(),
                                    shows_norm(preset)));

  const bool progress = !opt.quiet && t.num_steps() > 5000;
  const bool tty = isatty(2) != 0;
  const std::size_t tick = t.num_steps() / 10;
  float g = 0.0f;
  for (std::size_t s = 0; s < t.num_steps(); ++s) {
    const float* row = t.row(s);
    if (global) {
      g = global_norm(row, t.num_units());
      row = &g;
    }
    const bool with_aux = !global && c->needs_aux();  // aux: checked present in main
    const gnmr::StepSummary& sum =
        with_aux ? c->step_norms_with_aux(row, aux->row(s), st.units) : c->step_norms(row, st.units);
    const std::vector<gnmr::UnitReport>& rep = c->reports();
    st.triggers += sum.triggered;
    st.grants += sum.granted;
    st.denials += sum.denied;
    st.nonfinite += sum.nonfinite;
    st.releases += sum.released;
    st.global_skips += sum.skip_step;
    st.systemic += sum.systemic ? 1 : 0;
    st.in_rec_sum += sum.in_recovery;
    st.max_in_rec = std::max(st.max_in_rec, sum.in_recovery);
    if (gnmr::EventLog::has_events(sum)) {
      for (std::size_t u = 0; u < st.units; ++u) {
        const std::uint32_t f = rep[u].flags;
        UnitStats& us = st.per_unit[u];
        us.grants += (f & gnmr::kGranted) ? 1 : 0;
        us.triggers += (f & gnmr::kTriggered) ? 1 : 0;
        us.denials += (f & gnmr::kDenied) ? 1 : 0;
        us.nonfinite += (f & gnmr::kNonFinite) ? 1 : 0;
        // A denied unit that the denied-unit rule clipped.
        st.denied_clipped += ((f & gnmr::kDenied) && rep[u].scale < 1.0f) ? 1 : 0;
      }
    }
    for (std::size_t u = 0; u < st.units; ++u) {
      UnitStats& us = st.per_unit[u];
      if (std::isfinite(rep[u].ratio)) us.max_ratio = std::max(us.max_ratio, rep[u].ratio);
      if (std::isfinite(rep[u].norm)) us.max_norm = std::max(us.max_norm, rep[u].norm);
      // A zero norm is not a sample (no ratio): like the summary's max ratio, skip it.
      constexpr std::uint32_t kNoRatio = gnmr::kWarmup | gnmr::kNonFinite | gnmr::kZeroNorm;
      if (st.has_ratio && !(rep[u].flags & kNoRatio)) {
        st.ratio_h.add(rep[u].ratio);
        st.delta_h.add(rep[u].delta);
        st.ratio_max = std::max(st.ratio_max, rep[u].ratio);
        st.delta_max = std::max(st.delta_max, rep[u].delta);
      }
    }
    if (log) st.events += log->write(sum, rep.data(), st.units, st.names);
    if (plot) plot->add(s, t.steps[s], sum, rep.data());
    if (progress && tick && (s + 1) % tick == 0) {
      std::fprintf(stderr, "%sgnmr-replay: %s %3zu%% (%zu/%zu steps)%s", tty ? "\r" : "",
                   preset.c_str(), (s + 1) * 100 / t.num_steps(), s + 1, t.num_steps(), tty ? "" : "\n");
      std::fflush(stderr);
    }
  }
  if (progress && tty) std::fputc('\n', stderr);
  st.steps = t.num_steps();
  if (log) {
    log->flush();
    if (!ev_file) throw std::runtime_error("writing the event log failed");
  }
  if (plot) {
    const std::string p = per_run_path(opt.plot, preset, several);
    plot->write_png(p, "gnmr-replay: " + preset + " on " + opt.trace, st.names, c->max_in_recovery());
  }
  return st;
}

}  // namespace

int main(int argc, char** argv) {
  replay::Options opt;
  try {
    opt = replay::parse_args(argc, argv);
  } catch (const replay::UsageError& e) {
    std::fprintf(stderr, "gnmr-replay: %s\n(gnmr-replay --help for usage)\n", e.what());
    return 2;
  }
  if (opt.help) {
    std::fputs(replay::usage(), stdout);
    return 0;
  }

  // Settings first: a typo should not wait for a large trace to load.
  try {
    for (const auto& p : opt.presets) {
      std::vector<std::string> dropped;
      gnmr::presets::make(p, 1, opt.presets.size() > 1 ? applicable(opt.over, p, dropped) : opt.over);
    }
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "gnmr-replay: %s\n(gnmr-replay --help for usage)\n", e.what());
    return 2;
  }

  // A preset whose trigger reads each unit's aux signal (gnmr-noise-floor:
  // the quantization noise) replays from a second trace of it (--aux);
  // checked with the settings, before any trace loads.
  bool any_aux = false;
  for (const auto& p : opt.presets) {
    if (!reads_aux(p)) continue;
    any_aux = true;
    if (opt.aux.empty())
      std::fprintf(stderr, "gnmr-replay: preset '%s' needs each unit's aux norm with every step, which "
                           "a norm trace does not hold: give it with --aux FILE (a trace of the same units "
                           "and steps; Controller.trace(path, aux=...) writes one)\n", p.c_str());
  }
  if (any_aux && opt.aux.empty()) return 2;
  if (!opt.aux.empty() && !any_aux) {
    std::fprintf(stderr, "gnmr-replay: --aux given, but no preset given reads an aux signal "
                         "(gnmr-noise-floor does)\n(gnmr-replay --help for usage)\n");
    return 2;
  }

  gnmr::Trace trace;
  if (load_trace(opt.trace, "trace", trace)) return 1;
  std::printf("trace %s: %zu steps (%lld..%lld), %zu units\n", opt.trace.c_str(), trace.num_steps(),
              static_cast<long long>(trace.steps.front()), static_cast<long long>(trace.steps.back()),
              trace.num_units());
  for (const auto& p : opt.presets)
    if (gnmr::presets::is_global(p))
      std::printf("note: %s is a global preset: it sees one unit, each row's L2 norm "
                  "sqrt(sum n_i^2) over the %zu units (non-finite if any is)\n",
                  p.c_str(), trace.num_units());
  gnmr::Trace aux;
  if (!opt.aux.empty()) {
    if (load_trace(opt.aux, "the aux trace", aux)) return 1;
    try {
      check_aux(trace, aux, opt.aux);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gnmr-replay: %s\n", e.what());
      return 1;
    }
    std::printf("aux %s: the same %zu steps and %zu units\n", opt.aux.c_str(), aux.num_steps(),
                aux.num_units());
  }

  std::vector<RunStats> runs;
  const bool several = opt.presets.size() > 1;
  try {
    for (const auto& p : opt.presets) runs.push_back(run_one(trace, opt.aux.empty() ? nullptr : &aux, p, opt, several));
  } catch (const replay::UsageError& e) {
    std::fprintf(stderr, "gnmr-replay: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gnmr-replay: %s\n", e.what());
    return 1;
  }
  replay::print_summary(runs, opt.top);
  std::fflush(stdout);
  try {
    if (!opt.summary.empty()) replay::write_summary_csv(opt.summary, runs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gnmr-replay: %s\n", e.what());
    return 1;
  }
  return 0;
}
