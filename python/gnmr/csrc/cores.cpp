// python/gnmr/csrc/cores.cpp — HostCore, CudaCore, HostAdamW, CudaAdamW
// (cores.hpp).
#include "cores.hpp"

#include <ATen/Parallel.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "gnmr/host/unit_norms.hpp"
#include "gnmr/io/state.hpp"
#include "gnmr/presets/make.hpp"

namespace gnmr_py {

namespace {
// The segment of a host unit whose tensors have no gradient this step.
const float kHostZero = 0.0f;

const std::uint8_t* bytes_of(const std::string& s) { return reinterpret_cast<const std::uint8_t*>(s.data()); }

// gnmr's host executor (gnmr/core/parallel.hpp) on torch's intra-op thread
// pool (torch.get_num_threads()): the norms spread their segments and the
// AdamW its chunks over it, with the same bits as one thread.
// Below kSerialWork elements in all, one thread: a parallel region costs
// microseconds, more than such a step's arithmetic.
constexpr std::uint64_t kSerialWork = std::uint64_t{1} << 16;

struct AtenFor {
  std::uint64_t work;  // elements the call touches in all
  template <class F>
  void operator()(std::size_t n, F&& fn) const {
    if (work < kSerialWork) return gnmr::SerialFor{}(n, fn);
    at::parallel_for(0, static_cast<std::int64_t>(n), 1, [&fn](std::int64_t b, std::int64_t e) {
      fn(static_cast<std::size_t>(b), static_cast<std::size_t>(e));
    });
  }
};

template <class T>
std::uint64_t total_numel(const std::vector<T>& xs) {
  std::uint64_t n = 0;
  for (const T& x : xs) n += x.numel;
  return n;
}

[[noreturn]] void refuse_under_capture(const char* what) {
  throw std::runtime_error(std::string("gnmr: ") + what +
                           " during CUDA graph capture; run one step outside capture first "
                           "and keep gradients in place (zero_grad(set_to_none=False))");
}
}  // namespace

void check_trace_order(bool tracing, std::int64_t last_trace_step, const std::string& blob) {
  if (!tracing) return;
  // A layered preset's blob ("outer+inner", the default) nests two state
  // blobs; the inner's step count is the controller's.
  const void* data = blob.data();
  std::size_t size = blob.size();
  std::uint32_t magic = 0;
  if (size >= 4) std::memcpy(&magic, data, 4);
  if (magic == gnmr::detail::kLayeredMagic) {
    const gnmr::detail::NestedBlobs nb = gnmr::detail::split_blobs(data, size);
    data = nb.inner;
    size = nb.inner_size;
  }
  const gnmr::StateInfo info = gnmr::read_state_info(data, size);
  if (info.steps_done < last_trace_step)
    throw std::invalid_argument("gnmr: load_state_dict: the state is at step " + std::to_string(info.steps_done) +
                                " but the open trace already has step " + std::to_string(last_trace_step) +
                                " (trace steps must increase): call trace(path) with a new file after "
                                "loading, or trace(None) before");
}

// ------------------------------------------------------------------ HostCore ----
HostCore::HostCore(const std::string& preset, const gnmr::presets::Options& options, GradTable grads,
                   std::vector<std::string> names)
    : ctl_(gnmr::presets::make(preset, grads.num_units(), options)),
      grads_(std::move(grads)),
      partials_(grads_.num_units()),
      logs_(std::move(names)) {}

const gnmr::StepSummary& HostCore::step(bool apply, const float* aux) {
  local_partials(nullptr, partials_.data());  // validates every gradient first
  const gnmr::StepSummary& s = step_reduced(partials_.data(), aux);
  if (apply) grads_.apply(ctl_->decisions().data(), s.skip_step != 0);
  return s;
}

void HostCore::local_partials(const std::vector<at::Tensor>* grads, float* out) {
  grads_.gather(&kHostZero, grads);
  gnmr::host_unit_partials(grads_.segments().data(), grads_.segments().size(), out, partials_.size(),
                           gnmr::Coverage::kEveryUnit, AtenFor{total_numel(grads_.segments())});
}

const gnmr::StepSummary& HostCore::step_reduced(const float* partials, const float* aux) {
  const gnmr::StepSummary& s =
      aux ? ctl_->step_with_aux(partials, aux, partials_.size()) : ctl_->step(partials, partials_.size());
  logs_.write(s, ctl_->reports().data(), aux ? &ctl_->aux_norms() : nullptr);
  return s;
}

void HostCore::load(const std::string& blob) {
  check_trace_order(logs_.tracing(), logs_.last_trace_step(), blob);
  ctl_->load(bytes_of(blob), blob.size());
}

// ------------------------------------------------------------------ CudaCore ----
CudaCore::CudaCore(const std::string& preset, const gnmr::presets::Options& options, GradTable grads,
                   const std::vector<std::string>& names, int device)
    : dev_(preset, options, grads.num_units(), names, device), grads_(std::move(grads)) {}

bool CudaCore::capturing(std::uintptr_t stream) const { return stream_capturing(stream, dev_.device()); }

void CudaCore::prepare(std::uintptr_t stream) { gather(stream, nullptr); }

void CudaCore::gather(std::uintptr_t stream, const std::vector<at::Tensor>* grads) {
  if (!grads_.gather(dev_.zero_segment(), grads)) return;
  if (capturing(stream)) refuse_under_capture("a gradient buffer moved (or a grad became None)");
  dev_.set_segments(grads_.segments());
  grads_.commit();
  ++replans_;
}

int CudaCore::step(std::uintptr_t stream, bool apply, const float* aux) {
  if (apply && capturing(stream))
    throw std::runtime_error(
        "gnmr: Controller.step() cannot run inside CUDA graph capture: it drops skipped "
        "gradients on the host, which needs the decisions there; capture gnmr.optim.AdamW.step() "
        "instead, whose kernel reads them on the device");
  prepare(stream);
  const int slot = dev_.step(stream, aux);
  last_slot_ = slot;
  if (apply) {
    dev_.wait(slot);
    grads_.apply(dev_.slot_decisions(slot), dev_.slot_summary(slot).skip_step != 0);
  }
  return slot;
}

void CudaCore::local_partials(const std::vector<at::Tensor>& grads, float* out, std::uintptr_t stream) {
  gather(stream, &grads);
  dev_.partials(out, stream);
}

int CudaCore::step_reduced(const float* partials, std::uintptr_t stream, const float* aux) {
  const int slot = dev_.step_from(partials, stream, aux);
  last_slot_ = slot;
  return slot;
}

std::vector<gnmr::UnitDecision> CudaCore::decisions() {
  if (last_slot_ < 0) return dev_.copy_decisions();
  dev_.wait(last_slot_);
  const gnmr::UnitDecision* d = dev_.slot_decisions(last_slot_);
  return std::vector<gnmr::UnitDecision>(d, d + dev_.num_units());
}

void CudaCore::load(const std::string& blob) {
  check_trace_order(dev_.tracing(), dev_.last_trace_step(), blob);
  dev_.load(bytes_of(blob), blob.size());
  last_slot_ = -1;  // the slots hold decisions of before the load
}

// ----------------------------------------------------------------- HostAdamW ----
HostAdamW::HostAdamW(AdamWTable table, std::size_t num_units)
    : table_(std::move(table)), opt_(num_units) {}

void HostAdamW::prepare(const std::vector<at::Tensor>* grads) {
  if (!table_.gather(grads)) return;
  const auto& t = table_.tensors();
  opt_.set_tensors(t.data(), t.size());
  table_.commit();
}

void HostAdamW::step(const HostCore& ctl, const gnmr::AdamWParams& h) {
  if (table_.tensors().empty()) return;
  opt_.step(h, h.lr, ctl.decisions().data(), ctl.summary().skip_step != 0,
            AtenFor{total_numel(table_.tensors())});
}


// ----------------------------------------------------------------- CudaAdamW ----
CudaAdamW::CudaAdamW(AdamWTable table, std::size_t num_units, int device)
    : table_(std::move(table)),
      num_units_(num_units),
      device_(device),
      pending_(num_units, gnmr::detail::adamw_unit_init()) {}

void CudaAdamW::prepare(std::uintptr_t stream, const std::vector<at::Tensor>* grads) {
  if (!table_.gather(grads)) return;
  if (stream_capturing(stream, device_)) refuse_under_capture("an AdamW gradient buffer moved (or a grad became None)");
  // The unit states travel from the old plan to the new one.
  if (plan_) pending_ = plan_->states();
  const auto& t = table_.tensors();
  if (t.empty()) {
    plan_.reset();
  } else {
    plan_.reset(new DeviceAdamW(t, num_units_, device_, pending_));
  }
  table_.commit();
}

void CudaAdamW::step(const CudaCore& ctl, const gnmr::AdamWParams& h, const float* d_lr, std::uintptr_t stream) {
  if (!plan_) return;
  plan_->step(h, d_lr, ctl.device().device_decisions(), ctl.device().device_summary(), stream);
}

AdamWStates CudaAdamW::states() const { return plan_ ? plan_->states() : pending_; }

void CudaAdamW::set_states(const AdamWStates& s) {
  if (s.size() != num_units_) throw std::invalid_argument("gnmr: AdamW: one state per unit expected");
  pending_ = s;
  if (plan_) plan_->set_states(s);
}

}  // namespace gnmr_py
