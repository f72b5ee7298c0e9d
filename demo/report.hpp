// demo/report.hpp — what the legacy comparison (--controllers) makes of its
// runs: the stdout table, steps.csv / summary.csv / trace_<ctrl>.csv, and a
// gnuplot picture (loss curves with recoveries marked, and the per-unit
// GNMR ratio heat map of the gnmr run). The metrics are metrics.hpp's.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "gnmr/io/trace.hpp"

#include "metrics.hpp"
#include "train.hpp"

namespace demo {

inline std::string num(double v, int prec = 4) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  std::ostringstream s;
  s << std::setprecision(prec) << std::fixed << v;
  return s.str();
}

// baseline: the unstressed reference's final val loss (NaN if not run).
inline void print_table(std::ostream& os, const std::vector<RunResult>& runs, double baseline) {
  os << std::left << std::setw(20) << "controller" << std::right << std::setw(8) << "units"
     << std::setw(11) << "train" << std::setw(10) << "val" << std::setw(11) << "val/unstr"
     << std::setw(8) << "spikes" << std::setw(9) << "diverged" << std::setw(10) << "recov%"
     << std::setw(12) << "maxrec/maxO" << std::setw(10) << "ctrl ms" << std::setw(10) << "step ms"
     << std::setw(8) << "share" << "\n";
  for (const auto& r : runs) {
    const Metrics m = metrics_of(r, 0, false);
    const std::string lim =
        r.max_in_recovery_limit == 0xffffffffu ? "inf" : std::to_string(r.max_in_recovery_limit);
    os << std::left << std::setw(20) << r.label << std::right << std::setw(8) << r.controller_units
       << std::setw(11) << num(r.final_train) << std::setw(10) << num(r.final_val) << std::setw(11)
       << num(r.final_val / baseline, 3) << std::setw(8) << m.spikes << std::setw(9)
       << (m.diverged ? "yes" : "no") << std::setw(10) << num(100.0 * m.recovered_fraction, 2)
       << std::setw(12) << (std::to_string(m.max_in_recovery) + "/" + lim) << std::setw(10)
       << num(m.control_ms, 3) << std::setw(10) << num(m.step_ms, 2) << std::setw(7)
       << num(100.0 * m.control_ms / m.step_ms, 2) << "%\n";
  }
}

inline void write_summary_csv(const std::string& path, const std::vector<RunResult>& runs) {
  std::ofstream f(path);
  f << "controller,final_train_loss,final_val_loss,spikes,diverged,recovered_fraction,"
       "max_in_recovery,control_ms_per_step\n";
  for (const auto& r : runs) {
    const Metrics m = metrics_of(r, 0, false);
    f << r.label << ',' << num(r.final_train, 6) << ',' << num(r.final_val, 6) << ',' << m.spikes
      << ',' << (m.diverged ? 1 : 0) << ',' << num(m.recovered_fraction, 6) << ','
      << m.max_in_recovery << ',' << num(m.control_ms, 6) << '\n';
  }
}

inline void write_steps_csv(const std::string& path, const std::vector<RunResult>& runs) {
  std::ofstream f(path);
  f << "controller,step,lr,train_loss,val_loss,n_triggered,n_granted,n_in_recovery,n_denied,"
       "n_nonfinite,skip_step,n_skipped_units,n_reset_units,fault_unit,fault,control_ms,step_ms\n";
  for (const auto& r : runs)
    for (const auto& s : r.rows) {
      f << r.label << ',' << s.step << ',' << num(s.lr, 8) << ',' << num(s.train_loss, 6) << ','
        << (std::isnan(s.val_loss) ? std::string() : num(s.val_loss, 6)) << ',' << s.triggered
        << ',' << s.granted << ',' << s.in_recovery << ',' << s.denied << ',' << s.nonfinite << ','
        << s.skip_step << ',' << s.skipped_units << ',' << s.reset_units << ','
        << (s.fault_unit >= 0 ? std::to_string(s.fault_unit) : std::string()) << ',' << s.fault
        << ',' << num(s.control_ms, 4) << ',' << num(s.step_ms, 3) << '\n';
    }
}

// The replay trace (gnmr/io/trace.hpp): header step,<unit names>, one row of
// per-unit norms per step, readable by read_trace() / gnmr-replay.
inline void write_trace_csv(const std::string& path, const RunResult& r) {
  std::ofstream f(path);
  const std::vector<std::string> names = r.controller_units == r.unit_names.size()
                                             ? r.unit_names
                                             : std::vector<std::string>{"global"};
  gnmr::TraceWriter w(f, names);
  for (std::size_t s = 0; s < r.norms.size(); ++s)
    w.write(r.rows[s].step, r.norms[s].data(), r.norms[s].size());
}

inline bool have_gnuplot() { return std::system("gnuplot -e 'exit' >/dev/null 2>&1") == 0; }

