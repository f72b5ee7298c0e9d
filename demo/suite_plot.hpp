// demo/suite_plot.hpp — a suite's picture per scenario, DIR/<scenario>.png
// (gnuplot; its .gp script and data files stay next to it):
//   top: the train loss of every arm (EMA 0.9 of each run, averaged over
//        the seeds), low and high dashed;
//   bottom: gap closed (ratio of mean differences, bar = its 95% bootstrap
//        interval, demo/bootstrap.hpp) against high-precision
//        operator-step share, one labelled point per arm. The share axis is
//        logarithmic; arms with no promoted operator-step sit at 0.05%.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "suite_report.hpp"

namespace demo {

inline bool gnuplot_found() { return std::system("gnuplot -e 'exit' >/dev/null 2>&1") == 0; }

inline std::string plot_scenario(const std::string& out, const std::string& scenario,
                                 const std::vector<SuiteRow>& rows, const std::vector<std::string>& arm_order) {
  const std::string base = out + "/" + scenario;
  std::vector<std::string> arms;
  std::ofstream loss(base + "-loss.dat"), front(base + "-frontier.dat");
  std::map<std::uint64_t, double> low, high;  // seed -> final validation loss
  for (const auto& r : rows) {
    if (r.job->cfg.scenario != scenario) continue;
    if (r.job->cfg.arm.name == "low") low[r.job->cfg.seed] = r.val;
    if (r.job->cfg.arm.name == "high") high[r.job->cfg.seed] = r.val;
  }
  for (const auto& arm : arm_order) {
    std::vector<std::vector<double>> curves;
    std::vector<double> num, den, share;
    for (const auto& r : rows) {
      if (r.job->cfg.scenario != scenario || r.job->cfg.arm.name != arm) continue;
      curves.push_back(series(r.r, "train_loss"));
      const auto seed = r.job->cfg.seed;
      if (low.count(seed) && high.count(seed) && !std::isnan(r.val) && !std::isnan(low[seed]) &&
          !std::isnan(high[seed])) {
        num.push_back(low[seed] - r.val);
        den.push_back(low[seed] - high[seed]);
      }
      share.push_back(field(r.r, "hp_share"));
    }
    if (curves.empty()) continue;
    arms.push_back(arm);
    std::size_t len = 0;
    for (const auto& c : curves) len = std::max(len, c.size());
    loss << "# " << arm << "\n";
    std::vector<double> ema(curves.size(), NAN);
    for (std::size_t t = 0; t < len; ++t) {
      double s = 0;
      int n = 0;
      for (std::size_t k = 0; k < curves.size(); ++k) {
        if (t >= curves[k].size() || !std::isfinite(curves[k][t])) continue;
        ema[k] = std::isnan(ema[k]) ? curves[k][t] : 0.9 * ema[k] + 0.1 * curves[k][t];
        s += ema[k], ++n;
      }
      if (n) loss << t + 1 << ' ' << s / n << '\n';
    }
    loss << "\n\n";
    const Stat h = stat_of(share);
    double g = num.empty() ? NAN : ratio_of_means(num, den);
    const Interval ci = num.empty() ? Interval{} : boot_ratio(num, den);
    if (std::isnan(g)) g = 0;  // no low/high pairs (or no gap): on the axis, as before
    front << '"' << arm << "\" " << std::max(0.05, 100 * (h.n ? h.mean : 0)) << ' ' << g << ' '
          << (std::isnan(ci.lo) ? g : ci.lo) << ' ' << (std::isnan(ci.hi) ? g : ci.hi) << '\n';
  }
  loss.close();
  front.close();
  std::ofstream gp(base + ".gp");
  gp << "set terminal pngcairo size 1200,1000 font ',10'\nset output '" << base << ".png'\n"
     << "set multiplot layout 2,1 title 'gnmr-demo suite: " << scenario << "'\n"
     << "set key outside right\nset grid\nset xlabel 'step'\nset ylabel 'train loss (EMA 0.9, mean over seeds)'\n"
     << "set yrange [*:*]\nplot ";
  static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                                  "#e377c2", "#bcbd22", "#17becf", "#7f7f7f", "#393b79", "#637939"};
  for (std::size_t i = 0, c = 0; i < arms.size(); ++i) {
    std::string style;
    if (arms[i] == "low" || arms[i] == "high") style = std::string("lw 2 dt 2 lc rgb '") + (arms[i] == "low" ? "#d62728'" : "#777777'");
    else if (arms[i] == "gnmr-promote") style = "lw 2.5 lc rgb 'black'";
    else style = std::string("lw 1.3 lc rgb '") + kColors[c++ % 12] + "'";
    gp << (i ? ", \\\n  " : "") << "'" << base << "-loss.dat' index " << i << " using 1:2 with lines " << style
       << " title '" << arms[i] << "'";
  }
  gp << "\nset logscale x\nset xrange [0.03:150]\nset xlabel 'high-precision operator-steps (%, log)'\n"
     << "set ylabel 'gap closed: (L(low) - L(arm)) / (L(low) - L(high))' noenhanced\nset key off\nset yrange [*:*]\n"
     << "plot '" << base << "-frontier.dat' using 2:3:4:5 with yerrorbars pt 7 ps 1.2 lc rgb '#1f77b4', \\\n  '"
     << base << "-frontier.dat' using 2:3:1 with labels offset 1,0.6 left font ',9'\nunset multiplot\n";
  gp.close();
  if (!gnuplot_found()) return "";
  const std::string cmd = "gnuplot '" + base + ".gp' 2>'" + base + "-gnuplot.log'";
  if (std::system(cmd.c_str()) != 0 || !std::filesystem::exists(base + ".png")) return "";
  return base + ".png";
}

}  // namespace demo
