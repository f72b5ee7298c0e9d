// tools/denied_study.cpp — gnmr-denied-study: the replay behind the
// denied-unit rule (docs/algorithm.md, "Denied units").
//
// Issue 11 asks which answer a spiking unit should get when every slot is
// held: (i) preemption — a triggered unit whose risk exceeds a held unit's
// by a margin takes that unit's slot, the held unit released early — or
// (ii) a clip to kappa * mu without a slot (ControllerOptions::denied). This
// program replays recorded traces under three policy sets (GNMR's default,
// GNMR with maxO 2, a z-score trigger with maxO 2) and each rule, and counts
// per run the unit-steps past warm-up whose ratio r = n / mu is large
// (>= 3, >= 10, >= 30) and that pass unclipped (scale 1, no skip), and the
// unit-steps acted on (scale < 1 or skip). Rule (ii) is the library's own
// (GnmrController with the option set); rule (i) is prototyped here, on the
// library's per-unit functors with a selection of its own, since the library
// does not carry it (the replay decided against it).
//
//   gnmr-denied-study TRACE.csv [TRACE.csv ...]
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gnmr/host/controller.hpp"
#include "gnmr/io/trace.hpp"
#include "gnmr/policy/mean_peers.hpp"
#include "gnmr/policy/trigger_zscore.hpp"

namespace {

struct Counts {
  std::uint64_t big[3] = {0, 0, 0};     // unit-steps with r >= 3, 10, 30
  std::uint64_t passed[3] = {0, 0, 0};  // ... that passed unclipped
  std::uint64_t acted = 0, grants = 0, denials = 0, preemptions = 0;
  void add(const Counts& o) {
    for (int k = 0; k < 3; ++k) {
      big[k] += o.big[k];
      passed[k] += o.passed[k];
    }
    acted += o.acted;
    grants += o.grants;
    denials += o.denials;
    preemptions += o.preemptions;
  }
};

constexpr float kBig[3] = {3.0f, 10.0f, 30.0f};

void count_step(Counts& c, const gnmr::UnitReport* rep, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const gnmr::UnitReport& r = rep[i];
    if (r.flags & (gnmr::kNonFinite | gnmr::kZeroNorm)) continue;
    const bool acted = (r.flags & gnmr::kSkip) || r.scale < 1.0f;
    c.acted += acted ? 1 : 0;
    c.grants += (r.flags & gnmr::kGranted) ? 1 : 0;
    c.denials += (r.flags & gnmr::kDenied) ? 1 : 0;
    if (r.flags & gnmr::kWarmup) continue;
    for (int k = 0; k < 3; ++k)
      if (r.ratio >= kBig[k]) {
        ++c.big[k];
        c.passed[k] += acted ? 0 : 1;
      }
  }
}

// Rule (i), prototyped: the library's evaluate/commit functors, a selection
// that may preempt. Units keep their lock arithmetic (granted_at); a
// preempted unit gets granted_at = t - lock, i.e. it is released at t.
template <class PS>
Counts run_preempt(const PS& p, const gnmr::Trace& tr, float margin) {
  const std::size_t n = tr.num_units();
  std::vector<typename PS::UnitState> st(n, PS::init_unit());
  std::vector<gnmr::UnitView> v(n);
  std::vector<gnmr::UnitReport> rep(n);
  std::vector<gnmr::UnitDecision> dec(n);
  std::vector<char> grant(n);
  Counts c;
  const std::uint32_t slots = p.budget.slots();
  for (std::size_t s = 0; s < tr.num_steps(); ++s) {
    const std::int64_t t = static_cast<std::int64_t>(s) + 1;
    const float* row = tr.row(s);
    std::vector<std::uint32_t> cand, held;
    for (std::uint32_t i = 0; i < n; ++i) {
      v[i] = gnmr::detail::evaluate_unit(p, st[i], row[i], t, i);
      if (gnmr::detail::is_candidate(v[i].flags)) cand.push_back(i);
      if (v[i].flags & gnmr::kInRecovery) held.push_back(i);
    }
    const auto before = [&](std::uint32_t a, std::uint32_t b) {
      return gnmr::detail::ranks_before(v[a].risk, a, v[b].risk, b);
    };
    std::sort(cand.begin(), cand.end(), before);
    std::fill(grant.begin(), grant.end(), 0);
    std::size_t free_slots = held.size() >= slots ? 0 : slots - held.size();
    std::size_t j = 0;
    for (; j < cand.size() && free_slots > 0; ++j, --free_slots) grant[cand[j]] = 1;
    // The lowest-risk holders first (finite ones only: a non-finite holder has
    // risk +inf and is never preempted).
    std::sort(held.begin(), held.end(), [&](std::uint32_t a, std::uint32_t b) { return before(b, a); });
    std::size_t h = 0;
    for (; j < cand.size() && h < held.size(); ++j, ++h) {
      const std::uint32_t x = cand[j], y = held[h];
      if (!(v[x].risk > margin * v[y].risk)) break;  // later pairs are closer still
      st[y].budget.granted_at = t - p.budget.lock;
      v[y] = gnmr::detail::evaluate_unit(p, st[y], row[y], t, y);
      grant[x] = 1;
      ++c.preemptions;
    }
    for (std::uint32_t i = 0; i < n; ++i) {
      std::uint32_t g = 0;
      gnmr::detail::commit_unit(p, st[i], v[i], grant[i] != 0, gnmr::systemic_none(), dec[i], &rep[i], g);
    }
    count_step(c, rep.data(), n);
  }
  return c;
}

