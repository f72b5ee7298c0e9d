// examples/sharded_mpi/main.cpp — the recommended controller in a sharded
// data-parallel loop (MPI, CPU): gnmr::make_default on every rank, its
// partials summed over ranks by one all-reduce of N floats, the same
// decisions everywhere.
//
// A toy 2-layer MLP (units: W1, b1, W2, b2) is trained on a teacher's
// outputs, ZeRO-2 style: every rank computes the full gradient of its own
// batch, a reduce-scatter leaves each rank the summed gradient of ITS slice
// of the flat parameter vector (uneven slices that cut through tensors), and
// each rank updates only its slice before an all-gather. No rank ever holds
// a whole unit's gradient, so its per-unit partial norms are partial across
// ranks too: gnmr::reduce_and_step(*ctl, reducer, ...) sums them with
// MpiReducer (one all-reduce of N = 4 floats per step) and steps the
// controller, so every rank takes the same decisions, which it applies to
// its own slice. (The reducer takes any controller kind, by reference or
// std::unique_ptr; gnmr::ReducedController<std::unique_ptr<
// gnmr::DynController>, gnmr::mpi::MpiReducer> bundles the two.)
//
// The controller is the preset "default": the stabilizer renormalises
// every unit's update on every step, and GNMR's calibrated trigger inside
// it acts on spikes. Step 150 feeds one rank a batch with a 50x outlier
// sample, which spikes some of the units (which ones depends on the rank
// count: every rank draws its own batch, so the outlier weighs 1/(16 x
// ranks) of the summed gradient, and a large one saturates tanh, whose
// (1 - h^2) then hides it from the hidden layer; with 4 ranks W2 and b2
// spike, about 100x and 40x their means). The default's rules for such a
// step, which the program checks whatever the count: more than max(2, 10%
// of 4) = 2 units at once is a model-wide jump, so the step is held (no
// grant: the stabilizer bounds each spiking unit); otherwise one slot goes
// to the riskier unit (clipped to its mean, promoted for the next 8 steps)
// and the other is denied (bounded by the stabilizer). A granted unit
// leaves the step with a smaller applied norm (scale x norm) than on its
// last calm step; a held or denied one at most 1.3 times it (the
// stabilizer's bound after calm steps is 1.21: examples/spiky_trace.cpp). Step 230 feeds a NaN input
// (every unit non-finite: skipped on every rank). The program also checks
// that a unit is promoted exactly for the 8 steps after a grant, that GNMR
// stays quiet on the ordinary steps (at most 1% of unit-steps: the
// calibrated trigger targets 1e-3 false alarms per unit-step, and b2, one
// scalar, is a noisy unit), that the weights stay finite, and that every
// rank took the same decisions; it prints CHECK FAILED and exits non-zero
// otherwise.
//
//   mpirun -n 4 ./sharded_mpi        (any rank count >= 1; Open MPI as root in a
//                                     container: --allow-run-as-root --oversubscribe)
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gnmr/comm/mpi.hpp"
#include "gnmr/gnmr.hpp"