// Writes loss.dat, heat.dat, marks.dat and demo.gp under out/, runs gnuplot
// and returns the PNG path ("" when gnuplot is missing or fails).
inline std::string plot(const std::string& out, const std::vector<RunResult>& runs,
                        const RunResult* heat, const std::string& title) {
  namespace fs = std::filesystem;
  double ymax = 0;
  {
    std::ofstream f(out + "/loss.dat");
    for (const auto& r : runs) {
      f << "# " << r.label << "\n";
      double ema = NAN;
      for (const auto& s : r.rows) {  // EMA(0.9) of the train loss: readable curves
        ema = std::isnan(ema) ? s.train_loss : 0.9 * ema + 0.1 * s.train_loss;
        f << s.step << ' ' << num(s.train_loss, 5) << ' ' << num(ema, 5) << ' '
          << (s.granted ? num(ema, 5) : "nan") << '\n';
      }
      f << "\n\n";
      if (std::isfinite(r.initial_loss)) ymax = std::max(ymax, 1.15 * r.initial_loss);
    }
  }
  std::ofstream gp(out + "/demo.gp");
  gp << "set terminal pngcairo size 1200,1000 font ',10'\nset output '" << out << "/demo.png'\n"
     << "set datafile missing 'nan'\nset multiplot layout 2,1 title \"" << title << "\"\n"
     << "set key outside right\nset xlabel 'step'\nset ylabel 'train loss (EMA 0.9)'\n"
     << "set xrange [0:" << (runs.empty() ? 1 : runs[0].rows.size()) << "]\nset yrange [*:" << num(ymax > 0 ? ymax : 6.0, 2) << "]\nset grid\n";
  // Distinct colours for up to 10 runs; gnmr thick black, the unstressed
  // reference dashed grey.
  static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                  "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#7f7f7f"};
  gp << "plot ";
  for (std::size_t i = 0, c = 0; i < runs.size(); ++i) {
    std::string style;
    if (runs[i].controller == "gnmr") style = "lw 2.5 lc rgb 'black'";
    else if (runs[i].label.rfind("unstressed", 0) == 0) style = "lw 2 dt 2 lc rgb '#777777'";
    else style = std::string("lw 1.5 lc rgb '") + kColors[c++ % 10] + "'";
    gp << (i ? ", \\\n  " : "") << "'" << out << "/loss.dat' index " << i
       << " using 1:3 with lines " << style << " title '" << runs[i].label << "'";
  }
  for (std::size_t i = 0; i < runs.size(); ++i)
    if (runs[i].controller == "gnmr")
      gp << ", \\\n  '" << out << "/loss.dat' index " << i
         << " using 1:4 with points pt 7 ps 0.7 lc rgb 'red' title '" << runs[i].label
         << ": grant'";
  gp << "\n";
  if (heat && !heat->ratios.empty()) {
    std::ofstream h(out + "/heat.dat"), mk(out + "/marks.dat");
    for (std::size_t s = 0; s < heat->ratios.size(); ++s) {
      for (std::size_t u = 0; u < heat->ratios[s].size(); ++u) {
        const float r = heat->ratios[s][u];
        // Undefined (warm-up) and non-finite ratios are drawn as the floor:
        // an image plot needs every cell.
        const double l = (r > 0 && std::isfinite(r)) ? std::clamp(std::log10(static_cast<double>(r)), -1.0, 2.0) : -1.0;
        h << heat->rows[s].step << ' ' << u << ' ' << num(l, 4) << '\n';
      }
      h << '\n';
    }
    // Faults (x) and grants (o) per unit, from the controller's reports.
    for (std::size_t s = 0; s < heat->rows.size() && s < heat->granted_units.size(); ++s) {
      for (auto u : heat->granted_units[s]) mk << heat->rows[s].step << ' ' << u << " 1\n";
      if (heat->rows[s].fault_unit >= 0) mk << heat->rows[s].step << ' ' << heat->rows[s].fault_unit << " 0\n";
    }
    gp << "unset grid\nset key off\nset ylabel ''\nset autoscale y\nset yrange [-0.5:"
       << heat->ratios[0].size() - 0.5 << "]\nset cbrange [-1:2]\nset cblabel 'log10 GNMR ratio'\n"
       << "set palette defined (-1 'white', 0 '#d0e4f5', 0.477 '#fdd49e', 1 '#e34a33', 2 '#7f0000')\n"
       << "set ytics (";
    for (std::size_t u = 0; u < heat->unit_names.size() && heat->ratios[0].size() > 1; ++u)
      gp << (u ? ", " : "") << "'" << heat->unit_names[u] << "' " << u;
    gp << ") font ',7'\nset title '" << heat->label
       << ": per-unit GNMR ratio (o = recovery granted, x = injected fault)'\n"
       << "plot '" << out << "/heat.dat' using 1:2:3 with image, \\\n  '" << out
       << "/marks.dat' using 1:($3==1?$2:1/0) with points pt 6 ps 0.9 lc rgb 'black', \\\n  '"
       << out << "/marks.dat' using 1:($3==0?$2:1/0) with points pt 2 ps 1.1 lc rgb 'blue'\n";
  }
  gp << "unset multiplot\n";
  gp.close();
  if (!have_gnuplot()) return "";
  const std::string cmd = "gnuplot '" + out + "/demo.gp' 2>'" + out + "/gnuplot.log'";
  if (std::system(cmd.c_str()) != 0 || !fs::exists(out + "/demo.png")) return "";
  return out + "/demo.png";
}

}  // namespace demo
