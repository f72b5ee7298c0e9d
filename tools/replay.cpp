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

#include "gnmr/dyn.hpp"
#include "gnmr/presets.hpp"
#include "gnmr/telemetry.hpp"
#include "gnmr/trace.hpp"
#include "replay_options.hpp"
#include "replay_plot.hpp"

namespace {

struct UnitStats {
  std::uint64_t grants = 0, triggers = 0, denials = 0, nonfinite = 0;
  float max_ratio = 0.0f, max_norm = 0.0f;
};

struct RunStats {
  std::string preset;
  std::size_t units = 0;
  std::uint64_t steps = 0, triggers = 0, grants = 0, denials = 0, nonfinite = 0, releases = 0,
                global_skips = 0, in_rec_sum = 0, events = 0;
  std::uint32_t max_in_rec = 0;
  bool has_ratio = true;  // false for presets without a mean (the ratio is n / eps)
  std::vector<std::string> names;
  std::vector<UnitStats> per_unit;
  double recovered() const {
    return steps && units ? static_cast<double>(in_rec_sum) / (static_cast<double>(steps) * units) : 0.0;
  }
};

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
  const auto& allowed = gnmr::presets::detail::find_preset(preset).overrides;
  const auto ok = [&](const char* k) {
    if (std::find(allowed.begin(), allowed.end(), k) != allowed.end()) return true;
    dropped.push_back(k);
    return false;
  };
  gnmr::presets::Options r;
#define GNMR_KEEP(field) \
  if (o.field && ok(#field)) r.field = o.field;
  GNMR_KEEP(tau) GNMR_KEEP(delta) GNMR_KEEP(warmup) GNMR_KEEP(window) GNMR_KEEP(delta_window)
  GNMR_KEEP(beta) GNMR_KEEP(max_o) GNMR_KEEP(lock) GNMR_KEEP(cooldown) GNMR_KEEP(kappa)
  GNMR_KEEP(max_norm) GNMR_KEEP(z) GNMR_KEEP(clip_factor) GNMR_KEEP(mean)
#undef GNMR_KEEP
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

RunStats run_one(const gnmr::Trace& t, const std::string& preset, const replay::Options& opt,
                 bool several) {
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

  const bool progress = !opt.quiet && t.num_steps() * t.num_units() > 200000 && t.num_steps() > 5000;
  const bool tty = isatty(2) != 0;
  const std::size_t tick = t.num_steps() / 10;
  float g = 0.0f;
  for (std::size_t s = 0; s < t.num_steps(); ++s) {
    const float* row = t.row(s);
    if (global) {
      g = global_norm(row, t.num_units());
      row = &g;
    }
    const gnmr::StepSummary& sum = c->step_norms(row, st.units);
    const std::vector<gnmr::UnitReport>& rep = c->reports();
    st.triggers += sum.triggered;
    st.grants += sum.granted;
    st.denials += sum.denied;
    st.nonfinite += sum.nonfinite;
    st.releases += sum.released;
    st.global_skips += sum.skip_step;
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
      }
    }
    for (std::size_t u = 0; u < st.units; ++u) {
      UnitStats& us = st.per_unit[u];
      if (std::isfinite(rep[u].ratio)) us.max_ratio = std::max(us.max_ratio, rep[u].ratio);
      if (std::isfinite(rep[u].norm)) us.max_norm = std::max(us.max_norm, rep[u].norm);
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

void print_summary(const std::vector<RunStats>& runs, int top) {
  std::printf("\n%-12s %8s %6s %9s %7s %8s %9s %8s %7s %10s %8s\n", "preset", "steps", "units",
              "triggers", "grants", "denials", "nonfinite", "releases", "gskips", "recovered",
              "max_rec");
  for (const RunStats& r : runs)
    std::printf("%-12s %8llu %6zu %9llu %7llu %8llu %9llu %8llu %7llu %9.3f%% %8u\n",
                r.preset.c_str(), static_cast<unsigned long long>(r.steps), r.units,
                static_cast<unsigned long long>(r.triggers), static_cast<unsigned long long>(r.grants),
                static_cast<unsigned long long>(r.denials), static_cast<unsigned long long>(r.nonfinite),
                static_cast<unsigned long long>(r.releases),
                static_cast<unsigned long long>(r.global_skips), 100.0 * r.recovered(), r.max_in_rec);
  std::printf("(recovered: unit-steps in recovery / (steps x units); max_rec: most units in "
              "recovery at once)\n");
  if (top <= 0) return;
  for (const RunStats& r : runs) {
    std::vector<std::size_t> idx;
    for (std::size_t u = 0; u < r.units; ++u) {
      const UnitStats& s = r.per_unit[u];
      if (s.grants || s.triggers || s.nonfinite) idx.push_back(u);
    }
    std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
      const UnitStats &x = r.per_unit[a], &y = r.per_unit[b];
      if (x.grants != y.grants) return x.grants > y.grants;
      return x.triggers > y.triggers;
    });
    if (idx.size() > static_cast<std::size_t>(top)) idx.resize(static_cast<std::size_t>(top));
    std::printf("\ntop units by grants (%s):\n", r.preset.c_str());
    if (idx.empty()) {
      std::printf("  (no unit triggered or went non-finite)\n");
      continue;
    }
    std::printf("  %-24s %7s %9s %8s %9s %10s %10s\n", "unit", "grants", "triggers", "denials",
                "nonfinite", "max_ratio", "max_norm");
    for (std::size_t u : idx) {
      const UnitStats& s = r.per_unit[u];
      char ratio[32] = "-";
      if (r.has_ratio) std::snprintf(ratio, sizeof ratio, "%.4g", static_cast<double>(s.max_ratio));
      std::printf("  %-24s %7llu %9llu %8llu %9llu %10s %10.4g\n", r.names[u].c_str(),
                  static_cast<unsigned long long>(s.grants), static_cast<unsigned long long>(s.triggers),
                  static_cast<unsigned long long>(s.denials), static_cast<unsigned long long>(s.nonfinite),
                  ratio, static_cast<double>(s.max_norm));
    }
  }
}

void write_summary_csv(const std::string& path, const std::vector<RunStats>& runs) {
  std::ofstream f(path);
  if (!f) throw std::runtime_error("cannot write the summary '" + path + "'");
  f << "preset,steps,units,triggers,grants,denials,nonfinite,releases,global_skips,"
       "recovered_fraction,max_in_recovery,event_lines\n";
  for (const RunStats& r : runs) {
    char frac[32];
    std::snprintf(frac, sizeof frac, "%.9g", r.recovered());
    f << r.preset << ',' << r.steps << ',' << r.units << ',' << r.triggers << ',' << r.grants << ','
      << r.denials << ',' << r.nonfinite << ',' << r.releases << ',' << r.global_skips << ',' << frac
      << ',' << r.max_in_rec << ',' << r.events << '\n';
  }
  f.flush();
  if (!f) throw std::runtime_error("writing the summary '" + path + "' failed");
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

  gnmr::Trace trace;
  {
    std::ifstream in(opt.trace);
    if (!in) {
      std::fprintf(stderr, "gnmr-replay: cannot open trace '%s'\n", opt.trace.c_str());
      return 1;
    }
    try {
      trace = gnmr::read_trace(in);
    } catch (const gnmr::TraceError& e) {
      std::fprintf(stderr, "gnmr-replay: %s:%zu: %s\n", opt.trace.c_str(), e.line, e.message.c_str());
      return 1;
    }
  }
  std::printf("trace %s: %zu steps (%lld..%lld), %zu units\n", opt.trace.c_str(), trace.num_steps(),
              static_cast<long long>(trace.steps.front()), static_cast<long long>(trace.steps.back()),
              trace.num_units());
  for (const auto& p : opt.presets)
    if (gnmr::presets::is_global(p))
      std::printf("note: %s is a global preset: it sees one unit, each row's L2 norm "
                  "sqrt(sum n_i^2) over the %zu units (non-finite if any is)\n",
                  p.c_str(), trace.num_units());

  std::vector<RunStats> runs;
  const bool several = opt.presets.size() > 1;
  try {
    for (const auto& p : opt.presets) runs.push_back(run_one(trace, p, opt, several));
  } catch (const replay::UsageError& e) {
    std::fprintf(stderr, "gnmr-replay: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gnmr-replay: %s\n", e.what());
    return 1;
  }
  print_summary(runs, opt.top);
  std::fflush(stdout);
  try {
    if (!opt.summary.empty()) write_summary_csv(opt.summary, runs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gnmr-replay: %s\n", e.what());
    return 1;
  }
  return 0;
}