template <class Ctl>
Counts run_library(Ctl ctl, const gnmr::Trace& tr) {
  Counts c;
  for (std::size_t s = 0; s < tr.num_steps(); ++s) {
    ctl.step_norms(tr.row(s), tr.num_units());
    count_step(c, ctl.reports().data(), tr.num_units());
  }
  return c;
}

void print_row(const char* config, const char* rule, const Counts& c) {
  std::printf("%-14s %-18s %7llu/%-7llu %6llu/%-6llu %5llu/%-5llu %8llu %7llu %8llu %8llu\n", config, rule,
              static_cast<unsigned long long>(c.passed[0]), static_cast<unsigned long long>(c.big[0]),
              static_cast<unsigned long long>(c.passed[1]), static_cast<unsigned long long>(c.big[1]),
              static_cast<unsigned long long>(c.passed[2]), static_cast<unsigned long long>(c.big[2]),
              static_cast<unsigned long long>(c.acted), static_cast<unsigned long long>(c.grants),
              static_cast<unsigned long long>(c.denials), static_cast<unsigned long long>(c.preemptions));
}

template <class Ctl>
void study(const char* config, const std::vector<gnmr::Trace>& traces, const typename Ctl::Policies& p) {
  Counts base, clip, pre[3];
  const float margins[3] = {1.5f, 2.0f, 4.0f};
  for (const gnmr::Trace& tr : traces) {
    const std::size_t n = tr.num_units();
    base.add(run_library(Ctl(n, p), tr));
    typename Ctl::Policies q = p;
    q.opt.denied.action = gnmr::DeniedAction::kClip;
    clip.add(run_library(Ctl(n, q), tr));
    for (int m = 0; m < 3; ++m) pre[m].add(run_preempt(p, tr, margins[m]));
  }
  print_row(config, "none (today)", base);
  print_row(config, "denied clip k=1", clip);
  const char* names[3] = {"preempt x1.5", "preempt x2", "preempt x4"};
  for (int m = 0; m < 3; ++m) print_row(config, names[m], pre[m]);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s TRACE.csv [TRACE.csv ...]\n", argv[0]);
    return 2;
  }
  std::vector<gnmr::Trace> traces;
  for (int a = 1; a < argc; ++a) {
    std::ifstream in(argv[a]);
    if (!in) {
      std::fprintf(stderr, "cannot open %s\n", argv[a]);
      return 1;
    }
    try {
      traces.push_back(gnmr::read_trace(in));
    } catch (const gnmr::TraceError& e) {
      std::fprintf(stderr, "%s:%zu: %s\n", argv[a], e.line, e.message.c_str());
      return 1;
    }
  }
  std::printf("%zu traces; unit-steps past warm-up with r >= 3 / 10 / 30: passed unclipped / all\n", traces.size());
  std::printf("%-14s %-18s %15s %13s %11s %8s %7s %8s %8s\n", "policies", "rule", "r>=3", "r>=10", "r>=30",
              "acted", "grants", "denials", "preempt");
  using Gnmr = gnmr::GnmrController<>;
  gnmr::MaxO two;
  two.max_o = 2;
  study<Gnmr>("gnmr maxO 4", traces, Gnmr(1).policies());
  study<Gnmr>("gnmr maxO 2", traces, Gnmr(1, {}, {}, {}, {}, two).policies());
  using Z = gnmr::GnmrController<gnmr::L2Norm, gnmr::EmaMeanVar, gnmr::ZScoreTrigger, gnmr::ClipToMean, gnmr::MaxO>;
  study<Z>("zscore maxO 2", traces, Z(1, {}, {}, {}, {}, two).policies());
  std::printf("(acted: unit-steps with scale < 1 or skip; preempt: slots taken from a holder)\n");
  return 0;
}
