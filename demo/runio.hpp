// demo/runio.hpp — a suite run's cache entry: its key, and the files it
// leaves in DIR/runs/<key>/ (result.txt, steps.csv, run.log).
//
// The key is FNV-1a 64 of canonical(config) (settings.hpp), which starts
// with kBenchVersion: a run is looked up by everything that determines its
// result. result.txt holds the scalars the suite reports, the per-step
// losses for the pictures, the promotion episodes a dependent arm reads,
// and the canonical config itself, checked on every read so that a hash
// collision or a hand-edited directory is refused rather than reused. An
// entry appears atomically: the run writes into <key>.tmp-<pid> and renames
// it when complete, so an interrupted suite leaves no half entry behind.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "gnmr/detail/fnv.hpp"
#include "gnmr/io/trace.hpp"

#include "metrics.hpp"
#include "settings.hpp"

namespace demo {

inline std::string run_key(const RunConfig& c) {
  const std::string text = canonical(c);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx",
                static_cast<unsigned long long>(gnmr::detail::fnv1a64(text.data(), text.size())));
  return buf;
}

inline std::string opt_num(double v) { return std::isnan(v) ? std::string() : num17(v); }

inline std::string one_line(std::string s) {
  for (auto& ch : s)
    if (ch == '\n') ch = '|';
  return s;
}

// Everything the suite needs from a finished run, as key=value lines.
inline void write_result(const std::string& dir, const RunConfig& c, const RunResult& r, double cpu_s,
                         double wall_s) {
  const bool acts = (c.arm.controller != "none" && !(library_has(c.arm.controller) &&
                                                       gnmr::presets::is_global(c.arm.controller))) ||
                    c.arm.table == Table::kRandom;
  const Metrics m = metrics_of(r, c.detect_k, acts);
  std::ofstream f(dir + "/result.txt");
  f << "# gnmr-demo suite run (demo/runio.hpp)\n";
  f << "key=" << run_key(c) << "\nscenario=" << c.scenario << "\narm=" << c.arm.name << "\nseed=" << c.seed
    << "\nfinal_val_loss=" << opt_num(r.final_val) << "\nfinal_train_loss=" << opt_num(r.final_train)
    << "\nspikes=" << m.spikes << "\nspike_score=" << num17(m.spike_score) << "\ndiverged=" << m.diverged
    << "\nrecovered_fraction=" << num17(m.recovered_fraction) << "\nmax_in_recovery=" << m.max_in_recovery
    << "\nhp_share=" << num17(m.hp_share) << "\nhp_flops_share=" << num17(m.hp_flops_share)
    << "\npromoted_op_steps=" << m.promoted_op_steps << "\ndetect_precision=" << opt_num(m.detect_precision)
    << "\ndetect_recall=" << opt_num(m.detect_recall) << "\nevents=" << r.truth.size()
    << "\nacts=" << r.acts.size() << "\ncontrol_ms=" << num17(m.control_ms) << "\nstep_ms=" << num17(m.step_ms)
    << "\ncpu_s=" << num17(cpu_s) << "\nwall_s=" << num17(wall_s) << "\nsteps_run=" << r.rows.size() << "\n";
  f << "episodes=";
  for (const auto& e : episodes_of(r.masks)) f << e.op << ':' << e.start << ':' << e.len << ';';
  f << "\ntrain_loss=";
  for (const auto& row : r.rows) f << opt_num(row.train_loss) << ';';
  f << "\nval_loss=";
  for (const auto& row : r.rows)
    if (!std::isnan(row.val_loss)) f << row.step << ':' << opt_num(row.val_loss) << ';';
  f << "\nconfig=" << one_line(canonical(c)) << "\n";
  if (!f) throw std::runtime_error("cannot write " + dir + "/result.txt");

  if (!r.snr.empty()) {  // an aux arm's n / a samples: what chooses noise_c on development seeds
    std::ofstream q(dir + "/snr.csv");
    q << "n_over_a\n";
    q.precision(9);
    for (float v : r.snr) q << v << '\n';
    if (!q) throw std::runtime_error("cannot write " + dir + "/snr.csv");
  }
  std::ofstream s(dir + "/steps.csv");
  s << "step,lr,train_loss,val_loss,n_triggered,n_granted,n_in_recovery,n_denied,n_nonfinite,skip_step,"
       "n_skipped_units,n_reset_units,hp_ops,total_norm,recipe_clip_factor,fault_unit,fault,outlier_op,"
       "control_ms,step_ms\n";
  for (const auto& x : r.rows)
    s << x.step << ',' << num17(x.lr) << ',' << opt_num(x.train_loss) << ',' << opt_num(x.val_loss) << ','
      << x.triggered << ',' << x.granted << ',' << x.in_recovery << ',' << x.denied << ',' << x.nonfinite << ','
      << x.skip_step << ',' << x.skipped_units << ',' << x.reset_units << ',' << x.hp_ops << ','
      << num17(x.total_norm) << ',' << num17(x.clip_factor) << ','
      << (x.fault_unit >= 0 ? std::to_string(x.fault_unit) : std::string()) << ',' << x.fault << ','
      << (x.outlier_op >= 0 ? r.op_names[static_cast<std::size_t>(x.outlier_op)] : std::string()) << ','
      << num17(x.control_ms) << ',' << num17(x.step_ms) << '\n';
  if (!r.norms.empty()) {  // the controller's per-unit norms, for gnmr-replay (gnmr/io/trace.hpp)
    std::ofstream t(dir + "/trace.csv");
    gnmr::TraceWriter w(t, r.controller_units == r.unit_names.size() ? r.unit_names
                                                                      : std::vector<std::string>{"global"});
    for (std::size_t k = 0; k < r.norms.size(); ++k) w.write(r.rows[k].step, r.norms[k].data(), r.norms[k].size());
  }
  std::ofstream a(dir + "/events.csv");  // ground truth and acts, by unit name
  a << "kind,step,len,unit\n";
  for (const auto& e : r.truth) a << "event," << e.step << ',' << e.len << ',' << r.unit_names[e.unit] << '\n';
  for (const auto& x : r.acts) a << "act," << x.step << ",1," << r.unit_names[x.unit] << '\n';
}

