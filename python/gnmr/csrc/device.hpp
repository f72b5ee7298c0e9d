// python/gnmr/csrc/device.hpp — the CUDA side of the Python binding, behind
// an interface with neither CUDA nor torch headers.
//
// Only raw device pointers, element counts and a cudaStream_t passed as an
// integer cross this boundary (as demo/cuda_backend.hpp does), so device.cu
// is compiled by nvcc without any torch header and builds against every
// torch, CPU-only ones included; the torch side (cuda.cpp) is compiled by
// the host compiler and never includes cuda_runtime.h. device_none.cpp
// stands in when the package is built without CUDA: cuda_built() is false
// and every constructor throws.
//
// What runs where: DeviceController::step() enqueues the per-unit norms
// (gnmr::cuda::NormPlan), the controller step (gnmr::cuda::make_device) and
// an asynchronous copy of the summary and the decisions into one of
// kReadbackSlots pinned host slots, all on the caller's stream: no
// allocation, no synchronisation. wait(slot) synchronises with that copy
// only. Plans (set_segments, DeviceAdamW's constructor) are setup-time
// work: they allocate and synchronise the device.
//
// Determinism: the norms are NormPlan's fixed-order reduction and the
// decisions are the DeviceController's, bit-identical to the host
// controller's on the same norms (tests/cuda/test_controller.cu); the AdamW
// update is gnmr::detail::adamw_element, the same bits as the host replay
// the CPU path of gnmr.optim.AdamW runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gnmr/core/types.hpp"
#include "gnmr/host/unit_norms.hpp"
#include "gnmr/plan/adamw_plan.hpp"
#include "gnmr/presets/table.hpp"

namespace gnmr_py {

// True when this build has the CUDA glue (device.cu, compiled by nvcc).
bool cuda_built();
// Whether `stream` is being captured into a CUDA graph.
bool stream_capturing(std::uintptr_t stream, int device);

// Pinned slots the summaries and decisions of recent steps are copied to;
// a Python summary older than this many steps is materialised (read) by
// the controller before its slot is reused.
constexpr int kReadbackSlots = 4;

class DeviceController {
 public:
  // presets::make's names and options, on `device`; the CUDA twin of
  // presets::make (gnmr::cuda::make_device). Setup time.
  DeviceController(const std::string& preset, const gnmr::presets::Options& options,
                   std::size_t num_units, const std::vector<std::string>& names, int device);
  ~DeviceController();
  DeviceController(const DeviceController&) = delete;
  DeviceController& operator=(const DeviceController&) = delete;

  std::size_t num_units() const;
  std::string name() const;
  std::uint32_t max_in_recovery() const;
  int device() const;

  // A device float holding 0: the segment of a unit none of whose tensors
  // has a gradient this step (its norm is then 0: "not a sample").
  const void* zero_segment() const;
  // A new NormPlan over these device segments (allocates, synchronises).
  void set_segments(const std::vector<gnmr::Segment>& segs);

  // The readback slot the next step will use when not capturing.
  int next_slot() const;
  // Enqueues one step on `stream`; returns its readback slot, or -1 while
  // the stream is being captured (nothing is copied back then). Writes the
  // event log and the trace a step late when they are open (not allowed
  // under capture: std::runtime_error).
  // aux: a device array of each unit's aux partials (UnitView::aux: the
  // noise-floor trigger's quantization noise), or null.
  int step(std::uintptr_t stream, const float* aux = nullptr);
  bool needs_aux() const;
  // The two halves of step() for the sharded path: the per-unit partials of
  // the plan's segments into the device array out (num_units floats), and a
  // step on a device array of (reduced) partials. Enqueue only.
  void partials(float* out, std::uintptr_t stream);
  int step_from(const float* partials, std::uintptr_t stream, const float* aux = nullptr);
  bool ready(int slot) const;
  void wait(int slot) const;  // synchronises with that step's copy only
  // The slot's host copies; valid after wait(slot).
  gnmr::StepSummary slot_summary(int slot) const;
  const gnmr::UnitDecision* slot_decisions(int slot) const;

  // Device arrays the guarded AdamW reads.
  const gnmr::UnitDecision* device_decisions() const;
  const gnmr::StepSummary* device_summary() const;

  // Blocking copies (they synchronise the device).
  gnmr::StepSummary copy_summary() const;
  std::vector<gnmr::UnitDecision> copy_decisions() const;
  std::vector<gnmr::UnitReport> copy_reports() const;
  std::int64_t steps_done() const;
  std::vector<std::uint8_t> save() const;
  void load(const std::uint8_t* data, std::size_t size);  // gnmr::StateError
  void reset();

  void open_events(const std::string& path, bool nonfinite_as_null, bool append = false);
  // aux_path: also the aux trace (each unit's finished aux norm a step), for
  // a controller that reads aux (std::invalid_argument otherwise).
  void open_trace(const std::string& path, bool append = false, std::int64_t last_step = 0,
                  const std::string& aux_path = std::string());
  void close_events();
  void close_trace();
  void flush();  // waits for every recorded step and writes it
  bool tracing() const;
  std::int64_t last_trace_step() const;
  std::uint64_t events_dropped() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One AdamWPlan (one parameter group) on the device.
class DeviceAdamW {
 public:
  DeviceAdamW(const std::vector<gnmr::AdamWTensor>& tensors, std::size_t num_units, int device,
              const std::vector<gnmr::AdamWUnitState>& states);
  ~DeviceAdamW();
  DeviceAdamW(const DeviceAdamW&) = delete;
  DeviceAdamW& operator=(const DeviceAdamW&) = delete;

  // Enqueue only. d_lr: a device float overriding h.lr, or null.
  void step(const gnmr::AdamWParams& h, const float* d_lr, const gnmr::UnitDecision* decisions,
            const gnmr::StepSummary* summary, std::uintptr_t stream);
  // Per-unit bias-correction state (blocking copy / synchronous upload).
  std::vector<gnmr::AdamWUnitState> states() const;
  void set_states(const std::vector<gnmr::AdamWUnitState>& states);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gnmr_py
