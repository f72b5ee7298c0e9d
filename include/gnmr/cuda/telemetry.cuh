// gnmr/cuda/telemetry.cuh — the event log of the CUDA backend, a step late.
//
// Logging must not bring back the host sync it was meant to avoid (OLMo-core
// #43). After each DeviceController step, TelemetryDrain::record() enqueues
// on the caller's stream: one single-block kernel that compacts the units
// with an event (trigger, grant, deny, release, non-finite) into a small
// device buffer, in unit order, and returns at once on a quiet step; then an
// asynchronous copy of the summary, the event count and that buffer into
// one of two pinned host slots, and an event. Nothing waits on the GPU: the
// host writes a slot with EventLog::write_sparse() once its event has
// completed, which is the next record() call (or the one after, when the
// device runs more than a step behind the host: only then does record()
// wait, on work enqueued two steps earlier). flush() writes what is left.
//
// Capacity: at most `capacity` units with events per step are kept (in unit
// order); the rest are counted in dropped(). The summary is always exact.
//
// Determinism: the compaction is a block-wide prefix sum in unit order, so
// the log lists the same units in the same order as the host backend's.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "gnmr/core/types.hpp"
#include "gnmr/cuda/block.cuh"
#include "gnmr/cuda/error.cuh"
#include "gnmr/cuda/memory.cuh"
#include "gnmr/io/telemetry.hpp"

namespace gnmr {
namespace cuda {

namespace detail {

constexpr int kDrainThreads = 256;

// One block: the events of step t, compacted in unit order. A template so
// that the header can be included by several translation units (one
// definition per instantiation, merged by the linker).
template <int Threads = kDrainThreads>
__global__ void __launch_bounds__(Threads)
    compact_events(const UnitReport* __restrict__ rep, const StepSummary* __restrict__ summary,
                   std::uint32_t n, std::uint32_t capacity, std::uint32_t* __restrict__ out_units,
                   UnitReport* __restrict__ out_rep, std::uint32_t* __restrict__ out_count) {
  __shared__ BlockScanStorage<Threads> tmp;
  if (!step_has_events(*summary)) {  // the common case: nothing to scan
    if (threadIdx.x == 0) *out_count = 0;
    return;
  }
  std::uint32_t base = 0;
  for (std::uint32_t tile = 0; tile < n; tile += Threads) {
    const std::uint32_t i = tile + threadIdx.x;
    const std::uint32_t has = (i < n && (rep[i].flags & kEventFlags)) ? 1u : 0u;
    std::uint32_t total = 0;
    const std::uint32_t pos = block_exclusive_sum<Threads>(has, total, tmp);
    const std::uint32_t at = base + pos;
    if (has && at < capacity) {
      out_units[at] = i;
      out_rep[at] = rep[i];
    }
    base += total;
  }
  if (threadIdx.x == 0) *out_count = base;
}

}  // namespace detail

class TelemetryDrain {
 public:
  // num_units: the controller's; capacity: units with events kept per step.
  explicit TelemetryDrain(std::size_t num_units, std::uint32_t capacity = 1024)
      : n_(static_cast<std::uint32_t>(num_units)), cap_(capacity) {
    if (num_units == 0 || num_units > 0x7fffffffu)
      throw std::invalid_argument("gnmr: TelemetryDrain: num_units must be in [1, 2^31-1]");
    if (capacity == 0) throw std::invalid_argument("gnmr: TelemetryDrain: capacity must be >= 1");
    dev_ = DeviceBuffer(bytes_per_slot(), "TelemetryDrain: cudaMalloc");
    // Every step copies the whole slot, kept entries or not: zero it once so
    // no copy reads uninitialised memory (compute-sanitizer initcheck).
    check(cudaMemset(dev_.get(), 0, bytes_per_slot()), "TelemetryDrain: cudaMemset");
    device_barrier("TelemetryDrain: cudaMemset");
    try {
      for (Slot& sl : slot_) {
        check(cudaHostAlloc(&sl.host, bytes_per_slot(), cudaHostAllocDefault),
              "TelemetryDrain: cudaHostAlloc");
        check(cudaEventCreateWithFlags(&sl.done, cudaEventDisableTiming),
              "TelemetryDrain: cudaEventCreate");
      }
    } catch (...) {
      release();  // a throwing constructor runs no destructor
      throw;
    }
  }
  TelemetryDrain(const TelemetryDrain&) = delete;
  TelemetryDrain& operator=(const TelemetryDrain&) = delete;
  ~TelemetryDrain() { release(); }

