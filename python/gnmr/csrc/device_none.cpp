// python/gnmr/csrc/device_none.cpp — device.hpp for a package built without
// CUDA (a CPU-only torch, or GNMR_CUDA=0): cuda_built() is false, and a
// controller over CUDA tensors is refused with a message saying how to get
// the CUDA build, instead of failing at link or import time.
#include <stdexcept>
#include <string>
#include <vector>

#include "device.hpp"

namespace gnmr_py {

namespace {
[[noreturn]] void no_cuda() {
  throw std::runtime_error(
      "gnmr: this gnmr package was built without CUDA (its torch had no CUDA, or GNMR_CUDA=0); "
      "reinstall it with a CUDA-enabled torch and nvcc on PATH to use CUDA tensors");
}
}  // namespace

bool cuda_built() { return false; }
bool stream_capturing(std::uintptr_t, int) { return false; }

struct DeviceController::Impl {};
DeviceController::DeviceController(const std::string&, const gnmr::presets::Options&, std::size_t,
                                   const std::vector<std::string>&, int) {
  no_cuda();
}
DeviceController::~DeviceController() = default;
std::size_t DeviceController::num_units() const { no_cuda(); }
std::string DeviceController::name() const { no_cuda(); }
std::uint32_t DeviceController::max_in_recovery() const { no_cuda(); }
int DeviceController::device() const { no_cuda(); }
const void* DeviceController::zero_segment() const { no_cuda(); }
void DeviceController::set_segments(const std::vector<gnmr::Segment>&) { no_cuda(); }
int DeviceController::next_slot() const { no_cuda(); }
int DeviceController::step(std::uintptr_t, const float*) { no_cuda(); }
bool DeviceController::needs_aux() const { no_cuda(); }
void DeviceController::partials(float*, std::uintptr_t) { no_cuda(); }
int DeviceController::step_from(const float*, std::uintptr_t, const float*) { no_cuda(); }
bool DeviceController::ready(int) const { no_cuda(); }
void DeviceController::wait(int) const { no_cuda(); }
gnmr::StepSummary DeviceController::slot_summary(int) const { no_cuda(); }
const gnmr::UnitDecision* DeviceController::slot_decisions(int) const { no_cuda(); }
const gnmr::UnitDecision* DeviceController::device_decisions() const { no_cuda(); }
const gnmr::StepSummary* DeviceController::device_summary() const { no_cuda(); }
gnmr::StepSummary DeviceController::copy_summary() const { no_cuda(); }
std::vector<gnmr::UnitDecision> DeviceController::copy_decisions() const { no_cuda(); }
std::vector<gnmr::UnitReport> DeviceController::copy_reports() const { no_cuda(); }
std::int64_t DeviceController::steps_done() const { no_cuda(); }
std::vector<std::uint8_t> DeviceController::save() const { no_cuda(); }
void DeviceController::load(const std::uint8_t*, std::size_t) { no_cuda(); }
void DeviceController::reset() { no_cuda(); }
void DeviceController::open_events(const std::string&, bool, bool) { no_cuda(); }
void DeviceController::open_trace(const std::string&, bool, std::int64_t, const std::string&) { no_cuda(); }
void DeviceController::close_events() { no_cuda(); }
void DeviceController::close_trace() { no_cuda(); }
void DeviceController::flush() { no_cuda(); }
bool DeviceController::tracing() const { no_cuda(); }
std::int64_t DeviceController::last_trace_step() const { no_cuda(); }
std::uint64_t DeviceController::events_dropped() const { no_cuda(); }

struct DeviceAdamW::Impl {};
DeviceAdamW::DeviceAdamW(const std::vector<gnmr::AdamWTensor>&, std::size_t, int,
                         const std::vector<gnmr::AdamWUnitState>&) {
  no_cuda();
}
DeviceAdamW::~DeviceAdamW() = default;
void DeviceAdamW::step(const gnmr::AdamWParams&, const float*, const gnmr::UnitDecision*,
                       const gnmr::StepSummary*, std::uintptr_t) {
  no_cuda();
}
std::vector<gnmr::AdamWUnitState> DeviceAdamW::states() const { no_cuda(); }
void DeviceAdamW::set_states(const std::vector<gnmr::AdamWUnitState>&) { no_cuda(); }

}  // namespace gnmr_py
