// bench/cuda/controllers.cuh — gnmr_bench_cuda's controller parts: the
// controller step three ways (one step between events, 100 back to back,
// a CUDA graph of 100) for the typed default controller (--only
// controller) and for controllers built by name (--only presets: the
// systemic rule's actions, layered controllers), and the step with
// TelemetryDrain::record (--only telemetry). Norm traces from tracegen.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "../../tests/support/trace_gen.hpp"
#include "gnmr/cuda/all.cuh"
#include "harness.cuh"

namespace bench {

// kSteps steps of n unit norms (tracegen: past the warm-up some units
// trigger, are granted or denied every step), on the device.
inline int trace_steps(std::size_t n) { return n > 100000 ? 8 : 64; }
inline gnmr::cuda::DeviceBuffer upload_trace(std::size_t n) {
  const int kSteps = trace_steps(n);
  std::vector<float> h(n * kSteps);
  std::vector<float> one(n);
  for (int t = 0; t < kSteps; ++t) {
    tracegen::fill(7, t + 1, one);
    std::copy(one.begin(), one.end(), h.begin() + static_cast<std::ptrdiff_t>(t * n));
  }
  gnmr::cuda::DeviceBuffer d(h.size() * sizeof(float));
  BK(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

// The controller step three ways. `step_norms(norms, stream)` is the controller
// under test: the typed DeviceController<> (the default preset) or one built
// by name through cuda::make_device (`label` names it in the table).
template <class StepNorms>
void time_controller(std::size_t n, const std::string& label, StepNorms&& step_norms, cudaStream_t s) {
  const int kSteps = trace_steps(n);
  gnmr::cuda::DeviceBuffer d = upload_trace(n);
  int t = 0;
  const auto one_step = [&] {
    BK(step_norms(d.as<float>() + static_cast<std::size_t>(t % kSteps) * n, s));
    ++t;
  };
  for (int i = 0; i < 2 * kSteps; ++i) one_step();  // past the warm-up: triggers, grants, denials
  const std::string lay = std::to_string(n) + " units";
  const double single = median_ms(one_step, s);
  const std::string target = n == 10000 && label == "controller step" ? "<= 0.020 ms" : "-";
  report(label + " (1 step, stream)", lay, single, 0, 0, target);
  const int kBatch = 100;
  const double batch = median_ms([&] { for (int i = 0; i < kBatch; ++i) one_step(); }, s, 7, 1) / kBatch;
  report(label + " (100 back-to-back)", lay, batch, 0, 0, target);
  cudaGraph_t g;
  cudaGraphExec_t ge;
  BK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < kBatch; ++i) BK(step_norms(d.as<float>() + static_cast<std::size_t>(i % kSteps) * n, s));
  BK(cudaStreamEndCapture(s, &g));
  BK(cudaGraphInstantiate(&ge, g, 0));
  const double graph = median_ms([&] { BK(cudaGraphLaunch(ge, s)); }, s, 7, 1) / kBatch;
  report(label + " (graph of 100)", lay, graph, 0, 0, target);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
}

inline void bench_controller(std::size_t n, cudaStream_t s) {
  gnmr::cuda::DeviceController<> ctl(n);
  time_controller(n, "controller step", [&](const float* d, cudaStream_t st) { return ctl.step_norms(d, st); }, s);
}

// Controllers by name (issues 11 and 20): the systemic rule's actions and the
// layered controllers, each against the same norm trace as the default row.
inline void bench_presets(std::size_t n, cudaStream_t s) {
  gnmr::presets::Options global_clip;
  global_clip.systemic_action = "global-clip";
  const struct {
    const char* name;
    gnmr::presets::Options opt;
    const char* label;
  } cases[] = {{"gnmr", {}, "make_device(\"gnmr\")"},
               {"gnmr-systemic", {}, "make_device(\"gnmr-systemic\")"},
               {"stabilizer+gnmr", {}, "make_device(\"stabilizer+gnmr\")"},
               {"gnmr-calibrated", {}, "make_device(\"gnmr-calibrated\")"},
               {"default", {}, "make_device(\"default\") (stabilizer+gnmr-calibrated)"},
               {"clip+gnmr", {}, "make_device(\"clip+gnmr\")"},
               {"gnmr-systemic", global_clip, "make_device(\"gnmr-systemic\", global-clip)"}};
  for (const auto& c : cases) {
    auto ctl = gnmr::cuda::make_device(c.name, n, c.opt);
    time_controller(n, c.label, [&](const float* d, cudaStream_t st) { return ctl->step_norms(d, st); }, s);
  }
}

// The controller step followed by TelemetryDrain::record (compaction kernel,
// two copies to pinned memory, the previous step's lines written to an
// EventLog on /dev/null), 100 steps back to back, against the controller
// alone in the same run: what per-step telemetry costs.
inline void bench_telemetry(std::size_t n, cudaStream_t s) {
  const int kSteps = trace_steps(n);
  gnmr::cuda::DeviceBuffer d = upload_trace(n);
  std::FILE* sink = std::fopen("/dev/null", "w");
  if (sink == nullptr) return;
  {
    gnmr::EventLog log(sink);
    gnmr::cuda::DeviceController<> ctl(n);
    gnmr::cuda::TelemetryDrain drain(n);
    int t = 0;
    const auto step = [&](bool telemetry) {
      BK(ctl.step_norms(d.as<float>() + static_cast<std::size_t>(t % kSteps) * n, s));
      if (telemetry) drain.record(ctl, log, s);
      ++t;
    };
    for (int i = 0; i < 2 * kSteps; ++i) step(true);
    const std::string lay = std::to_string(n) + " units";
    const int kBatch = 100;
    const double alone = median_ms([&] { for (int i = 0; i < kBatch; ++i) step(false); }, s, 7, 1) / kBatch;
    report("controller step alone (100 back-to-back)", lay, alone, 0, 0, "-");
    const double with = median_ms([&] { for (int i = 0; i < kBatch; ++i) step(true); }, s, 7, 1) / kBatch;
    report("controller step + TelemetryDrain::record (100 back-to-back)", lay, with, 0, 0, "-");
    drain.flush(log);
  }
  std::fclose(sink);
}

}  // namespace bench
