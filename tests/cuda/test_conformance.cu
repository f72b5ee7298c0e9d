// GPU test, conformance: every device controller entry docs/api.md and
// docs/cuda.md document, called through one template on every device
// controller kind a user meets — the typed DeviceController<...>, a
// DynDeviceController from make_device, the generic layered one, and the
// recommended controller (gnmr::cuda::make_default: DefaultDeviceController,
// the fused layered step) — so a documented call one kind lacks fails the
// build of gnmr_cuda_tests (nvcc, on every machine with nvcc), and one that
// misbehaves fails here on a GPU. The entries: the step with and without a
// stream, from partials and norms, in a CUDA graph; the device results and
// step counter; the blocking copies; the state blob (member and free forms);
// a reducer over ranks (reduce_and_step on a stream); the summary ring, the
// telemetry drain, the guarded AdamW and the accessors in a kernel.
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gnmr/comm/reducer.hpp"
#include "gnmr/cuda/all.cuh"
#include "gnmr/presets/make.hpp"
#include "harness.cuh"

namespace gpu_test {
namespace {

// A device reducer as NcclReducer is one (allreduce on a stream), for one rank.
struct OneRankReducer {
  int calls = 0;
  void allreduce(float*, std::size_t, gnmr::Combine, cudaStream_t) { ++calls; }
};

// A user's kernel reading the decisions with the accessors.
__global__ void sgd_kernel(float* w, const float* g, std::uint32_t n, const gnmr::UnitDecision* dec,
                           const gnmr::StepSummary* summary, const std::int64_t* step) {
  if (gnmr::cuda::step_skipped(summary) || *step < 1) return;
  const gnmr::UnitDecision d = gnmr::cuda::decision(dec, 0);
  const bool reset = gnmr::cuda::reset_moments(d);
  const bool promoted = gnmr::cuda::promote(d) || gnmr::cuda::unit_promoted(dec, 0);
  (void)reset;
  (void)promoted;
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    w[i] = gnmr::cuda::apply_guarded(d, w[i], w[i] - 1e-3f * gnmr::cuda::grad_scale(d) * g[i]);
}

template <class Ctl>
void exercise(Ctl& ctl, const std::string& kind) {
  std::printf("  %s\n", kind.c_str());
  const std::size_t n = ctl.num_units();
  std::vector<float> partials(n, 1.0f);
  Dev<float> d(n), w(1024), g(1024);
  CK(cudaMemset(w.p, 0, 1024 * sizeof(float)));
  CK(cudaMemset(g.p, 0, 1024 * sizeof(float)));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const std::vector<std::uint64_t> numel(n, 64);
  ctl.set_unit_numel(numel.data(), n);
  EXPECT(ctl.partial_combine() == gnmr::Combine::kSum, "%s: partial_combine", kind.c_str());
  EXPECT(ctl.max_in_recovery() >= 1u && !ctl.name().empty(), "%s: identity", kind.c_str());
  gnmr::cuda::SummaryRing<> ring;
  gnmr::cuda::TelemetryDrain drain(n);
  std::ostringstream events;
  gnmr::EventLog log(events);
  OneRankReducer reducer;
  int steps = 0;
  for (int s = 1; s <= 24; ++s) {
    for (std::size_t i = 0; i < n; ++i) partials[i] = 1.0f + 0.01f * static_cast<float>((s + i) % 3);
    if (s == 22) partials[0] = 1e6f;
    d.upload(partials);
    switch (s % 4) {
      case 0: CK(ctl.step(d.p)); break;                       // the default stream
      case 1: CK(ctl.step(d.p, 0)); break;
      case 2: CK(gnmr::reduce_and_step(ctl, reducer, d.p, n, cudaStream_t{0})); break;
      default: CK(ctl.step_norms(d.p)); break;  // these partials read as norms: still a step
    }
    ++steps;
    ring.push(ctl.summary(), 0);
    drain.record(ctl, log, 0);
    sgd_kernel<<<4, 256>>>(w.p, g.p, 1024, ctl.decisions(), ctl.summary(), ctl.steps_done_device());
    CK(cudaGetLastError());
  }
  drain.flush(log);
  EXPECT(reducer.calls == 6, "%s: reduce_and_step reached the reducer %d times", kind.c_str(), reducer.calls);
  // In a CUDA graph, on a user stream.
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  const cudaError_t cap = ctl.step(d.p, st);
  CK(cudaStreamEndCapture(st, &graph));
  CK(cap);
  CK(cudaGraphInstantiate(&exec, graph, 0));
  CK(cudaGraphLaunch(exec, st));
  ++steps;
  CK(cudaStreamSynchronize(st));
  const gnmr::StepSummary last = ring.wait_newest();
  EXPECT(ctl.steps_done() == steps && ctl.copy_summary().step == steps && last.step >= 1,
         "%s: step counters %lld / %lld", kind.c_str(), static_cast<long long>(ctl.steps_done()),
         static_cast<long long>(ctl.copy_summary().step));
  EXPECT(ctl.copy_decisions().size() == n && ctl.copy_reports().size() == n, "%s: copies", kind.c_str());
  gnmr::StepSummary async{};
  CK(ctl.copy_summary_async(&async, st));
  CK(cudaStreamSynchronize(st));
  EXPECT(async.step == steps, "%s: copy_summary_async", kind.c_str());
  EXPECT(events.str().find("\"event\":\"trigger\"") != std::string::npos, "%s: the spike's event", kind.c_str());
  // State: member and free forms; a corrupted blob refused, nothing changed.
  const std::vector<std::uint8_t> blob = ctl.save();
  EXPECT(gnmr::save_state(ctl) == blob, "%s: save_state", kind.c_str());
  ctl.reset();
  EXPECT(ctl.steps_done() == 0, "%s: reset", kind.c_str());
  ctl.load(blob);
  gnmr::load_state(ctl, blob.data(), blob.size());
  gnmr::load_state(ctl, blob);
  EXPECT(ctl.save() == blob, "%s: load", kind.c_str());
  std::vector<std::uint8_t> bad = blob;
  bad[bad.size() / 2] ^= 0x5a;
  bool threw = false;
  try {
    ctl.load(bad.data(), bad.size(), gnmr::StateLoadOptions{});
  } catch (const gnmr::StateError&) {
    threw = true;
  }
  EXPECT(threw && ctl.save() == blob, "%s: a corrupted blob must be refused and change nothing", kind.c_str());
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(st);
}

}  // namespace

void test_conformance_device() {
  std::printf("[conformance: every documented device entry on every controller kind]\n");
  {
    gnmr::cuda::DeviceController<> c(8);
    exercise(c, "DeviceController<>");
  }
  {
    auto c = make_dev("gnmr", 8);
    exercise(*c, "make_device(gnmr)");
  }
  {
    auto c = make_dev("stabilizer+gnmr", 8);
    exercise(*c, "make_device(stabilizer+gnmr): LayeredDeviceController");
  }
  {
    std::unique_ptr<gnmr::cuda::DefaultDeviceController> c = gnmr::cuda::make_default(8);
    exercise(*c, "cuda::make_default: DefaultDeviceController");
  }
}

}  // namespace gpu_test
