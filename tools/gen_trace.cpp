// tools/gen_trace.cpp — gnmr-gen-trace: a synthetic per-unit norm trace.
//
// For trying gnmr-replay without a training run of one's own (the worked
// example in docs/tuning.md, the replay tool's tests). The shape mimics a
// transformer's per-tensor gradient norms: embed, attn and mlp per layer,
// head; norms high during the first steps and decaying, with multiplicative
// noise (heavier for embed and head, and for everyone in the first few
// dozen steps) and a slow wander. Mixed in, at
// seeded-random places:
//   - isolated spikes (x1.5 .. x40, log-uniform) anywhere, at --spike-rate
//     per unit-step;
//   - one unstable unit (h.<L/2>.attn) with three clusters of repeated spikes;
//   - one burst where a third of the units spike on the same step;
//   - one unit drifting up x3 over a few hundred steps (not a spike);
//   - a few NaN and +inf cells.
// Output: the trace CSV of gnmr/io/trace.hpp (stdout or --out FILE).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gnmr/io/trace.hpp"

namespace {

struct Args {
  std::int64_t steps = 3000;
  int layers = 8;
  std::uint64_t seed = 1;
  double spike_rate = 4e-4;
  std::string out;
};

[[noreturn]] void usage(int rc) {
  std::fputs(
      "usage: gnmr-gen-trace [--steps N] [--layers L] [--seed S] [--spike-rate P] [--out FILE]\n"
      "Writes a synthetic trace of per-unit gradient norms (2L+2 units) with spikes,\n"
      "a burst, an unstable unit, a drift and a few NaN/Inf cells. Defaults: 3000 steps,\n"
      "8 layers, seed 1, spike rate 4e-4 per unit-step, stdout.\n",
      rc ? stderr : stdout);
  std::exit(rc);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--help" || k == "-h") usage(0);
    if (i + 1 >= argc) usage(2);
    const char* v = argv[++i];
    if (k == "--out") {
      a.out = v;
      continue;
    }
    char* end = nullptr;
    if (k == "--steps") a.steps = std::strtoll(v, &end, 10);
    else if (k == "--layers") a.layers = static_cast<int>(std::strtol(v, &end, 10));
    else if (k == "--seed") a.seed = std::strtoull(v, &end, 10);
    else if (k == "--spike-rate") a.spike_rate = std::strtod(v, &end);
    else usage(2);
    if (end == v || *end != '\0') {
      std::fprintf(stderr, "gnmr-gen-trace: bad value '%s' for %s\n", v, k.c_str());
      std::exit(2);
    }
  }
  if (a.steps < 1 || a.layers < 1 || a.layers > 10000 || a.spike_rate < 0) usage(2);
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  std::vector<std::string> names{"embed"};
  for (int l = 0; l < a.layers; ++l) {
    names.push_back("h." + std::to_string(l) + ".attn");
    names.push_back("h." + std::to_string(l) + ".mlp");
  }
  names.push_back("head");
  const std::size_t n = names.size();

  std::mt19937_64 rng(a.seed);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  std::normal_distribution<double> gauss(0.0, 1.0);
  std::vector<double> base(n), wander(n, 0.0);
  for (std::size_t i = 0; i < n; ++i) base[i] = 0.2 + 1.3 * uni(rng);

  const double T = static_cast<double>(a.steps);
  const std::size_t unstable = 1 + 2 * static_cast<std::size_t>(a.layers / 2);  // h.<L/2>.attn
  const std::size_t drifter = 2 + 2 * static_cast<std::size_t>(a.layers / 4);   // h.<L/4>.mlp
  const std::int64_t burst_at = static_cast<std::int64_t>(0.6 * T);
  const std::int64_t drift_from = static_cast<std::int64_t>(0.3 * T);
  const std::int64_t drift_len = std::max<std::int64_t>(50, a.steps / 6);
  std::int64_t cluster_at[3];
  for (int c = 0; c < 3; ++c) cluster_at[c] = static_cast<std::int64_t>((0.2 + 0.3 * c + 0.1 * uni(rng)) * T);
  std::int64_t nan_at[3];
  for (auto& s : nan_at) s = 1 + static_cast<std::int64_t>(uni(rng) * (T - 1));

  std::ofstream file;
  if (!a.out.empty()) {
    file.open(a.out);
    if (!file) {
      std::fprintf(stderr, "gnmr-gen-trace: cannot write '%s'\n", a.out.c_str());
      return 1;
    }
  }
  std::ostream& os = a.out.empty() ? std::cout : file;
  gnmr::TraceWriter w(os, names);
  std::vector<float> row(n);
  for (std::int64_t t = 1; t <= a.steps; ++t) {
    const double td = static_cast<double>(t);
    const double shape = (0.4 + 0.6 * std::exp(-td / (0.25 * T + 1.0))) * (1.0 + 2.0 * std::exp(-td / 20.0));
    for (std::size_t i = 0; i < n; ++i) {
      wander[i] = 0.995 * wander[i] + 0.01 * gauss(rng);
      // embed and head are noisier than the blocks (sparse token gradients).
      // The first few dozen steps are erratic everywhere (fresh weights).
      const double sigma = ((i == 0 || i + 1 == n) ? 0.35 : 0.08) + 0.5 * std::exp(-td / 15.0);
      double v = base[i] * shape * std::exp(sigma * gauss(rng) + wander[i]);
      if (i == drifter && t > drift_from)
        v *= 1.0 + 2.0 * std::min(1.0, static_cast<double>(t - drift_from) / static_cast<double>(drift_len));
      // Log-uniform in [1.5, 40]: mild spikes as often as wild ones, so the
      // choice of tau and delta matters.
      if (uni(rng) < a.spike_rate) v *= std::exp(std::log(1.5) + uni(rng) * std::log(40.0 / 1.5));
      if (i == unstable)
        for (std::int64_t c : cluster_at)
          if (t >= c && t < c + 40 && uni(rng) < 0.2) v *= 3.0 + 12.0 * uni(rng);
      if (t == burst_at && i % 3 == 0) v *= 5.0 + 15.0 * uni(rng);
      row[i] = static_cast<float>(v);
    }
    for (int k = 0; k < 3; ++k)
      if (t == nan_at[k]) row[(static_cast<std::size_t>(k) * 7 + 3) % n] =
          k == 2 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
    w.write(t, row);
  }
  w.flush();
  if (!os) {
    std::fprintf(stderr, "gnmr-gen-trace: write failed\n");
    return 1;
  }
  return 0;
}
