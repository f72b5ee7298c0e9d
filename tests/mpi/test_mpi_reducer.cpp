// tests/mpi/test_mpi_reducer.cpp — sharded gradients, one MPI collective per
// step, identical decisions everywhere (docs/record/distributed.md).
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
// the same order, so one failing check must not skip the rest on one rank
// (tests/mpi/mpi_check.hpp). The data is tests/mpi/sharded_trace.hpp; the
// collective's own NaN and edge cases are test_mpi_edge_cases.cpp.
#include "gnmr/comm/mpi.hpp"  // first: the header must be self-contained

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gnmr/comm/reducer.hpp"
#include "gnmr/host/controller.hpp"
#include "gnmr/host/unit_norms.hpp"
#include "mpi_check.hpp"
#include "sharded_trace.hpp"

namespace mpitest {

int g_rank = 0;
int g_size = 1;
int g_failures = 0;

namespace {

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

}  // namespace
}  // namespace mpitest

using mpitest::g_failures;
using mpitest::g_rank;
using mpitest::g_size;
using mpitest::nan_and_edge_cases;
using mpitest::run_trace;

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
