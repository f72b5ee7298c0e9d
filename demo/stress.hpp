// demo/stress.hpp — the injected stressors and their ground truth.
//
// Gradient faults (the grad-faults scenario and the legacy demo): at a step,
// one random unit's gradient is multiplied by a factor (an overflowing
// partial product) or one of its elements becomes NaN or +Inf.
//
// Activation outliers (operator-outliers): an event multiplies a few input
// channels of one random operator by a factor for a few consecutive steps,
// the local, short-lived failure of docs/record/stability.md, Background §1 (sporadic outliers that
// overflow a delayed scale). The operator's delayed amax history then holds
// the outlier's amax for `history` steps: everything else in that tensor is
// quantized against a range up to `factor` times too wide.
//
// Both schedules are drawn once from the seed, from generators of their
// own, so every arm of a comparison meets the same events at the same steps.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "formats.hpp"

namespace demo {

enum class FaultKind : std::uint8_t { kScale, kNan, kMixed };

inline const char* fault_kind_name(FaultKind k) {
  return k == FaultKind::kScale ? "scale" : k == FaultKind::kNan ? "nan" : "mixed";
}
inline FaultKind parse_fault_kind(const std::string& s) {
  static const FaultKind all[] = {FaultKind::kScale, FaultKind::kNan, FaultKind::kMixed};
  return parse_named(s, all, fault_kind_name, "fault kind");
}

struct Fault {
  int unit = -1;  // -1: no fault this step
  bool nonfinite = false;
  std::int64_t element = 0;  // which element becomes NaN/Inf (mod the unit's numel)
  bool inf = false;          // +Inf instead of NaN
};

// One entry per step (index 0 = step 1).
inline std::vector<Fault> fault_schedule(int steps, double rate, FaultKind kind, int num_units,
                                         std::uint64_t seed) {
  if (!(rate >= 0.0 && rate <= 1.0)) throw std::invalid_argument("--fault-rate must be in [0, 1]");
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::uniform_int_distribution<int> unit(0, num_units - 1);
  std::vector<Fault> f(static_cast<std::size_t>(steps));
  for (auto& x : f) {
    const double a = u(rng), b = u(rng), c = u(rng);
    const int un = unit(rng);
    const auto el = static_cast<std::int64_t>(rng() >> 1);
    if (a >= rate) continue;
    x.unit = un;
    x.nonfinite = kind == FaultKind::kNan || (kind == FaultKind::kMixed && b < 0.25);
    x.inf = c < 0.5;
    x.element = el;
  }
  return f;
}

// Applies a fault to one unit's gradient tensors in place: a scale fault
// multiplies all of them, a non-finite one poisons one element of one.
inline void inject(std::vector<torch::Tensor>& grads, const Fault& f, double factor) {
  torch::NoGradGuard ng;
  if (!f.nonfinite) {
    for (auto& g : grads) g.mul_(factor);
    return;
  }
  std::int64_t total = 0;
  for (auto& g : grads) total += g.numel();
  std::int64_t i = f.element % total;
  for (auto& g : grads) {
    if (i < g.numel()) {
      g.view({-1})[i] = f.inf ? INFINITY : NAN;
      return;
    }
    i -= g.numel();
  }
}

struct OutlierConfig {
  double per_100 = 0;           // events per 100 steps (0: none)
  double factor_min = 50, factor_max = 500;  // log-uniform
  int len_min = 1, len_max = 5;  // consecutive steps
  int channels = 4;              // input channels hit
  int first_step = 30;           // no event before (the controllers' warm-up)
};

struct OutlierEvent {
  int op = 0;
  int start = 0, len = 0;  // steps start .. start+len-1
  double factor = 1;
  std::vector<std::int64_t> channels;
};

// round(per_100 * steps / 100) events, at distinct start steps in
// [first_step, steps - len_max], each on a uniformly drawn operator; two
// events on one operator never overlap (a start is redrawn until it fits).
// op_in: each operator's input width.
inline std::vector<OutlierEvent> outlier_schedule(const OutlierConfig& c, int steps,
                                                  const std::vector<std::int64_t>& op_in,
                                                  std::uint64_t seed) {
  std::vector<OutlierEvent> ev;
  const int n = static_cast<int>(std::lround(c.per_100 * steps / 100.0));
  const int last = steps - c.len_max;
  if (n <= 0 || last < c.first_step || op_in.empty()) return ev;
  std::mt19937_64 rng(seed * 0x2545f4914f6cdd1dull + 0x51ed27);
  std::uniform_int_distribution<int> op(0, static_cast<int>(op_in.size()) - 1);
  std::uniform_int_distribution<int> start(c.first_step, last);
  std::uniform_int_distribution<int> len(c.len_min, c.len_max);
  std::uniform_real_distribution<double> lf(std::log(c.factor_min), std::log(c.factor_max));
  for (int k = 0; k < n; ++k) {
    OutlierEvent e;
    e.op = op(rng);
    e.len = len(rng);
    e.factor = std::exp(lf(rng));
    for (int tries = 0;; ++tries) {
      if (tries > 1000) throw std::runtime_error("outlier_schedule: too many events for the run");
      e.start = start(rng);
      bool clash = false;
      for (const auto& o : ev)
        clash = clash || o.start == e.start ||
                (o.op == e.op && e.start < o.start + o.len && o.start < e.start + e.len);
      if (!clash) break;
    }
    const std::int64_t in = op_in[static_cast<std::size_t>(e.op)];
    std::vector<std::int64_t> all(static_cast<std::size_t>(in));
    for (std::int64_t i = 0; i < in; ++i) all[static_cast<std::size_t>(i)] = i;
    std::shuffle(all.begin(), all.end(), rng);
    e.channels.assign(all.begin(), all.begin() + std::min<std::int64_t>(c.channels, in));
    std::sort(e.channels.begin(), e.channels.end());
    ev.push_back(std::move(e));
  }
  std::sort(ev.begin(), ev.end(), [](const OutlierEvent& a, const OutlierEvent& b) { return a.start < b.start; });
  return ev;
}

// The gain vector of op at this step, or an undefined tensor.
inline torch::Tensor outlier_gain(const std::vector<OutlierEvent>& ev, int op, std::int64_t in, int step,
                                  torch::Device dev) {
  for (const auto& e : ev) {
    if (e.op != op || step < e.start || step >= e.start + e.len) continue;
    auto g = torch::ones({in});
    for (auto c : e.channels) g[c] = e.factor;
    return g.to(dev);
  }
  return {};
}

}  // namespace demo