namespace {

constexpr int kIn = 8, kHid = 16, kBatch = 16, kSteps = 300;
constexpr float kLr = 0.05f;

// Flat parameter layout: one unit per tensor.
struct Tensor {
  const char* name;
  std::size_t offset, numel;
};
const Tensor kTensors[] = {{"W1", 0, kHid * kIn},
                           {"b1", kHid * kIn, kHid},
                           {"W2", kHid * kIn + kHid, kHid},
                           {"b2", kHid * kIn + 2 * kHid, 1}};
constexpr std::size_t kUnits = 4;
constexpr std::size_t kParams = kHid * kIn + 2 * kHid + 1;

struct Rng {  // xorshift64*, deterministic per (step, rank)
  std::uint64_t s;
  float uniform() {  // [-1, 1)
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return static_cast<float>((s * 2685821657736338717ull) >> 40) / 8388608.0f - 1.0f;
  }
};

float forward(const std::vector<float>& p, const float* x, float* h) {
  float y = p[kTensors[3].offset];
  for (int j = 0; j < kHid; ++j) {
    float z = p[kTensors[1].offset + j];
    for (int i = 0; i < kIn; ++i) z += p[kTensors[0].offset + j * kIn + i] * x[i];
    h[j] = std::tanh(z);
    y += p[kTensors[2].offset + j] * h[j];
  }
  return y;
}

// Gradient of the mean squared error over one batch, full model.
float backward(const std::vector<float>& p, const std::vector<float>& teacher, int step, int rank,
               int size, std::vector<float>& g) {
  Rng rng{0x9e3779b97f4a7c15ull ^ (static_cast<std::uint64_t>(step) << 20) ^ static_cast<std::uint64_t>(rank + 1)};
  g.assign(kParams, 0.0f);
  float loss = 0.0f, h[kHid], ht[kHid], x[kIn];
  for (int b = 0; b < kBatch; ++b) {
    for (float& xi : x) xi = rng.uniform();
    float target = forward(teacher, x, ht);
    if (step == 150 && rank == size - 1 && b == 0) {  // an outlier sample on one rank
      for (float& xi : x) xi *= 50.0f;
      target *= 50.0f;
    }
    if (step == 230 && b == 0 && rank == 0) x[3] = std::nanf("");  // a poisoned input
    const float e = forward(p, x, h) - target;
    loss += 0.5f * e * e / kBatch;
    const float dy = e / kBatch;
    g[kTensors[3].offset] += dy;
    for (int j = 0; j < kHid; ++j) {
      g[kTensors[2].offset + j] += dy * h[j];
      const float dz = dy * p[kTensors[2].offset + j] * (1.0f - h[j] * h[j]);
      g[kTensors[1].offset + j] += dz;
      for (int i = 0; i < kIn; ++i) g[kTensors[0].offset + j * kIn + i] += dz * x[i];
    }
  }
  return loss;
}

// This rank's slice [lo, hi) of the flat gradient as gnmr segments. A unit
// the slice does not touch gets no segment: Coverage::kShard makes its
// partial the identity, so the all-reduce still adds up to the whole unit.
std::vector<gnmr::Segment> shard_segments(const float* shard, std::size_t lo, std::size_t hi) {
  std::vector<gnmr::Segment> segs;
  for (std::uint32_t u = 0; u < kUnits; ++u) {
    const std::size_t a = std::max(lo, kTensors[u].offset);
    const std::size_t b = std::min(hi, kTensors[u].offset + kTensors[u].numel);
    if (a < b) segs.push_back({shard + (a - lo), b - a, gnmr::DType::kF32, u});
  }
  return segs;
}

std::string flags_str(std::uint32_t f) {
  std::string s;
  const std::pair<std::uint32_t, const char*> names[] = {
      {gnmr::kTriggered, "TRIG"}, {gnmr::kGranted, "GRANT"}, {gnmr::kInRecovery, "REC"},
      {gnmr::kDenied, "DENY"},    {gnmr::kSystemic, "HELD"},   {gnmr::kNonFinite, "NONFINITE"},
      {gnmr::kSkip, "SKIP"},      {gnmr::kPromote, "PROMOTE"}, {gnmr::kReleased, "REL"}};
  for (const auto& n : names)
    if (f & n.first) s += (s.empty() ? "" : "|") + std::string(n.second);
  return s.empty() ? "-" : s;
}

}  // namespace

