// examples/sharded_mpi/main.cpp — GNMR in a sharded data-parallel loop (MPI, CPU).
//
// A toy 2-layer MLP (units: W1, b1, W2, b2) is trained on a teacher's
// outputs, ZeRO-2 style: every rank computes the full gradient of its own
// batch, a reduce-scatter leaves each rank the summed gradient of ITS slice
// of the flat parameter vector (uneven slices that cut through tensors), and
// each rank updates only its slice before an all-gather. No rank ever holds
// a whole unit's gradient, so its per-unit partial norms are partial across
// ranks too: MpiReducer sums them (one all-reduce of N=4 floats per step)
// and every rank's controller then takes the same decisions, which it
// applies to its own slice. Step 150 feeds one rank a batch with a 50x
// outlier (a spike in every layer, more than max_o = 2 slots), step 230 a
// NaN input (every unit non-finite: skipped on every rank).
//
//   mpirun -n 4 ./sharded_mpi        (any rank count >= 1)
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "gnmr/comm/mpi.hpp"
#include "gnmr/comm/reducer.hpp"
#include "gnmr/host/controller.hpp"
#include "gnmr/host/unit_norms.hpp"

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
      {gnmr::kDenied, "DENY"},    {gnmr::kNonFinite, "NONFINITE"}, {gnmr::kSkip, "SKIP"},
      {gnmr::kReleased, "REL"}};
  for (const auto& n : names)
    if (f & n.first) s += (s.empty() ? "" : "|") + std::string(n.second);
  return s.empty() ? "-" : s;
}

}  // namespace

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

  // The controller sees every unit (global decisions); max_o = 2 of 4 units.
  gnmr::GnmrController<> controller(kUnits, {}, {}, {}, {}, gnmr::MaxO{2, 8, 0});
  gnmr::mpi::MpiReducer reducer(MPI_COMM_WORLD);
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
    const gnmr::StepSummary& sum = gnmr::reduce_and_step(controller, reducer, partials.data(), kUnits);

    // Apply the decisions to the local slice: select on SKIP, never multiply by 0.
    const auto& dec = controller.decisions();
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
    const bool event = sum.triggered || sum.nonfinite || sum.released;
    if (rank == 0 && (event || step % 50 == 0)) {
      std::printf("step %3d loss(rank0) %.5f  triggered %u granted %u denied %u in_recovery %u nonfinite %u\n",
                  step, static_cast<double>(loss), sum.triggered, sum.granted, sum.denied, sum.in_recovery,
                  sum.nonfinite);
      if (event)
        for (std::size_t u = 0; u < kUnits; ++u) {
          const gnmr::UnitReport& r = controller.reports()[u];
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
  const gnmr::ReducerStats st = reducer.stats();
  if (rank == 0)
    std::printf("%d ranks, %d steps: %llu partial all-reduces (%.0f per step, %llu bytes each, %.1f us mean); "
                "decisions identical on all ranks: %s\n",
                size, kSteps, static_cast<unsigned long long>(st.collectives),
                static_cast<double>(st.collectives) / kSteps,
                static_cast<unsigned long long>(st.bytes / (st.collectives ? st.collectives : 1)),
                1e6 * st.seconds / static_cast<double>(st.collectives ? st.collectives : 1),
                dmin == dmax ? "yes" : "NO");
  MPI_Finalize();
  return dmin == dmax ? 0 : 1;
}
