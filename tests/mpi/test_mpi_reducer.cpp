// tests/mpi/test_mpi_reducer.cpp — sharded gradients, one MPI collective per
// step, identical decisions everywhere (docs/distributed.md).
//
// Run under mpirun with R ranks (CTest: R = 2 and 4). Every rank holds an
// uneven, contiguous piece of every segment of a random layout (fp32 and
// bf16 segments; a rank may hold nothing of a small segment), computes its
// partials with gnmr::host_unit_partials, reduces them with MpiReducer and
// steps a GnmrController, over a trace with spikes, budget contention and
// NaN/Inf elements in one rank's shard. Checked, for L2, RMS and Linf and
// for both MpiReducer algorithms:
//  (a) every rank's reduced partials, decisions and summaries are
//      bit-identical to rank 0's (gathered to rank 0);
//  (b) a single-process controller fed the same reduced partials takes
//      bit-identical decisions;
//  (b') a single process that computes every rank's shard partials itself
//      and combines them in rank order is bit-identical to kOrderedAllgather
//      (and, for Linf, where max is exact, to kAllreduce too);
//  (c) a single process over the unsharded gradients: partials within a few
//      fp32 ulps (bit-identical for Linf), and identical flags and summary
//      counts, scales within 1e-5 — valid because the trace keeps every
//      ratio, delta and grant cut-off more than 1e-4 (relative) away from
//      its threshold, which the test measures and asserts.
// It prints the reducer's cost: collectives per step (must be 1), bytes per
// collective, and the time per all-reduce.
//
// Plain main() rather than Catch2: every rank must run every collective in
// the same order, so one failing check must not skip the rest on one rank.
#include "gnmr/mpi/reducer.hpp"  // first: the header must be self-contained

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gnmr/controller.hpp"
#include "gnmr/host/norms.hpp"
#include "gnmr/reducer.hpp"

namespace {

int g_rank = 0;
int g_size = 1;
int g_failures = 0;

#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    if (!(cond)) {                                                         \
      ++g_failures;                                                        \
      std::fprintf(stderr, "[rank %d] FAIL %s:%d: %s: ", g_rank, __FILE__, \
                   __LINE__, #cond);                                       \
      std::fprintf(stderr, __VA_ARGS__);                                   \
      std::fprintf(stderr, "\n");                                          \
    }                                                                      \
  } while (0)