  // After controller.step(..., stream), same stream: writes whatever earlier
  // step has completed to `log`, then enqueues this step's events.
  template <class DeviceCtl>
  void record(const DeviceCtl& ctl, EventLog& log, cudaStream_t stream = 0,
              const std::string* names = nullptr) {
    if (ctl.num_units() != n_)
      throw std::invalid_argument("gnmr: TelemetryDrain: controller has " +
                                  std::to_string(ctl.num_units()) + " units, drain " +
                                  std::to_string(n_));
    Slot& prev = slot_[(k_ + 1) % 2];
    Slot& mine = slot_[k_ % 2];
    // Oldest first: mine holds step k-2, prev step k-1. mine is still
    // pending only when it was not done at the last call; writing prev
    // first would then put step k-1's lines before step k-2's.
    if (mine.pending) {  // enqueued two steps ago and still unwritten
      check(cudaEventSynchronize(mine.done), "TelemetryDrain: cudaEventSynchronize");
      write(mine, log, names);
    }
    // event_done clears the "not ready" it may leave, which the launch
    // check below (cudaGetLastError) would otherwise throw.
    if (prev.pending && event_done(prev.done, "TelemetryDrain: cudaEventQuery")) write(prev, log, names);
    auto* d = static_cast<unsigned char*>(dev_.get());
    detail::compact_events<detail::kDrainThreads><<<1, detail::kDrainThreads, 0, stream>>>(
        ctl.reports(), ctl.summary(), n_, cap_, units_of(d), reps_of(d), count_of(d));
    check(cudaGetLastError(), "TelemetryDrain: compact_events launch");
    check(cudaMemcpyAsync(summary_of(mine.host), ctl.summary(), sizeof(StepSummary),
                          cudaMemcpyDeviceToHost, stream),
          "TelemetryDrain: cudaMemcpyAsync");
    check(cudaMemcpyAsync(mine.host + kCountAt, d + kCountAt, bytes_per_slot() - kCountAt,
                          cudaMemcpyDeviceToHost, stream),
          "TelemetryDrain: cudaMemcpyAsync");
    check(cudaEventRecord(mine.done, stream), "TelemetryDrain: cudaEventRecord");
    mine.pending = true;
    mine.order = k_++;
  }

  // Waits for every recorded step and writes them (end of training, tests).
  void flush(EventLog& log, const std::string* names = nullptr) {
    for (int pass = 0; pass < 2; ++pass) {
      Slot& a = slot_[0];
      Slot& b = slot_[1];
      Slot* first = (a.pending && (!b.pending || a.order < b.order)) ? &a : (b.pending ? &b : nullptr);
      if (!first) return;
      check(cudaEventSynchronize(first->done), "TelemetryDrain: cudaEventSynchronize");
      write(*first, log, names);
    }
    log.flush();
  }

  std::uint64_t dropped() const { return dropped_; }  // events beyond capacity, all steps
  std::uint32_t capacity() const { return cap_; }

 private:
  struct Slot {
    unsigned char* host = nullptr;  // pinned: summary, count, units[cap], reports[cap]
    cudaEvent_t done = nullptr;
    bool pending = false;
    std::uint64_t order = 0;
  };
  // Layout of a slot (host) and of the device buffer (same offsets).
  static constexpr std::size_t kCountAt = 64;  // after the StepSummary (<= 64 bytes)
  static_assert(sizeof(StepSummary) <= kCountAt, "StepSummary grew: move kCountAt");
  std::size_t units_at() const { return kCountAt + 16; }
  std::size_t reps_at() const { return units_at() + ((cap_ * sizeof(std::uint32_t) + 31) / 32) * 32; }
  std::size_t bytes_per_slot() const { return reps_at() + cap_ * sizeof(UnitReport); }
  StepSummary* summary_of(unsigned char* b) const { return reinterpret_cast<StepSummary*>(b); }
  std::uint32_t* count_of(unsigned char* b) const { return reinterpret_cast<std::uint32_t*>(b + kCountAt); }
  std::uint32_t* units_of(unsigned char* b) const { return reinterpret_cast<std::uint32_t*>(b + units_at()); }
  UnitReport* reps_of(unsigned char* b) const { return reinterpret_cast<UnitReport*>(b + reps_at()); }

  void release() {
    for (Slot& sl : slot_) {
      if (sl.pending) cudaEventSynchronize(sl.done);
      if (sl.done) cudaEventDestroy(sl.done);
      if (sl.host) cudaFreeHost(sl.host);
      sl = Slot{};
    }
  }

  void write(Slot& sl, EventLog& log, const std::string* names) {
    const std::uint32_t count = *count_of(sl.host);
    const std::uint32_t kept = count < cap_ ? count : cap_;
    dropped_ += count - kept;
    log.write_sparse(*summary_of(sl.host), units_of(sl.host), reps_of(sl.host), kept, names);
    sl.pending = false;
  }

  std::uint32_t n_, cap_;
  DeviceBuffer dev_;
  Slot slot_[2];
  std::uint64_t k_ = 0;
  std::uint64_t dropped_ = 0;
};

}  // namespace cuda
}  // namespace gnmr
