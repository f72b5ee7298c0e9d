// python/gnmr/csrc/device.cu — the CUDA glue of the Python binding (see
// device.hpp): gnmr's NormPlan, device controller, fused guarded AdamW and
// telemetry drain over the raw device pointers of torch's tensors.
//
// No torch header: nvcc compiles this file on its own, so the same source
// builds against a CPU-only torch (CI compiles it through the CMake target
// gnmr_py_cuda_glue) and against PyTorch's CUDA wheels (pip, for the GPU's
// architecture). Every per-step entry point only enqueues work on the
// stream it is given; constructors, plans, blocking copies and flush() are
// setup or debugging paths and may synchronise.
#include "device.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gnmr/cuda/adamw.cuh"
#include "gnmr/cuda/error.cuh"
#include "gnmr/cuda/memory.cuh"
#include "gnmr/cuda/presets.cuh"
#include "gnmr/cuda/telemetry.cuh"
#include "gnmr/cuda/unit_norms.cuh"
#include "drains.cuh"
#include "logs.hpp"

namespace gnmr_py {

using gnmr::cuda::check;
using detail::kSummaryBytes;
using detail::PinnedSlot;
using gnmr::cuda::event_done;
using detail::TraceDrain;

namespace {

cudaStream_t as_stream(std::uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

// Calls run on the controller's device whatever torch's current device is,
// and leave the caller's current device as it was.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check(cudaGetDevice(&prev_), "gnmr: cudaGetDevice");
    if (prev_ != device) check(cudaSetDevice(device), "gnmr: cudaSetDevice");
    else prev_ = -1;
  }
  ~DeviceGuard() {
    if (prev_ >= 0) cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

bool capturing(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(s, &st), "gnmr: cudaStreamIsCapturing");
  return st != cudaStreamCaptureStatusNone;
}

}  // namespace

bool cuda_built() { return true; }

bool stream_capturing(std::uintptr_t stream, int device) {
  DeviceGuard g(device);
  return capturing(as_stream(stream));
}

// ------------------------------------------------------- DeviceController ----
struct DeviceController::Impl {
  int device = 0;
  std::size_t n = 0;
  std::unique_ptr<gnmr::cuda::DynDeviceController> ctl;
  std::unique_ptr<gnmr::cuda::NormPlan> plan;
  gnmr::cuda::DeviceBuffer partials;
  gnmr::cuda::DeviceBuffer zero;
  PinnedSlot ring[kReadbackSlots];
  int next = 0;
  Logs logs;
  std::unique_ptr<gnmr::cuda::TelemetryDrain> drain;
  std::unique_ptr<TraceDrain> tdrain;