// ---- Deterministic data: a counter-based hash, so any rank can produce any
// element of any step without sharing a generator state.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
double u01(std::uint64_t a, std::uint64_t b = 0, std::uint64_t c = 0, std::uint64_t d = 0) {
  const std::uint64_t h = mix(mix(mix(mix(a) ^ b) ^ c) ^ d);
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

constexpr std::uint64_t kSeed = 20261122;
constexpr std::uint32_t kUnits = 24;
constexpr int kSteps = 300;

struct SegSpec {
  std::uint32_t unit;
  std::uint64_t numel;
  gnmr::DType dtype;
  std::vector<std::uint64_t> cuts;  // R+1 entries: rank r holds [cuts[r], cuts[r+1])
};

struct Layout {
  std::vector<SegSpec> segs;
  std::vector<double> base;  // per-unit element amplitude
};

Layout make_layout(int ranks) {
  Layout L;
  std::uint64_t k = 0;
  for (std::uint32_t u = 0; u < kUnits; ++u) {
    L.base.push_back(std::pow(10.0, -3.0 + 4.0 * u01(kSeed, 1, u)));
    const int nseg = 1 + static_cast<int>(u01(kSeed, 2, u) * 3.0);
    for (int s = 0; s < nseg; ++s, ++k) {
      SegSpec sp;
      sp.unit = u;
      sp.numel = 64 + static_cast<std::uint64_t>(u01(kSeed, 3, k) * 1500.0);
      sp.dtype = u01(kSeed, 4, k) < 0.5 ? gnmr::DType::kBF16 : gnmr::DType::kF32;
      // Uneven cuts: random weights, and now and then a rank with nothing.
      std::vector<double> w(static_cast<std::size_t>(ranks));
      double tot = 0.0;
      for (int r = 0; r < ranks; ++r) {
        w[static_cast<std::size_t>(r)] = u01(kSeed, 5, k, static_cast<std::uint64_t>(r)) < 0.1
                                             ? 0.0
                                             : 0.2 + u01(kSeed, 6, k, static_cast<std::uint64_t>(r));
        tot += w[static_cast<std::size_t>(r)];
      }
      if (tot == 0.0) w[0] = tot = 1.0;
      sp.cuts.push_back(0);
      double acc = 0.0;
      for (int r = 0; r < ranks; ++r) {
        acc += w[static_cast<std::size_t>(r)];
        sp.cuts.push_back(r + 1 == ranks ? sp.numel
                                         : static_cast<std::uint64_t>(acc / tot * static_cast<double>(sp.numel)));
      }
      L.segs.push_back(sp);
    }
  }
  return L;
}

// The trace: per-unit jitter, isolated spikes, three contention steps
// (8 units at once against max_o = 4) and poisoned elements in ONE rank's
// shard (the last rank holding a piece of the unit's first segment).
struct Poison {
  int step;
  std::uint32_t unit;
  bool inf;
};
const Poison kPoison[] = {{40, 3, false}, {41, 3, false},  {120, 17, false}, {160, 8, true},
                          {200, 0, false}, {201, 11, false}, {202, 23, true}};

double amplitude(const Layout& L, int t, std::uint32_t u) {
  double m = 1.0 + 0.05 * (2.0 * u01(kSeed, 7, static_cast<std::uint64_t>(t), u) - 1.0);
  if (t == 60 || t == 140 || t == 220) {
    const std::uint32_t first = static_cast<std::uint32_t>(t) % kUnits;
    const std::uint32_t k = (u + kUnits - first) % kUnits;
    if (k < 8) m *= 6.0 + 3.0 * k;  // distinct factors: a clear ranking
  } else if (t >= 15 && u01(kSeed, 8, static_cast<std::uint64_t>(t), u) < 0.02) {
    m *= 5.0 + 30.0 * u01(kSeed, 9, static_cast<std::uint64_t>(t), u);
  }
  return L.base[u] * m;
}

// Full gradient buffers of step t (raw bytes per segment). Every rank builds
// them and reads only its own pieces; the data a rank reads is therefore
// exactly the unsharded gradient's bits.
std::vector<std::vector<std::uint8_t>> make_grads(const Layout& L, int t) {
  std::vector<std::vector<std::uint8_t>> g(L.segs.size());
  for (std::size_t k = 0; k < L.segs.size(); ++k) {
    const SegSpec& s = L.segs[k];
    const double a = amplitude(L, t, s.unit);
    const bool bf = s.dtype == gnmr::DType::kBF16;
    g[k].resize(s.numel * (bf ? 2 : 4));
    for (std::uint64_t i = 0; i < s.numel; ++i) {
      const float v = static_cast<float>(a * (2.0 * u01(kSeed, 10 + static_cast<std::uint64_t>(t), k, i) - 1.0));
      if (bf) {
        const std::uint16_t h = gnmr::float_to_bf16(v);
        std::memcpy(&g[k][i * 2], &h, 2);
      } else {
        std::memcpy(&g[k][i * 4], &v, 4);
      }
    }
  }
  for (const Poison& p : kPoison) {
    if (p.step != t) continue;
    for (std::size_t k = 0; k < L.segs.size(); ++k) {
      const SegSpec& s = L.segs[k];
      if (s.unit != p.unit) continue;
      int r = static_cast<int>(s.cuts.size()) - 2;
      while (r > 0 && s.cuts[static_cast<std::size_t>(r)] == s.cuts[static_cast<std::size_t>(r) + 1]) --r;
      const std::uint64_t i = (s.cuts[static_cast<std::size_t>(r)] + s.cuts[static_cast<std::size_t>(r) + 1]) / 2;
      const float bad = p.inf ? gnmr::inf_f() : gnmr::nan_f();
      if (s.dtype == gnmr::DType::kBF16) {
        const std::uint16_t h = gnmr::float_to_bf16(bad);
        std::memcpy(&g[k][i * 2], &h, 2);
      } else {
        std::memcpy(&g[k][i * 4], &bad, 4);
      }
      break;
    }
  }
  return g;
}

// Rank r's segments (rank = -1: the whole, unsharded gradient). A rank that
// holds nothing of a unit has no segment for it; host_unit_partials with
// Coverage::kShard then gives that unit the identity (0).
std::vector<gnmr::Segment> segments_of(const Layout& L, const std::vector<std::vector<std::uint8_t>>& g,
                                       int r) {
  std::vector<gnmr::Segment> out;
  for (std::size_t k = 0; k < L.segs.size(); ++k) {
    const SegSpec& s = L.segs[k];
    const std::uint64_t lo = r < 0 ? 0 : s.cuts[static_cast<std::size_t>(r)];
    const std::uint64_t hi = r < 0 ? s.numel : s.cuts[static_cast<std::size_t>(r) + 1];
    if (hi == lo) continue;
    const std::size_t esz = s.dtype == gnmr::DType::kBF16 ? 2 : 4;
    out.push_back({g[k].data() + lo * esz, hi - lo, s.dtype, s.unit});
  }
  return out;
}

// ---- Records: what must be identical, serialised field by field (no padding).
template <class T>
void put(std::vector<std::uint8_t>& b, const T& v) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
  b.insert(b.end(), p, p + sizeof v);
}
template <class C>
void record_step(std::vector<std::uint8_t>& b, const C& c) {
  for (const gnmr::UnitDecision& d : c.decisions()) {
    put(b, d.scale);
    put(b, d.flags);
  }
  const gnmr::StepSummary& s = c.summary();
  put(b, s.step);
  put(b, s.triggered);
  put(b, s.granted);
  put(b, s.in_recovery);
  put(b, s.denied);
  put(b, s.nonfinite);
  put(b, s.released);
  put(b, s.max_ratio);
  put(b, s.max_ratio_unit);
  put(b, s.skip_step);
}

