// tests/cuda/test_summary_ring.cu — SummaryRing reads the device step
// summary without a sync.
//
// A DeviceController runs a contended trace on a non-blocking stream; after
// each step the test pushes the summary and asks latest(). Every summary it
// gets must be bit-identical to the host controller's summary of that same
// step (its `step` field says which), steps seen must never go backwards,
// and wait_newest() must return the last step. A spinning kernel enqueued
// before a push proves latest() does not wait: it must return at once with
// an older step (or nothing), not the one still behind the spin.
#include <chrono>
#include <cstring>
#include <vector>

#include "gnmr/cuda/controller.cuh"
#include "gnmr/host/controller.hpp"
#include "gnmr/cuda/summary_ring.cuh"
#include "harness.cuh"
#include "../support/trace_gen.hpp"
#include "../support/summary_eq.hpp"

namespace gpu_test {
namespace {

__global__ void ring_spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

using testsupport::same_summary;  // tests/support/summary_eq.hpp

}  // namespace

void test_summary_ring() {
  std::printf("[summary ring]\n");
  const std::size_t n = 3000;
  const int steps = quick() ? 20 : 60;
  gnmr::MaxO b;
  b.max_o = 3;
  b.lock = 4;
  for (std::uint32_t slots : {2u, 3u}) {
    gnmr::GnmrController<> host(n, {}, {}, {}, {}, b);
    gnmr::cuda::DeviceController<> dev(n, {}, {}, {}, {}, b);
    gnmr::cuda::SummaryRing<> ring(slots);
    gnmr::StepSummary got{};
    EXPECT(!ring.latest(got), "slots %u: latest() before any push returned a summary", slots);
    std::vector<gnmr::StepSummary> want(1);  // want[t]: the host summary of step t
    Dev<float> d_norms(n);
    std::vector<float> norms(n);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    std::int64_t last_seen = 0;
    int seen = 0;
    for (int t = 1; t <= steps; ++t) {
      tracegen::fill(4242, t, norms);
      want.push_back(host.step_norms(norms));
      CK(cudaMemcpyAsync(d_norms.p, norms.data(), n * sizeof(float), cudaMemcpyHostToDevice, st));
      CK(cudaStreamSynchronize(st));  // the pageable upload may return early; the test owns norms
      if (t == steps / 2) ring_spin<<<1, 1, 0, st>>>(200000000LL);  // ~0.1 s: the device is behind
      CK(dev.step_norms(d_norms.p, st));
      const auto t0 = std::chrono::steady_clock::now();
      CK(ring.push(dev.summary(), st));
      const bool have = ring.latest(got);
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (t == steps / 2) {
        EXPECT(ms < 50.0, "slots %u: push+latest took %.1f ms behind a spinning kernel", slots, ms);
        EXPECT(!have || got.step < t, "slots %u: latest() returned step %lld, still behind the spin",
               slots, static_cast<long long>(got.step));
      }
      if (have) {
        EXPECT(got.step >= 1 && got.step <= t, "slots %u: step %lld at t = %d", slots,
               static_cast<long long>(got.step), t);
        EXPECT(got.step >= last_seen, "slots %u: went back from step %lld to %lld", slots,
               static_cast<long long>(last_seen), static_cast<long long>(got.step));
        if (got.step >= 1 && got.step <= t)
          EXPECT(same_summary(got, want[static_cast<std::size_t>(got.step)]),
                 "slots %u: summary of step %lld differs from the host's", slots,
                 static_cast<long long>(got.step));
        last_seen = got.step;
        ++seen;
      }
    }
    const gnmr::StepSummary last = ring.wait_newest();
    EXPECT(same_summary(last, want.back()), "slots %u: wait_newest() is not the last step (%lld)",
           slots, static_cast<long long>(last.step));
    EXPECT(ring.latest(got) && got.step == steps, "slots %u: latest() after wait_newest()", slots);
    EXPECT(ring.pushed() == static_cast<std::uint64_t>(steps), "slots %u: pushed() = %llu", slots,
           static_cast<unsigned long long>(ring.pushed()));
    std::uint32_t events = 0;
    for (std::size_t t = 1; t < want.size(); ++t) events += want[t].granted + want[t].triggered;
    EXPECT(events > 0, "the trace produced no events (test's own expectation)");
    CK(cudaStreamDestroy(st));
    std::printf("    slots %u: %d of %d steps read without a sync\n", slots, seen, steps);
  }
}

}  // namespace gpu_test