// The stabilizer's bound on a spiking unit it alone bounds (held or denied):
// 1.21 after calm steps (examples/spiky_trace.cpp derives it), with room for
// the calm steps' own noise.
constexpr float kStabilizerBound = 1.3f;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  // Uneven slices of the flat vector (rank r gets a share ~ r+1).
  std::vector<int> counts(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size));
  {
    const int total_w = size * (size + 1) / 2;
    int off = 0;
    for (int r = 0; r < size; ++r) {
      const int c = r + 1 == size ? static_cast<int>(kParams) - off
                                  : static_cast<int>(kParams) * (r + 1) / total_w;
      counts[static_cast<std::size_t>(r)] = c;
      displs[static_cast<std::size_t>(r)] = off;
      off += c;
    }
  }
  const std::size_t lo = static_cast<std::size_t>(displs[static_cast<std::size_t>(rank)]);
  const std::size_t hi = lo + static_cast<std::size_t>(counts[static_cast<std::size_t>(rank)]);

  std::vector<float> params(kParams), teacher(kParams), grad, shard(hi - lo);
  Rng init{42};
  for (float& w : teacher) w = init.uniform();
  for (float& w : params) w = 0.3f * init.uniform();

  // Every rank builds the same controller over every unit (global decisions).
  std::unique_ptr<gnmr::DynController> ctl = gnmr::make_default(kUnits);
  gnmr::mpi::MpiReducer reducer(MPI_COMM_WORLD);
  int failures = 0;                        // this rank's
  std::vector<float> calm(kUnits, 0.0f);   // each unit's applied norm (scale x norm) on its last calm step
  std::vector<int> granted_at(kUnits, 0);  // each unit's last grant (0: none)
  long other_triggers = 0;                 // triggered unit-steps on the ordinary steps
  const auto check = [&failures, rank](bool ok, int step, const char* what) {
    if (!ok) std::printf("CHECK FAILED (rank %d, step %d): %s\n", rank, step, what), ++failures;
  };
  std::vector<float> partials(kUnits);
  std::uint64_t digest = 1469598103934665603ull;  // FNV-1a over every decision
  // The shard buffer never moves, so its segment layout is built once.
  const std::vector<gnmr::Segment> segs = shard_segments(shard.data(), lo, hi);

  for (int step = 1; step <= kSteps; ++step) {
    const float loss = backward(params, teacher, step, rank, size, grad);
    // Data-parallel sum + scatter: rank r keeps the summed gradient of its slice.
    MPI_Reduce_scatter(grad.data(), shard.data(), counts.data(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (float& g : shard) g /= static_cast<float>(size);

    // GNMR: partials of the local slice, one all-reduce of N floats, step.
    gnmr::host_unit_partials(segs.data(), segs.size(), partials.data(), kUnits,
                             gnmr::Coverage::kShard);
    const gnmr::StepSummary& sum = gnmr::reduce_and_step(*ctl, reducer, partials.data(), kUnits);

    // Apply the decisions to the local slice: select on SKIP, never multiply
    // by 0. (The default scales every unit on every step: the stabilizer
    // sets each unit's norm, GNMR's clip lowers a spiking unit's further.)
    const auto& dec = ctl->decisions();
    for (std::size_t i = lo; i < hi; ++i) {
      std::uint32_t u = 0;
      while (i >= kTensors[u].offset + kTensors[u].numel) ++u;
      if (dec[u].flags & gnmr::kSkip) continue;
      params[i] -= kLr * dec[u].scale * shard[i - lo];
    }
    MPI_Allgatherv(params.data() + lo, counts[static_cast<std::size_t>(rank)], MPI_FLOAT, params.data(),
                   counts.data(), displs.data(), MPI_FLOAT, MPI_COMM_WORLD);

    for (const gnmr::UnitDecision& d : dec) {
      const unsigned char* b = reinterpret_cast<const unsigned char*>(&d);
      for (std::size_t k = 0; k < sizeof d; ++k) digest = (digest ^ b[k]) * 1099511628211ull;
    }
    // What the default did: GNMR's part is in the flags, not in scale == 1.
    const auto& rep = ctl->reports();
    if (step == 150) {
      check(sum.triggered >= 1, step, "the outlier spikes at least one unit");
      if (sum.triggered > 2)
        check(sum.systemic == 4 && sum.granted == 0, step, "more than 2 units at once: the step is held");
      else
        check(sum.granted == 1 && sum.denied == sum.triggered - 1, step, "one grant, to the riskier unit");
      for (std::size_t u = 0; u < kUnits; ++u) {
        if (!(dec[u].flags & gnmr::kTriggered)) continue;
        const bool granted = (dec[u].flags & (gnmr::kGranted | gnmr::kInRecovery)) != 0;
        const float applied = dec[u].scale * rep[u].norm;
        check(!(dec[u].flags & gnmr::kSkip) && applied < (granted ? 1.0f : kStabilizerBound) * calm[u], step,
              granted ? "a granted spiking unit is clipped below its last calm step's applied norm, not skipped"
                      : "a held or denied spiking unit is bounded by the stabilizer, not skipped");
      }
    } else if (step == 230) {
      check(sum.nonfinite == kUnits, step, "the NaN input makes every unit non-finite");
      for (const gnmr::UnitDecision& d : dec) check((d.flags & gnmr::kSkip) && d.scale == 0.0f, step, "skipped");
    } else {
      check(sum.nonfinite == 0, step, "a finite input gives finite partials");
      other_triggers += sum.triggered;
    }
    for (std::size_t u = 0; u < kUnits; ++u) {
      if (!(dec[u].flags & (gnmr::kTriggered | gnmr::kSkip))) calm[u] = dec[u].scale * rep[u].norm;
      // A grant at step g promotes the unit's operator for steps g+1..g+8:
      // the decisions of steps g..g+7 carry kPromote.
      if (dec[u].flags & gnmr::kGranted) granted_at[u] = step;
      check(((dec[u].flags & gnmr::kPromote) != 0) == (granted_at[u] > 0 && step - granted_at[u] < 8), step,
            "a unit is promoted exactly for the lock (8 steps) after its grant");
    }
    const bool event = sum.triggered || sum.nonfinite || sum.released;
    if (rank == 0 && (event || step % 50 == 0)) {
      std::printf("step %3d loss(rank0) %.5f  triggered %u granted %u denied %u in_recovery %u nonfinite %u\n",
                  step, static_cast<double>(loss), sum.triggered, sum.granted, sum.denied, sum.in_recovery,
                  sum.nonfinite);
      if (event)
        for (std::size_t u = 0; u < kUnits; ++u) {
          const gnmr::UnitReport& r = ctl->reports()[u];
          std::printf("    %-2s norm %-10.4g ratio %-8.3g risk %-8.3g scale %-8.3g %s\n", kTensors[u].name,
                      static_cast<double>(r.norm), static_cast<double>(r.ratio), static_cast<double>(r.risk),
                      static_cast<double>(r.scale), flags_str(r.flags).c_str());
        }
    }
  }

  // Once, outside the loop: show that every rank took the same decisions.
  std::uint64_t dmin = 0, dmax = 0;
  MPI_Allreduce(&digest, &dmin, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&digest, &dmax, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  check(other_triggers * 100 <= static_cast<long>(kUnits) * (kSteps - 2), kSteps,
        "GNMR stays quiet on ordinary steps (at most 1% of unit-steps trigger)");
  bool finite = true;
  for (float w : params) finite = finite && std::isfinite(w);
  check(finite, kSteps, "the NaN never reached the weights");
  int all_failures = 0;
  MPI_Allreduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  const gnmr::ReducerStats st = reducer.stats();
  if (rank == 0)
    std::printf("%d ranks, %d steps: %llu partial all-reduces (%.0f per step, %llu bytes each, %.1f us mean); "
                "decisions identical on all ranks: %s\n",
                size, kSteps, static_cast<unsigned long long>(st.collectives),
                static_cast<double>(st.collectives) / kSteps,
                static_cast<unsigned long long>(st.bytes / (st.collectives ? st.collectives : 1)),
                1e6 * st.seconds / static_cast<double>(st.collectives ? st.collectives : 1),
                dmin == dmax ? "yes" : "NO");
  if (dmin != dmax) all_failures += 1;
  if (rank == 0) {
    if (dmin != dmax) std::printf("CHECK FAILED: the ranks' decisions differ\n");
    std::printf("triggered unit-steps outside steps 150 and 230: %ld\n", other_triggers);
    std::printf(all_failures ? "sharded_mpi: %d check(s) FAILED\n" : "sharded_mpi: all checks passed\n", all_failures);
  }
  MPI_Finalize();
  return all_failures == 0 ? 0 : 1;
}