using Result = std::map<std::string, std::string>;

// Reads DIR/result.txt; throws if it is missing or its config is not `c`'s.
inline Result read_result(const std::string& dir, const RunConfig& c) {
  std::ifstream f(dir + "/result.txt");
  if (!f) throw std::runtime_error("no result in " + dir);
  Result r;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto eq = line.find('=');
    if (eq != std::string::npos) r[line.substr(0, eq)] = line.substr(eq + 1);
  }
  if (r["config"] != one_line(canonical(c)))
    throw std::runtime_error(dir + "/result.txt belongs to another configuration (hash collision or edited)");
  return r;
}

inline double field(const Result& r, const std::string& k) {
  const auto it = r.find(k);
  if (it == r.end() || it->second.empty()) return NAN;
  return std::stod(it->second);
}

inline std::vector<double> series(const Result& r, const std::string& k) {
  std::vector<double> v;
  const auto it = r.find(k);
  if (it == r.end()) return v;
  std::stringstream ss(it->second);
  std::string x;
  while (std::getline(ss, x, ';')) {
    const auto colon = x.find(':');
    const std::string val = colon == std::string::npos ? x : x.substr(colon + 1);
    v.push_back(val.empty() ? NAN : std::stod(val));
  }
  return v;
}

inline std::vector<Episode> episodes_from(const Result& r) {
  std::vector<Episode> ev;
  const auto it = r.find("episodes");
  if (it == r.end()) return ev;
  std::stringstream ss(it->second);
  std::string x;
  while (std::getline(ss, x, ';')) {
    Episode e;
    if (std::sscanf(x.c_str(), "%d:%d:%d", &e.op, &e.start, &e.len) == 3) ev.push_back(e);
  }
  return ev;
}

}  // namespace demo