  explicit Impl(const std::vector<std::string>& names) : logs(names) {}
  ~Impl() {
    for (PinnedSlot& s : ring) s.destroy();
  }
  PinnedSlot& slot(int s) {
    if (s < 0 || s >= kReadbackSlots) throw std::invalid_argument("gnmr: invalid readback slot");
    return ring[s];
  }
};

DeviceController::DeviceController(const std::string& preset, const gnmr::presets::Options& options,
                                   std::size_t num_units, const std::vector<std::string>& names,
                                   int device)
    : impl_(new Impl(names)) {
  Impl& I = *impl_;
  if (names.size() != num_units) throw std::invalid_argument("gnmr: one name per unit expected");
  I.device = device;
  DeviceGuard g(device);
  I.ctl = gnmr::cuda::make_device(preset, num_units, options);
  I.n = num_units;
  I.partials = gnmr::cuda::DeviceBuffer(num_units * sizeof(float), "gnmr: partials");
  I.zero = gnmr::cuda::DeviceBuffer(16, "gnmr: zero segment");
  check(cudaMemset(I.zero.get(), 0, 16), "gnmr: zero segment");
  for (PinnedSlot& s : I.ring)
    s.create(kSummaryBytes + num_units * sizeof(gnmr::UnitDecision), "gnmr: readback slot");
  gnmr::cuda::device_barrier("gnmr: DeviceController setup");
}

// Closing writes the steps the drains still hold (the log runs a step late).
DeviceController::~DeviceController() {
  try {
    close_events();
    close_trace();
  } catch (...) {
  }
}

std::size_t DeviceController::num_units() const { return impl_->n; }
std::string DeviceController::name() const { return impl_->ctl->name(); }
std::uint32_t DeviceController::max_in_recovery() const { return impl_->ctl->max_in_recovery(); }
int DeviceController::device() const { return impl_->device; }
const void* DeviceController::zero_segment() const { return impl_->zero.get(); }

void DeviceController::set_segments(const std::vector<gnmr::Segment>& segs) {
  Impl& I = *impl_;
  DeviceGuard g(I.device);
  // Built before the old plan is dropped: an invalid layout leaves it.
  std::unique_ptr<gnmr::cuda::NormPlan> p(new gnmr::cuda::NormPlan(segs, I.n));
  gnmr::cuda::device_barrier("gnmr: NormPlan swap");  // no step in flight reads the old plan
  I.plan = std::move(p);
}

int DeviceController::next_slot() const { return impl_->next; }

int DeviceController::step(std::uintptr_t stream, const float* aux) {
  partials(impl_->partials.as<float>(), stream);
  return step_from(impl_->partials.as<float>(), stream, aux);
}

bool DeviceController::needs_aux() const { return impl_->ctl->needs_aux(); }

void DeviceController::partials(float* out, std::uintptr_t stream) {
  Impl& I = *impl_;
  DeviceGuard g(I.device);
  if (!I.plan) throw std::logic_error("gnmr: DeviceController::step before set_segments");
  check(gnmr::cuda::unit_partials<gnmr::L2Norm>(*I.plan, out, as_stream(stream)), "gnmr: unit_partials");
}

int DeviceController::step_from(const float* partials, std::uintptr_t stream, const float* aux) {
  Impl& I = *impl_;
  DeviceGuard g(I.device);
  const cudaStream_t s = as_stream(stream);
  const bool cap = capturing(s);
  if (cap && (I.drain || I.tdrain))
    throw std::runtime_error(
        "gnmr: events() and trace() cannot record inside a CUDA graph capture (their host writes "
        "would be baked into the graph); close them with events(None) / trace(None) first");
  check(aux ? I.ctl->step_with_aux(partials, aux, s) : I.ctl->step(partials, s), "gnmr: controller step");
  int slot = -1;
  if (!cap) {
    slot = I.next;
    I.next = (I.next + 1) % kReadbackSlots;
    PinnedSlot& sl = I.ring[slot];
    check(I.ctl->copy_summary_async(reinterpret_cast<gnmr::StepSummary*>(sl.host), s),
          "gnmr: copy summary");
    check(cudaMemcpyAsync(sl.host + kSummaryBytes, I.ctl->decisions(), I.n * sizeof(gnmr::UnitDecision),
                          cudaMemcpyDeviceToHost, s),
          "gnmr: copy decisions");
    check(cudaEventRecord(sl.done, s), "gnmr: cudaEventRecord");
    sl.pending = true;
    if (I.drain) I.drain->record(*I.ctl, *I.logs.events(), s, I.logs.names().data());
    if (I.tdrain) I.tdrain->record(*I.ctl, I.logs, s);
  }
  return slot;
}

bool DeviceController::ready(int slot) const {
  PinnedSlot& s = impl_->slot(slot);
  if (!s.pending) return true;
  DeviceGuard g(impl_->device);
  if (!event_done(s.done, "gnmr: cudaEventQuery")) return false;
  s.pending = false;
  return true;
}

void DeviceController::wait(int slot) const {
  PinnedSlot& s = impl_->slot(slot);
  if (!s.pending) return;
  DeviceGuard g(impl_->device);
  check(cudaEventSynchronize(s.done), "gnmr: cudaEventSynchronize");
  s.pending = false;
}

gnmr::StepSummary DeviceController::slot_summary(int slot) const {
  gnmr::StepSummary s;
  std::memcpy(&s, impl_->slot(slot).host, sizeof s);
  return s;
}

const gnmr::UnitDecision* DeviceController::slot_decisions(int slot) const {
  return reinterpret_cast<const gnmr::UnitDecision*>(impl_->slot(slot).host + kSummaryBytes);
}

const gnmr::UnitDecision* DeviceController::device_decisions() const { return impl_->ctl->decisions(); }
const gnmr::StepSummary* DeviceController::device_summary() const { return impl_->ctl->summary(); }

gnmr::StepSummary DeviceController::copy_summary() const {
  DeviceGuard g(impl_->device);
  return impl_->ctl->copy_summary();
}
std::vector<gnmr::UnitDecision> DeviceController::copy_decisions() const {
  DeviceGuard g(impl_->device);
  return impl_->ctl->copy_decisions();
}
std::vector<gnmr::UnitReport> DeviceController::copy_reports() const {
  DeviceGuard g(impl_->device);
  return impl_->ctl->copy_reports();
}
std::int64_t DeviceController::steps_done() const {
  DeviceGuard g(impl_->device);
  return impl_->ctl->steps_done();
}
std::vector<std::uint8_t> DeviceController::save() const {
  DeviceGuard g(impl_->device);
  return impl_->ctl->save();
}
void DeviceController::load(const std::uint8_t* data, std::size_t size) {
  DeviceGuard g(impl_->device);
  impl_->ctl->load(data, size);
}
void DeviceController::reset() {
  DeviceGuard g(impl_->device);
  impl_->ctl->reset();
}

void DeviceController::open_events(const std::string& path, bool nonfinite_as_null, bool append) {
  Impl& I = *impl_;
  DeviceGuard g(I.device);
  if (I.drain) I.drain->flush(*I.logs.events(), I.logs.names().data());
  // Room for every unit's event up to 64K units; beyond that, events past
  // the capacity of one step are counted in events_dropped().
  const std::uint32_t cap = static_cast<std::uint32_t>(I.n < 65536 ? I.n : 65536);
  std::unique_ptr<gnmr::cuda::TelemetryDrain> d(new gnmr::cuda::TelemetryDrain(I.n, cap));
  I.logs.open_events(path, nonfinite_as_null, append);
  I.drain = std::move(d);
}

void DeviceController::open_trace(const std::string& path, bool append, std::int64_t last_step,
                                  const std::string& aux_path) {
  Impl& I = *impl_;
  DeviceGuard g(I.device);
  if (!aux_path.empty() && I.ctl->aux_norms() == nullptr)
    throw std::invalid_argument("gnmr: an aux trace needs a controller whose trigger reads aux (" + I.ctl->name() +
                                " reads none)");
  if (I.tdrain) I.tdrain->flush(I.logs);
  std::unique_ptr<TraceDrain> d(new TraceDrain(I.n, !aux_path.empty()));
  I.logs.open_trace(path, append, last_step, aux_path);
  I.tdrain = std::move(d);
}

void DeviceController::close_events() {
  Impl& I = *impl_;
  if (!I.drain) return;
  DeviceGuard g(I.device);
  I.drain->flush(*I.logs.events(), I.logs.names().data());
  I.drain.reset();
  I.logs.close_events();
}

void DeviceController::close_trace() {
  Impl& I = *impl_;
  if (!I.tdrain) return;
  DeviceGuard g(I.device);
  I.tdrain->flush(I.logs);
  I.tdrain.reset();
  I.logs.close_trace();
}

void DeviceController::flush() {
  Impl& I = *impl_;
  DeviceGuard g(I.device);
  if (I.drain) I.drain->flush(*I.logs.events(), I.logs.names().data());
  if (I.tdrain) I.tdrain->flush(I.logs);
  I.logs.flush();
}

bool DeviceController::tracing() const { return impl_->tdrain != nullptr; }
std::int64_t DeviceController::last_trace_step() const { return impl_->logs.last_trace_step(); }
std::uint64_t DeviceController::events_dropped() const {
  return impl_->drain ? impl_->drain->dropped() : 0;
}

// ------------------------------------------------------------ DeviceAdamW ----
struct DeviceAdamW::Impl {
  int device = 0;
  std::unique_ptr<gnmr::cuda::AdamWPlan> plan;
};

DeviceAdamW::DeviceAdamW(const std::vector<gnmr::AdamWTensor>& tensors, std::size_t num_units, int device,
                         const std::vector<gnmr::AdamWUnitState>& states)
    : impl_(new Impl) {
  impl_->device = device;
  DeviceGuard g(device);
  impl_->plan.reset(new gnmr::cuda::AdamWPlan(tensors, num_units));
  if (!states.empty()) impl_->plan->restore_unit_states(states);
}

DeviceAdamW::~DeviceAdamW() = default;

void DeviceAdamW::step(const gnmr::AdamWParams& h, const float* d_lr, const gnmr::UnitDecision* decisions,
                       const gnmr::StepSummary* summary, std::uintptr_t stream) {
  DeviceGuard g(impl_->device);
  check(gnmr::cuda::adamw_step(*impl_->plan, h, decisions, as_stream(stream), d_lr, summary),
        "gnmr: AdamW step");
}

std::vector<gnmr::AdamWUnitState> DeviceAdamW::states() const {
  DeviceGuard g(impl_->device);
  return impl_->plan->copy_unit_states();
}

void DeviceAdamW::set_states(const std::vector<gnmr::AdamWUnitState>& states) {
  DeviceGuard g(impl_->device);
  impl_->plan->restore_unit_states(states);
}

}  // namespace gnmr_py