std::uint32_t fbits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
double rel(double a, double b) {
  const double m = std::max(std::fabs(a), std::fabs(b));
  return m == 0.0 ? 0.0 : std::fabs(a - b) / m;
}
void map_nan(std::vector<float>& p) {
  for (float& x : p)
    if (gnmr::is_nan(x)) x = gnmr::inf_f();
}

const char* alg_name(gnmr::mpi::Algorithm a) {
  return a == gnmr::mpi::Algorithm::kAllreduce ? "allreduce" : "ordered-allgather";
}

template <class Norm>
using Ctl = gnmr::GnmrController<Norm>;

template <class Norm>
Ctl<Norm> make_ctl(const Layout& L) {
  Ctl<Norm> c(kUnits);
  std::vector<gnmr::Segment> segs;
  for (const SegSpec& s : L.segs) segs.push_back({nullptr, s.numel, s.dtype, s.unit});
  const std::vector<std::uint64_t> numel = gnmr::unit_numel(segs, kUnits);
  c.set_unit_numel(numel.data(), numel.size());  // the GLOBAL unit sizes, on every rank
  return c;
}

template <class Norm>
void run_trace(gnmr::mpi::Algorithm alg) {
  constexpr bool kIsMax = Norm::kCombine == gnmr::Combine::kMax;
  const Layout L = make_layout(g_size);
  gnmr::ReducedController<Ctl<Norm>, gnmr::mpi::MpiReducer> rc(
      make_ctl<Norm>(L), gnmr::mpi::MpiReducer(MPI_COMM_WORLD, alg));

  std::vector<std::uint8_t> rec;          // this rank: partials + decisions + summary per step
  std::vector<float> reduced_all;         // this rank's reduced partials, per step
  std::vector<float> partials(kUnits);
  for (int t = 1; t <= kSteps; ++t) {
    const auto g = make_grads(L, t);
    const auto segs = segments_of(L, g, g_rank);
    gnmr::host_unit_partials<Norm>(segs.data(), segs.size(), partials.data(), kUnits,
                                   gnmr::Coverage::kShard);
    rc.step(partials.data(), partials.size());  // reduces partials in place, then steps
    for (float p : partials) put(rec, p);
    record_step(rec, rc.controller());
    reduced_all.insert(reduced_all.end(), partials.begin(), partials.end());
  }
  const gnmr::ReducerStats st = rc.reducer().stats();
  CHECK(st.collectives == static_cast<std::uint64_t>(kSteps), "collectives %llu for %d steps",
        static_cast<unsigned long long>(st.collectives), kSteps);
  const std::uint64_t per = alg == gnmr::mpi::Algorithm::kAllreduce
                                ? kUnits * sizeof(float)
                                : kUnits * sizeof(float) * static_cast<std::uint64_t>(g_size);
  CHECK(st.bytes == per * kSteps, "bytes %llu", static_cast<unsigned long long>(st.bytes));

  // (a) gather every rank's record to rank 0.
  const int len = static_cast<int>(rec.size());
  std::vector<std::uint8_t> all(g_rank == 0 ? rec.size() * static_cast<std::size_t>(g_size) : 0);
  MPI_Gather(rec.data(), len, MPI_BYTE, all.data(), len, MPI_BYTE, 0, MPI_COMM_WORLD);
  double t_mean_max = 0.0, t_mean_sum = 0.0;
  const double t_mean = st.seconds / static_cast<double>(st.collectives ? st.collectives : 1);
  MPI_Reduce(&t_mean, &t_mean_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&t_mean, &t_mean_sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);

  // The collective alone, without the trace's load imbalance: back-to-back
  // reductions of the same N values after a barrier.
  gnmr::mpi::MpiReducer bench(MPI_COMM_WORLD, alg);
  std::vector<float> buf(kUnits, 1.0f);
  MPI_Barrier(MPI_COMM_WORLD);
  constexpr int kReps = 2000;
  for (int i = 0; i < kReps; ++i) bench.allreduce(buf.data(), buf.size(), Norm::kCombine);
  double b_mean = bench.stats().seconds / kReps, b_max = 0.0;
  MPI_Reduce(&b_mean, &b_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

  if (g_rank != 0) return;
  const std::string tag = std::string(Norm::kName) + "/" + alg_name(alg);
  int rank_mismatch = 0;
  for (int r = 1; r < g_size; ++r)
    if (std::memcmp(all.data() + static_cast<std::size_t>(r) * rec.size(), rec.data(), rec.size()) != 0) {
      ++rank_mismatch;
      std::size_t i = 0;
      while (all[static_cast<std::size_t>(r) * rec.size() + i] == rec[i]) ++i;
      CHECK(false, "%s: rank %d differs from rank 0 at byte %zu of %zu", tag.c_str(), r, i, rec.size());
    }

  // Single-process references on rank 0.
  Ctl<Norm> same = make_ctl<Norm>(L);     // (b)  fed rank 0's reduced partials
  gnmr::ReducedController<Ctl<Norm>> ordered(make_ctl<Norm>(L), gnmr::NoReduce{});  // (b')
  Ctl<Norm> full = make_ctl<Norm>(L);     // (c)  unsharded gradients
  std::vector<std::uint8_t> rec_same, rec_ordered;
  std::vector<float> p_ord(kUnits), p_full(kUnits), shard(kUnits);
  double part_rel_ord = 0.0, part_rel_full = 0.0, scale_rel = 0.0, maxr_rel = 0.0;
  double margin = 1e30, cut_margin = 1e30;
  int flag_mismatch = 0, count_mismatch = 0;
  std::uint64_t trig = 0, grant = 0, deny = 0, nonfin = 0;
  bool ord_partials_equal = true;
  const float tau = Ctl<Norm>(1).policies().trigger.tau;
  const float dth = Ctl<Norm>(1).policies().trigger.delta;
  for (int t = 1; t <= kSteps; ++t) {
    const float* red = reduced_all.data() + static_cast<std::size_t>(t - 1) * kUnits;
    same.step(red, kUnits);
    for (std::uint32_t k = 0; k < kUnits; ++k) put(rec_same, red[k]);
    record_step(rec_same, same);

    const auto g = make_grads(L, t);
    for (int r = 0; r < g_size; ++r) {
      const auto segs = segments_of(L, g, r);
      gnmr::host_unit_partials<Norm>(segs.data(), segs.size(), shard.data(), kUnits,
                                     gnmr::Coverage::kShard);
      if (kIsMax) map_nan(shard);
      for (std::uint32_t u = 0; u < kUnits; ++u)
        p_ord[u] = r == 0 ? shard[u] : Norm::combine(p_ord[u], shard[u]);
    }
    for (std::uint32_t u = 0; u < kUnits; ++u) {
      ord_partials_equal = ord_partials_equal && fbits(p_ord[u]) == fbits(red[u]);
      if (gnmr::is_finite(p_ord[u]) && gnmr::is_finite(red[u]))
        part_rel_ord = std::max(part_rel_ord, rel(p_ord[u], red[u]));
    }
    ordered.step(p_ord.data(), kUnits);
    for (float p : p_ord) put(rec_ordered, p);
    record_step(rec_ordered, ordered.controller());

    const auto fsegs = segments_of(L, g, -1);
    gnmr::host_unit_partials<Norm>(fsegs.data(), fsegs.size(), p_full.data(), kUnits);
    if (kIsMax) map_nan(p_full);
    full.step(p_full.data(), kUnits);
    const auto& fr = full.reports();
    const auto& fd = full.decisions();
    const auto& sd = same.decisions();
    for (std::uint32_t u = 0; u < kUnits; ++u) {
      CHECK(gnmr::is_finite(p_full[u]) == gnmr::is_finite(red[u]), "%s t=%d unit %u finiteness", tag.c_str(), t, u);
      if (gnmr::is_finite(p_full[u]) && gnmr::is_finite(red[u])) {
        part_rel_full = std::max(part_rel_full, rel(p_full[u], red[u]));
        if (kIsMax) CHECK(fbits(p_full[u]) == fbits(red[u]), "%s t=%d unit %u linf partial", tag.c_str(), t, u);
      }
      if (fd[u].flags != sd[u].flags) ++flag_mismatch;
      scale_rel = std::max(scale_rel, rel(fd[u].scale, sd[u].scale));
      const std::uint32_t f = fr[u].flags;
      if (!(f & (gnmr::kWarmup | gnmr::kNonFinite))) {
        margin = std::min(margin, std::fabs(static_cast<double>(fr[u].ratio) - tau) / tau);
        margin = std::min(margin, std::fabs(static_cast<double>(fr[u].delta) - dth) / dth);
      }
    }
    // The grant cut-off: lowest risk granted now vs highest risk denied.
    float lo_g = gnmr::inf_f(), hi_d = -1.0f;
    for (std::uint32_t u = 0; u < kUnits; ++u) {
      if (fr[u].flags & gnmr::kGranted) lo_g = std::min(lo_g, fr[u].risk);
      if (fr[u].flags & gnmr::kDenied) hi_d = std::max(hi_d, fr[u].risk);
    }
    if (hi_d >= 0.0f && gnmr::is_finite(lo_g)) cut_margin = std::min(cut_margin, rel(lo_g, hi_d));
    const gnmr::StepSummary& a = full.summary();
    const gnmr::StepSummary& b = same.summary();
    if (a.triggered != b.triggered || a.granted != b.granted || a.in_recovery != b.in_recovery ||
        a.denied != b.denied || a.nonfinite != b.nonfinite || a.released != b.released ||
        a.max_ratio_unit != b.max_ratio_unit || a.skip_step != b.skip_step)
      ++count_mismatch;
    maxr_rel = std::max(maxr_rel, rel(a.max_ratio, b.max_ratio));
    trig += b.triggered;
    grant += b.granted;
    deny += b.denied;
    nonfin += b.nonfinite;
  }
  CHECK(rec_same == rec, "%s: (b) single process on the same partials differs", tag.c_str());
  const bool ord_exact = alg == gnmr::mpi::Algorithm::kOrderedAllgather || kIsMax;
  if (ord_exact) {
    CHECK(ord_partials_equal, "%s: (b') rank-order partials differ", tag.c_str());
    CHECK(rec_ordered == rec, "%s: (b') rank-order single process differs", tag.c_str());
  }
  // Shard partials round once each (double accumulation inside
  // host_unit_partials) and R-1 fp32 additions follow: <= R ulps.
  const double tol = kIsMax ? 0.0 : static_cast<double>(g_size) * 1.2e-7;
  CHECK(part_rel_full <= tol, "%s: (c) partials rel diff %.3g > %.3g", tag.c_str(), part_rel_full, tol);
  CHECK(margin > 1e-4 && cut_margin > 1e-4, "%s: trace too close to a threshold (%.3g, %.3g)", tag.c_str(),
        margin, cut_margin);
  CHECK(flag_mismatch == 0, "%s: (c) %d flag mismatches", tag.c_str(), flag_mismatch);
  CHECK(count_mismatch == 0, "%s: (c) %d summary mismatches", tag.c_str(), count_mismatch);
  CHECK(scale_rel <= 1e-5 && maxr_rel <= 1e-5, "%s: (c) scale %.3g max_ratio %.3g", tag.c_str(), scale_rel,
        maxr_rel);
  CHECK(trig > 0 && grant > 0 && deny > 0 && nonfin >= 7, "%s: trace lacks events", tag.c_str());

  std::printf(
      "[gnmr-mpi] %-22s ranks=%d units=%u steps=%d | cost: collectives/step=%.0f bytes/collective=%llu "
      "(%s) time/all-reduce in loop mean=%.1f us (slowest rank %.1f us), back-to-back=%.1f us (slowest %.1f us)\n",
      tag.c_str(), g_size, kUnits, kSteps, static_cast<double>(st.collectives) / kSteps,
      static_cast<unsigned long long>(per), alg == gnmr::mpi::Algorithm::kAllreduce ? "N*4" : "R*N*4",
      1e6 * t_mean_sum / g_size, 1e6 * t_mean_max, 1e6 * b_mean, 1e6 * b_max);
  std::printf(
      "[gnmr-mpi] %-22s trace: triggered=%llu granted=%llu denied=%llu nonfinite=%llu | (a) ranks "
      "bit-identical: %s | (b) same partials: %s | (b') rank-order: %s (max rel %.2g) | (c) unsharded: "
      "partials max rel %.2g, flag mismatches %d, scale max rel %.2g, threshold margin %.3g, cut margin %.3g\n",
      tag.c_str(), static_cast<unsigned long long>(trig), static_cast<unsigned long long>(grant),
      static_cast<unsigned long long>(deny), static_cast<unsigned long long>(nonfin),
      rank_mismatch == 0 ? "yes" : "NO", rec_same == rec ? "identical" : "DIFFERENT",
      ord_exact ? (rec_ordered == rec ? "bit-identical" : "DIFFERENT") : "n/a (allreduce order)",
      part_rel_ord, part_rel_full, flag_mismatch, scale_rel, margin, cut_margin);
}

// NaN handling of the collective itself, and the double overloads.
void nan_and_edge_cases() {
  using gnmr::Combine;
  const int last = g_size - 1;
  for (auto alg : {gnmr::mpi::Algorithm::kAllreduce, gnmr::mpi::Algorithm::kOrderedAllgather}) {
    gnmr::mpi::MpiReducer red(MPI_COMM_WORLD, alg);
    // A NaN on ONE rank, larger finite values elsewhere: max must be +Inf everywhere.
    std::vector<float> v = {g_rank == last ? gnmr::nan_f() : 5.0f + static_cast<float>(g_rank),
                            g_rank == 0 ? gnmr::nan_f() : 1.0f, 2.0f};
    red.allreduce(v.data(), v.size(), Combine::kMax);
    CHECK(fbits(v[0]) == fbits(gnmr::inf_f()) && fbits(v[1]) == fbits(gnmr::inf_f()) && v[2] == 2.0f,
          "%s max with NaN: %g %g %g", alg_name(alg), static_cast<double>(v[0]), static_cast<double>(v[1]),
          static_cast<double>(v[2]));
    std::vector<float> s = {g_rank == last ? gnmr::nan_f() : 1.0f, g_rank == 0 ? gnmr::inf_f() : 1.0f, 0.5f};
    red.allreduce(s.data(), s.size(), Combine::kSum);
    CHECK(gnmr::is_nan(s[0]) && fbits(s[1]) == fbits(gnmr::inf_f()) &&
              s[2] == 0.5f * static_cast<float>(g_size),
          "%s sum with NaN/Inf", alg_name(alg));
    // Doubles: sums of small integers are exact in any order.
    std::vector<double> d = {static_cast<double>(g_rank) + 0.5, g_rank == last ? std::nan("") : 1.0};
    red.allreduce(d.data(), d.size(), Combine::kSum);
    CHECK(d[0] == 0.5 * g_size * g_size && std::isnan(d[1]), "%s double sum %g", alg_name(alg), d[0]);
    d = {static_cast<double>(g_rank), g_rank == last ? std::nan("") : 1.0};
    red.allreduce(d.data(), d.size(), Combine::kMax);
    CHECK(d[0] == last && std::isinf(d[1]), "%s double max", alg_name(alg));
    // n = 0 is a no-op on every rank (no collective); null data is an error.
    red.allreduce(static_cast<float*>(nullptr), 0, Combine::kSum);
    CHECK(red.stats().collectives == 4, "collectives %llu", static_cast<unsigned long long>(red.stats().collectives));
    bool threw = false;
    try {
      red.allreduce(static_cast<float*>(nullptr), 3, Combine::kSum);
    } catch (const std::invalid_argument&) {
      threw = true;
    }
    CHECK(threw, "null partials must throw");
  }
  // What the NaN -> +Inf mapping guards against: raw MPI_MAX over floats.
  float raw[2] = {g_rank == last ? gnmr::nan_f() : 5.0f, g_rank == 0 ? gnmr::nan_f() : 5.0f};
  MPI_Allreduce(MPI_IN_PLACE, raw, 2, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  int kept = (gnmr::is_nan(raw[0]) ? 1 : 0) + (gnmr::is_nan(raw[1]) ? 1 : 0), kept_all = 0;
  MPI_Reduce(&kept, &kept_all, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (g_rank == 0)
    std::printf("[gnmr-mpi] raw MPI_MAX kept %d of %d NaNs across ranks (the reducer maps NaN to +Inf first)\n",
                kept_all, 2 * g_size);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  try {
    nan_and_edge_cases();
    for (auto alg : {gnmr::mpi::Algorithm::kAllreduce, gnmr::mpi::Algorithm::kOrderedAllgather}) {
      run_trace<gnmr::L2Norm>(alg);
      run_trace<gnmr::RmsNorm>(alg);
      run_trace<gnmr::LinfNorm>(alg);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] exception: %s\n", g_rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int failed = 0;
  MPI_Allreduce(&g_failures, &failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) std::printf("[gnmr-mpi] %s (%d failed checks, %d ranks)\n", failed ? "FAILED" : "passed", failed, g_size);
  MPI_Finalize();
  return failed ? 1 : 0;
}
