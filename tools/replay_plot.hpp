// tools/replay_plot.hpp — gnmr-replay's picture: what a controller did.
//
// PlotData keeps a bounded summary of a run while it streams (at most
// kBuckets columns: each holds the max over its steps, so a one-step spike
// stays visible in a million-step trace), and write_png() hands it to
// gnuplot (Debian: gnuplot-nox) as three stacked panels:
//   1. the ratio of the few most-triggered units over time, grants marked;
//   2. a heat map of every unit's ratio (log colour), grants and
//      non-finite norms marked;
//   3. units in recovery and units triggered per step, with the maxO line
//      and the systemic steps marked (gnmr/step/systemic.hpp).
// Presets without a mean (none, clip, stabilizer) have no meaningful ratio,
// so their panels show the norm instead.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gnmr/core/types.hpp"

namespace replay {

class PlotData {
 public:
  static constexpr std::size_t kBuckets = 1000;  // < the plot's width in pixels: no column dropped
  static constexpr std::size_t kMaxMarks = 40000;
  static constexpr std::size_t kLines = 5;

  PlotData(std::size_t units, std::size_t steps, std::int64_t first, std::int64_t last,
           bool show_norm)
      : units_(units),
        steps_(steps),
        buckets_(std::max<std::size_t>(1, std::min(steps, kBuckets))),
        first_(first),
        last_(last),
        show_norm_(show_norm),
        val_(units * buckets_, 0.0f),
        in_rec_(buckets_, 0),
        trig_(buckets_, 0),
        systemic_(buckets_, 0),
        unit_trig_(units, 0),
        unit_grant_(units, 0) {}

  void add(std::size_t index, std::int64_t step, const gnmr::StepSummary& s,
           const gnmr::UnitReport* r) {
    const std::size_t b = index * buckets_ / steps_;
    in_rec_[b] = std::max(in_rec_[b], s.in_recovery);
    trig_[b] = std::max(trig_[b], s.triggered);
    // The most triggered units among the bucket's systemic steps (0: none).
    if (s.systemic) systemic_[b] = std::max(systemic_[b], s.triggered);
    for (std::size_t u = 0; u < units_; ++u) {
      const std::uint32_t f = r[u].flags;
      const float v = value(r[u]);
      float& cell = val_[u * buckets_ + b];
      if (std::isfinite(v) && v > cell) cell = v;
      if (f & gnmr::kTriggered) ++unit_trig_[u];
      if (f & gnmr::kGranted) {
        ++unit_grant_[u];
        if (grants_.size() < kMaxMarks) grants_.push_back({step, u, v});
      }
      if ((f & gnmr::kNonFinite) && nonfinite_.size() < kMaxMarks) nonfinite_.push_back({step, u, 0});
    }
  }

  // Renders the PNG; throws std::runtime_error with gnuplot's complaint.
  void write_png(const std::string& png, const std::string& title,
                 const std::vector<std::string>& names, std::uint32_t max_o) const {
    char tmpl[] = "/tmp/gnmr-replay.XXXXXX";
    if (!mkdtemp(tmpl)) throw std::runtime_error("cannot create a temporary directory for gnuplot");
    const std::string dir = tmpl;
    const std::vector<std::size_t> top = top_units();
    write_data(dir, top);
    const std::string script = dir + "/plot.gp";
    write_script(script, dir, png, title, names, top, max_o);
    const std::string log = dir + "/gnuplot.log";
    const int rc = std::system(("gnuplot " + quote(script) + " > " + quote(log) + " 2>&1").c_str());
    std::string msg;
    if (rc != 0) msg = read_tail(log);
    for (const char* f : {"heat.dat", "lines.dat", "grants.dat", "grants_top.dat", "nonfinite.dat",
                          "counts.dat", "plot.gp", "gnuplot.log"})
      std::remove((dir + "/" + f).c_str());
    rmdir(dir.c_str());
    if (rc != 0) {
      const bool missing = WIFEXITED(rc) && WEXITSTATUS(rc) == 127;
      throw std::runtime_error(missing ? "gnuplot not found: install it (Debian: apt-get install "
                                         "gnuplot-nox) or drop --plot"
                                       : "gnuplot failed: " + msg);
    }
    struct stat st {};
    if (stat(png.c_str(), &st) != 0 || st.st_size == 0)
      throw std::runtime_error("gnuplot wrote no image to '" + png + "'");
  }

 private:
  struct Mark {
    std::int64_t step;
    std::size_t unit;
    float v;
  };

