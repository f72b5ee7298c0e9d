// python/gnmr/csrc/drains.cuh — pinned host copies for the CUDA glue
// (device.cu): a pinned slot with its completion event, and TraceDrain, the
// trace's counterpart of gnmr::cuda::TelemetryDrain (the event log's): each
// step's norms go to pinned memory asynchronously and are written a step
// late, oldest first, so the trace costs the GPU no sync.
//
// Only device.cu includes this (nvcc); it needs no torch header either.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gnmr/core/types.hpp"
#include "gnmr/cuda/error.cuh"
#include "gnmr/cuda/presets.cuh"
#include "logs.hpp"

namespace gnmr_py {
namespace detail {

using gnmr::cuda::check;
using gnmr::cuda::event_done;  // "not ready" is not an error

// One pinned host buffer and the event that marks its copy complete.
struct PinnedSlot {
  unsigned char* host = nullptr;
  cudaEvent_t done = nullptr;
  bool pending = false;
  std::uint64_t order = 0;

  void create(std::size_t bytes, const char* who) {
    check(cudaHostAlloc(reinterpret_cast<void**>(&host), bytes, cudaHostAllocDefault), who);
    std::memset(host, 0, bytes);
    check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), who);
  }
  void destroy() {
    if (pending && done) cudaEventSynchronize(done);
    if (done) cudaEventDestroy(done);
    if (host) cudaFreeHost(host);
    host = nullptr;
    done = nullptr;
  }
};

// StepSummary rounded up to 16 bytes: the decisions that follow it in a
// slot stay 8-byte aligned whatever fields the summary gains.
constexpr std::size_t kSummaryBytes = (sizeof(gnmr::StepSummary) + 15) / 16 * 16;

// The trace's norms a step late, like gnmr::cuda::TelemetryDrain does for
// the event log: two pinned slots {summary, norms[N], aux norms[N] if the
// aux trace is open}, oldest written first. The aux norms are the device
// controller's own (DynDeviceController::aux_norms: the finished values its
// evaluation saw), so the aux trace holds the bits a CPU run would write.
class TraceDrain {
 public:
  TraceDrain(std::size_t n, bool aux) : n_(n), aux_(aux) {
    for (PinnedSlot& s : slot_)
      s.create(kSummaryBytes + (aux_ ? 2 : 1) * n_ * sizeof(float), "gnmr: trace drain");
  }
  ~TraceDrain() {
    for (PinnedSlot& s : slot_) s.destroy();
  }
  TraceDrain(const TraceDrain&) = delete;
  TraceDrain& operator=(const TraceDrain&) = delete;

  void record(const gnmr::cuda::DynDeviceController& c, Logs& logs, cudaStream_t stream) {
    PinnedSlot& prev = slot_[(k_ + 1) % 2];
    PinnedSlot& mine = slot_[k_ % 2];
    if (mine.pending) {  // two steps old and still unwritten: it goes first
      check(cudaEventSynchronize(mine.done), "gnmr: trace: cudaEventSynchronize");
      write(mine, logs);
    }
    if (prev.pending && event_done(prev.done, "gnmr: trace: cudaEventQuery")) write(prev, logs);
    check(c.copy_summary_async(reinterpret_cast<gnmr::StepSummary*>(mine.host), stream),
          "gnmr: trace: copy summary");
    // The norm column of the report array: a strided copy, one float a unit.
    const auto* src = reinterpret_cast<const unsigned char*>(c.reports()) + offsetof(gnmr::UnitReport, norm);
    check(cudaMemcpy2DAsync(mine.host + kSummaryBytes, sizeof(float), src, sizeof(gnmr::UnitReport),
                            sizeof(float), n_, cudaMemcpyDeviceToHost, stream),
          "gnmr: trace: copy norms");
    if (aux_)
      check(cudaMemcpyAsync(mine.host + kSummaryBytes + n_ * sizeof(float), c.aux_norms(), n_ * sizeof(float),
                            cudaMemcpyDeviceToHost, stream),
            "gnmr: trace: copy aux norms");
    check(cudaEventRecord(mine.done, stream), "gnmr: trace: cudaEventRecord");
    mine.pending = true;
    mine.order = k_++;
  }

  void flush(Logs& logs) {
    for (int pass = 0; pass < 2; ++pass) {
      PinnedSlot& a = slot_[0];
      PinnedSlot& b = slot_[1];
      PinnedSlot* first = (a.pending && (!b.pending || a.order < b.order)) ? &a : (b.pending ? &b : nullptr);
      if (!first) return;
      check(cudaEventSynchronize(first->done), "gnmr: trace: cudaEventSynchronize");
      write(*first, logs);
    }
  }

 private:
  void write(PinnedSlot& s, Logs& logs) {
    s.pending = false;
    gnmr::StepSummary sum;
    std::memcpy(&sum, s.host, sizeof sum);
    const float* norms = reinterpret_cast<const float*>(s.host + kSummaryBytes);
    logs.write_trace(sum.step, norms, aux_ ? norms + n_ : nullptr);
  }

  std::size_t n_;
  bool aux_;
  PinnedSlot slot_[2];
  std::uint64_t k_ = 0;
};

}  // namespace detail
}  // namespace gnmr_py
