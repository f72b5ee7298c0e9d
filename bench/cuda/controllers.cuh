// bench/cuda/controllers.cuh — gnmr_bench_cuda's controller parts: the
// controller step three ways (one step between events, 100 back to back,
// a CUDA graph of 100) for the typed default controller (--only
// controller) and for controllers built by name (--only presets: the
// systemic rule's actions, layered controllers), and the step with
// TelemetryDrain::record (--only telemetry). Norm traces from tracegen.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
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
               {"stabilizer+gnmr-promote", {}, "make_device(\"stabilizer+gnmr-promote\")"},
               {"clip+gnmr", {}, "make_device(\"clip+gnmr\")"},
               {"gnmr-systemic", global_clip, "make_device(\"gnmr-systemic\", global-clip)"}};
  for (const auto& c : cases) {
    auto ctl = gnmr::cuda::make_device(c.name, n, c.opt);
    time_controller(n, c.label, [&](const float* d, cudaStream_t st) { return ctl->step_norms(d, st); }, s);
  }
  // The same pairs as make_device built them before issue 32: the generic
  // LayeredDeviceController (outer step, inner step, combine), for the
  // fused rows above to be read against in the same run.
  for (const char* inner : {"gnmr-calibrated", "gnmr-promote"}) {
    gnmr::cuda::LayeredDeviceController ctl(gnmr::cuda::make_device("stabilizer", n),
                                            gnmr::cuda::make_device(inner, n));
    time_controller(n, std::string("LayeredDeviceController(stabilizer, ") + inner + ") (generic)",
                    [&](const float* d, cudaStream_t st) { return ctl.step_norms(d, st); }, s);
  }
}

// A calm trace: every unit near its own level (2% noise), and two units a
// step 30 times theirs, so a step has a handful of events (their triggers,
// grants and releases) as a healthy run's steps do.
inline gnmr::cuda::DeviceBuffer upload_calm_trace(std::size_t n) {
  const int kSteps = trace_steps(n);
  std::vector<float> h(n * kSteps);
  for (int t = 0; t < kSteps; ++t)
    for (std::size_t i = 0; i < n; ++i) {
      const double base = std::exp(6.0 * tracegen::uniform(11, i, 0, 1) - 3.0);
      double x = base * (1.0 + 0.02 * (tracegen::uniform(11, i, static_cast<std::uint64_t>(t), 2) - 0.5));
      if (i == (static_cast<std::size_t>(t) * 7919u) % n || i == (static_cast<std::size_t>(t) * 104729u + 1u) % n)
        x *= 30.0;
      h[static_cast<std::size_t>(t) * n + i] = static_cast<float>(x);
    }
  gnmr::cuda::DeviceBuffer d(h.size() * sizeof(float));
  BK(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

// The controller step followed by TelemetryDrain::record (the compaction
// kernel writing into a pinned slot; the previous step's lines written to an
// EventLog on /dev/null), 100 steps back to back, against the controller
// alone in the same run: what per-step telemetry costs. Two traces: the
// contended one of the controller rows (hundreds to thousands of unit
// events on every step: the host's formatting of those lines is part of
// the cost) and a calm one (a handful). `label` names the controller: the
// typed DeviceController<> or make_device("default").
template <class Ctl>
void time_telemetry(std::size_t n, const std::string& label, Ctl& ctl, bool calm, cudaStream_t s) {
  const int kSteps = trace_steps(n);
  gnmr::cuda::DeviceBuffer d = calm ? upload_calm_trace(n) : upload_trace(n);
  std::FILE* sink = std::fopen("/dev/null", "w");
  if (sink == nullptr) return;
  {
    gnmr::EventLog log(sink);
    gnmr::cuda::TelemetryDrain drain(n);
    int t = 0;
    const auto step = [&](bool telemetry) {
      BK(ctl.step_norms(d.as<float>() + static_cast<std::size_t>(t % kSteps) * n, s));
      if (telemetry) drain.record(ctl, log, s);
      ++t;
    };
    for (int i = 0; i < 2 * kSteps; ++i) step(true);
    // Unit events per step over one pass of the trace (the summary's counts).
    double events = 0;
    for (int i = 0; i < kSteps; ++i) {
      step(false);
      BK(cudaStreamSynchronize(s));
      const gnmr::StepSummary sm = ctl.copy_summary();
      events += sm.triggered + sm.granted + sm.denied + sm.released + sm.nonfinite;
    }
    char lay[96];
    std::snprintf(lay, sizeof lay, "%zu units, %s trace, %.0f events/step", n, calm ? "calm" : "contended",
                  events / kSteps);
    const int kBatch = 100;
    const double alone = median_ms([&] { for (int i = 0; i < kBatch; ++i) step(false); }, s, 7, 1) / kBatch;
    report(label + " step alone (100 back-to-back)", lay, alone, 0, 0, "-");
    const double with = median_ms([&] { for (int i = 0; i < kBatch; ++i) step(true); }, s, 7, 1) / kBatch;
    report(label + " step + TelemetryDrain::record (100 back-to-back)", lay, with, 0, 0, "<= 1.05 x alone");
    drain.flush(log);
    // The same with a log that writes no line (event mask 0): the drain's
    // device and API cost without the host's formatting of the lines.
    gnmr::EventLogOptions none;
    none.events = 0u;
    gnmr::EventLog quiet(sink, none);
    const double bare = median_ms(
        [&] {
          for (int i = 0; i < kBatch; ++i) {
            BK(ctl.step_norms(d.as<float>() + static_cast<std::size_t>(t % kSteps) * n, s));
            drain.record(ctl, quiet, s);
            ++t;
          }
        },
        s, 7, 1) / kBatch;
    report(label + " step + record, no lines written (100 back-to-back)", lay, bare, 0, 0, "-");
    drain.flush(quiet);
  }
  std::fclose(sink);
}

inline void bench_telemetry(std::size_t n, cudaStream_t s) {
  for (bool calm : {true, false}) {
    gnmr::cuda::DeviceController<> ctl(n);
    time_telemetry(n, "controller", ctl, calm, s);
  }
  auto def = gnmr::cuda::make_device("default", n);
  time_telemetry(n, "make_device(\"default\")", *def, true, s);
}

}  // namespace bench