  float value(const gnmr::UnitReport& r) const { return show_norm_ ? r.norm : r.ratio; }
  double x_of(std::size_t b) const {
    const double span = static_cast<double>(last_ - first_ + 1);
    return static_cast<double>(first_) + (static_cast<double>(b) + 0.5) * span / static_cast<double>(buckets_);
  }

  // The most-triggered units (then most granted, then lowest index); with
  // no trigger at all, the units with the largest value.
  std::vector<std::size_t> top_units() const {
    std::vector<std::size_t> idx(units_);
    std::vector<float> peak(units_, 0.0f);
    for (std::size_t u = 0; u < units_; ++u) {
      idx[u] = u;
      for (std::size_t b = 0; b < buckets_; ++b) peak[u] = std::max(peak[u], val_[u * buckets_ + b]);
    }
    std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
      if (unit_trig_[a] != unit_trig_[b]) return unit_trig_[a] > unit_trig_[b];
      if (unit_grant_[a] != unit_grant_[b]) return unit_grant_[a] > unit_grant_[b];
      return peak[a] > peak[b];
    });
    idx.resize(std::min(kLines, units_));
    return idx;
  }

  float floor_value() const {
    float hi = 0.0f;
    for (float v : val_) hi = std::max(hi, v);
    if (!show_norm_) return 0.05f;
    return hi > 0.0f ? hi * 1e-6f : 1e-6f;
  }

  static FILE* open(const std::string& path) {
    FILE* f = std::fopen(path.c_str(), "w");
    if (!f) throw std::runtime_error("cannot write '" + path + "'");
    return f;
  }

  void write_data(const std::string& dir, const std::vector<std::size_t>& top) const {
    const float lo = floor_value();
    FILE* f = open(dir + "/heat.dat");
    for (std::size_t u = 0; u < units_; ++u) {
      for (std::size_t b = 0; b < buckets_; ++b)
        std::fprintf(f, b ? " %.6g" : "%.6g", static_cast<double>(std::max(val_[u * buckets_ + b], lo)));
      std::fputc('\n', f);
    }
    std::fclose(f);
    f = open(dir + "/lines.dat");
    for (std::size_t b = 0; b < buckets_; ++b) {
      std::fprintf(f, "%.10g", x_of(b));
      for (std::size_t u : top) {
        const float v = val_[u * buckets_ + b];
        if (v > 0.0f)
          std::fprintf(f, " %.6g", static_cast<double>(v));
        else
          std::fputs(" NaN", f);
      }
      std::fputc('\n', f);
    }
    std::fclose(f);
    FILE* g = open(dir + "/grants.dat");
    FILE* gt = open(dir + "/grants_top.dat");
    std::fputs("# step unit value\n", g);
    std::fputs("# step value\n", gt);
    for (const Mark& m : grants_) {
      std::fprintf(g, "%lld %zu\n", static_cast<long long>(m.step), m.unit);
      if (std::find(top.begin(), top.end(), m.unit) != top.end() && m.v > 0.0f)
        std::fprintf(gt, "%lld %.6g\n", static_cast<long long>(m.step), static_cast<double>(m.v));
    }
    std::fclose(g);
    std::fclose(gt);
    f = open(dir + "/nonfinite.dat");
    std::fputs("# step unit\n", f);
    for (const Mark& m : nonfinite_) std::fprintf(f, "%lld %zu\n", static_cast<long long>(m.step), m.unit);
    std::fclose(f);
    f = open(dir + "/counts.dat");
    for (std::size_t b = 0; b < buckets_; ++b) {
      std::fprintf(f, "%.10g %u %u ", x_of(b), in_rec_[b], trig_[b]);
      if (systemic_[b])
        std::fprintf(f, "%u\n", systemic_[b]);
      else
        std::fprintf(f, "NaN\n");
    }
    std::fclose(f);
  }

  // A gnuplot double-quoted string.
  static std::string gq(const std::string& s) {
    std::string o = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') o += '\\';
      if (static_cast<unsigned char>(c) >= 0x20) o += c;
    }
    return o + "\"";
  }
  // A shell single-quoted word.
  static std::string quote(const std::string& s) {
    std::string o = "'";
    for (char c : s) o += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return o + "'";
  }
  static std::string read_tail(const std::string& path) {
    std::string s;
    if (FILE* f = std::fopen(path.c_str(), "r")) {
      char buf[4096];
      std::size_t k;
      while ((k = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, k);
      std::fclose(f);
    }
    if (s.size() > 2000) s = "..." + s.substr(s.size() - 2000);
    return s;
  }

  void write_script(const std::string& path, const std::string& dir, const std::string& png,
                    const std::string& title, const std::vector<std::string>& names,
                    const std::vector<std::size_t>& top, std::uint32_t max_o) const {
    const std::string what = show_norm_ ? "norm" : "ratio";
    float hi = floor_value() * 10.0f;
    for (float v : val_) hi = std::max(hi, v);
    std::string s;
    s += "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
         "  set terminal pngcairo size 1400,1050 font ',10' noenhanced\n"
         "} else {\n"
         "  set terminal png size 1400,1050 noenhanced\n"
         "}\n";
    s += "set output " + gq(png) + "\n";
    s += "set datafile missing 'NaN'\n";
    s += "set multiplot layout 3,1 title " + gq(title) + "\n";
    s += "set lmargin at screen 0.07\nset rmargin at screen 0.86\n";
    s += "set xrange [" + std::to_string(first_) + ":" + std::to_string(last_ + 1) + "]\n";
    s += "set grid\nset key outside right top\n";
    // Panel 1.
    s += "set title " + gq(what + " of the " + std::to_string(top.size()) +
                           " most-triggered units (max per " + bucket_text() + "), grants marked") + "\n";
    s += "set logscale y\nset ylabel " + gq(what) + "\n";
    s += "plot ";
    for (std::size_t k = 0; k < top.size(); ++k)
      s += gq(dir + "/lines.dat") + " using 1:" + std::to_string(k + 2) + " with lines lw 1.2 title " +
           gq(names[top[k]]) + ", ";
    s += gq(dir + "/grants_top.dat") + " using 1:2 with points pt 7 ps 0.8 lc rgb 'red' title 'grant'\n";
    // Panel 2.
    s += "unset logscale y\nset grid noxtics noytics\n";
    s += "set title " + gq("every unit's " + what + " (log colour), grants o, non-finite x") + "\n";
    s += "set ylabel 'unit'\nset yrange [-0.5:" + std::to_string(units_) + "-0.5]\n";
    s += "unset key\n";  // the title names the markers
    if (units_ <= 40) {  // few enough to name every row
      s += "set ytics (";
      for (std::size_t u = 0; u < units_; ++u)
        s += (u ? ", " : "") + gq(names[u]) + " " + std::to_string(u);
      s += ") font ',8'\nunset ylabel\n";
    }
    s += "set logscale cb\nset cbrange [" + num(floor_value()) + ":" + num(hi) + "]\n";
    s += "set palette rgb 33,13,10\n";
    const double dx = static_cast<double>(last_ - first_ + 1) / static_cast<double>(buckets_);
    s += "plot " + gq(dir + "/heat.dat") + " matrix using (" + num(static_cast<double>(first_)) + "+($1+0.5)*" +
         num(dx) + "):2:3 with image notitle, " + gq(dir + "/grants.dat") +
         " using 1:2 with points pt 6 ps 0.6 lc rgb 'black' title 'grant', " + gq(dir + "/nonfinite.dat") +
         " using 1:2 with points pt 2 ps 0.6 lc rgb 'magenta' title 'non-finite'\n";
    // Panel 3.
    s += "unset logscale cb\nset grid\nset autoscale y\nset yrange [0:*]\nset xlabel 'step'\n";
    s += "set ytics autofreq font ''\nset key outside right top\n";
    s += "set ylabel 'units'\nset title " +
         gq("units in recovery and triggered (max per " + bucket_text() + "), systemic steps marked") + "\n";
    s += "plot " + gq(dir + "/counts.dat") + " using 1:2 with steps lw 1.5 title 'in recovery', " +
         gq(dir + "/counts.dat") + " using 1:3 with steps title 'triggered', " + gq(dir + "/counts.dat") +
         " using 1:4 with points pt 9 ps 1.0 lc rgb 'dark-orange' title 'systemic step'";
    if (max_o != 0xffffffffu) s += ", " + std::to_string(max_o) + " with lines dt 2 lc rgb 'gray' title 'maxO'";
    s += "\nunset multiplot\n";
    FILE* f = open(path);
    std::fputs(s.c_str(), f);
    std::fclose(f);
  }

  std::string bucket_text() const {
    return steps_ > buckets_ ? std::to_string((steps_ + buckets_ - 1) / buckets_) + " steps" : "step";
  }
  static std::string num(double v) {
    char b[64];
    std::snprintf(b, sizeof b, "%.9g", v);
    return b;
  }

  std::size_t units_, steps_, buckets_;
  std::int64_t first_, last_;
  bool show_norm_;
  std::vector<float> val_;  // units x buckets, max per bucket
  std::vector<std::uint32_t> in_rec_, trig_, systemic_;
  std::vector<std::uint64_t> unit_trig_, unit_grant_;
  std::vector<Mark> grants_, nonfinite_;
};

}  // namespace replay
