// tests/cuda/test_telemetry.cu — the CUDA event log against the host's.
//
// The device controller and the host controller run the same contended
// trace; the device's log goes through TelemetryDrain (the compaction
// kernel writes into mapped pinned memory; the host writes it a step late),
// the host's through EventLog::write. The two JSON Lines texts must be
// identical. A run with capacity 2 checks that overflow is counted, not
// silently lost; one of 300,000 units (293 drain blocks) that the last
// block's gather is right across chunks of block starts.
#include <sstream>
#include <string>
#include <vector>

#include "gnmr/cuda/controller.cuh"
#include "gnmr/host/controller.hpp"
#include "gnmr/cuda/telemetry.cuh"
#include "harness.cuh"
#include "../support/trace_gen.hpp"

namespace gpu_test {

void test_telemetry() {
  std::printf("[telemetry drain]\n");
  gnmr::MaxO b;
  b.max_o = 3;
  b.lock = 4;
  // (units, steps, capacity): 2 blocks of the drain with room for every
  // event, then with capacity 2 (overflow); then 293 blocks, so the last
  // block's gather walks two chunks of 256 block starts, with room for all.
  struct Case {
    std::size_t n;
    int steps;
    std::uint32_t cap;
  };
  const std::size_t big = quick() ? 20000 : 300000;
  for (const Case c : {Case{2000, 80, 1024u}, Case{2000, 80, 2u}, Case{big, 24, static_cast<std::uint32_t>(big)}}) {
    const std::size_t n = c.n;
    const int steps = c.steps;
    const std::uint32_t cap = c.cap;
    gnmr::GnmrController<> host(n, {}, {}, {}, {}, b);
    gnmr::cuda::DeviceController<> dev(n, {}, {}, {}, {}, b);
    gnmr::cuda::TelemetryDrain drain(n, cap);
    std::ostringstream want_s, got_s;
    gnmr::EventLog want(want_s), got(got_s);
    Dev<float> d_norms(n);
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    std::uint64_t events = 0, expect_dropped = 0;
    std::vector<float> norms(n);
    for (int t = 1; t <= steps; ++t) {
      tracegen::fill(777, t, norms);
      host.step_norms(norms);
      want.write_from(host);
      std::uint32_t with_events = 0;
      for (const auto& r : host.reports())
        with_events += (r.flags & (gnmr::kTriggered | gnmr::kGranted | gnmr::kDenied |
                                   gnmr::kReleased | gnmr::kNonFinite)) != 0u;
      events += with_events;
      expect_dropped += with_events > cap ? with_events - cap : 0;
      CK(cudaMemcpyAsync(d_norms.p, norms.data(), n * sizeof(float), cudaMemcpyHostToDevice, st));
      CK(dev.step_norms(d_norms.p, st));
      drain.record(dev, got, st);
    }
    drain.flush(got);
    want.flush();
    CK(cudaStreamSynchronize(st));
    CK(cudaStreamDestroy(st));
    EXPECT(events > 0, "cap %u: the trace produced no events (test's own expectation)", cap);
    EXPECT(drain.dropped() == expect_dropped, "cap %u: dropped %llu, expected %llu", cap,
           static_cast<unsigned long long>(drain.dropped()),
           static_cast<unsigned long long>(expect_dropped));
    if (cap >= 1024) {  // room for every event
      EXPECT(got_s.str() == want_s.str(), "device log differs from the host log (%zu vs %zu bytes)",
             got_s.str().size(), want_s.str().size());
    } else {
      EXPECT(expect_dropped > 0, "cap %u: nothing overflowed (test's own expectation)", cap);
      EXPECT(got_s.str().size() < want_s.str().size(), "cap %u: overflow not reflected", cap);
    }
    std::printf("    cap %u: %llu unit events over %d steps, %llu dropped\n", cap,
                static_cast<unsigned long long>(events), steps,
                static_cast<unsigned long long>(drain.dropped()));
  }
}

}  // namespace gpu_test
