// gnmr/cuda/summary_ring.cuh — read the step summary (or any small device
// value) on the host without synchronising: a ring of pinned slots, one
// event per slot.
//
//   gnmr::cuda::SummaryRing<> ring;                  // setup: pinned slots, events
//   for (...) {                                      // every step
//     ctl.step(d_partials, stream);
//     ring.push(ctl.summary(), stream);              // enqueue copy + event
//     gnmr::StepSummary s;
//     if (ring.latest(s) && s.granted) log(s);       // newest completed, never waits
//   }
//   gnmr::StepSummary last = ring.wait_newest();     // end of training: blocks
//
// push() enqueues on the caller's stream an asynchronous copy of the value
// into the next pinned slot and records that slot's event; latest() asks
// the events (cudaEventQuery) and copies out the newest slot whose copy has
// completed, typically the previous step's; it returns false while none
// has. Neither allocates or waits. What the host sees is a step or two
// late, never torn: a slot is only read after its event says the copy is
// done, and latest() returns a copy, so a later push cannot change it.
//
// The slot bookkeeping is gnmr::detail::RingSlots (CPU-tested). For the
// units' events of each step, not just the counts, see TelemetryDrain
// (telemetry.cuh, walked through in docs/record/gpu-telemetry.md).
//
// Use from one host thread. push() is not for inside a CUDA graph capture
// (the slot it writes alternates between calls, a graph would replay one):
// push after launching the graph, on the same stream. Setup allocates and
// throws gnmr::cuda::Error; push() returns the launch's cudaError_t.
//
// Determinism: the ring copies bytes; it computes nothing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "gnmr/core/types.hpp"
#include "gnmr/cuda/error.cuh"
#include "gnmr/detail/ring.hpp"

namespace gnmr {
namespace cuda {

template <class T = StepSummary>
class SummaryRing {
  static_assert(std::is_trivially_copyable<T>::value,
                "gnmr: SummaryRing copies raw bytes: T must be trivially copyable");

 public:
  // slots >= 2: how many pushes may be in flight before the oldest one's
  // copy is given up (overwritten in stream order). 2 suffices when the host
  // is at most one step ahead of the device; more keep older copies.
  explicit SummaryRing(std::uint32_t slots = 2) : ring_(slots), events_(slots, nullptr) {
    void* host = nullptr;
    check(cudaHostAlloc(&host, sizeof(T) * slots, cudaHostAllocDefault),
          "SummaryRing: cudaHostAlloc");
    host_ = static_cast<T*>(host);
    for (cudaEvent_t& e : events_) {
      const cudaError_t err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
      if (err != cudaSuccess) {
        release();
        check(err, "SummaryRing: cudaEventCreate");
      }
    }
  }
  SummaryRing(const SummaryRing&) = delete;
  SummaryRing& operator=(const SummaryRing&) = delete;
  ~SummaryRing() { release(); }

  // Enqueue: copy *d_value into the next slot, then record its event. A
  // null d_value throws std::invalid_argument (the ring is unchanged); a
  // copy or event error is returned, and the slot is forgotten, so that
  // latest() and wait_newest() never hand back what it held: an older value
  // under the new push's number, or bytes a copy without an event may still
  // be writing.
  cudaError_t push(const T* d_value, cudaStream_t stream = 0) {
    if (d_value == nullptr) throw std::invalid_argument("gnmr: SummaryRing::push: null value");
    const std::uint32_t s = ring_.take();
    cudaError_t e =
        cudaMemcpyAsync(host_ + s, d_value, sizeof(T), cudaMemcpyDeviceToHost, stream);
    if (e == cudaSuccess) e = cudaEventRecord(events_[s], stream);
    if (e != cudaSuccess) ring_.forget(s);
    return e;
  }

  // The newest completed copy into *out; false (out untouched) if none has
  // completed yet. Never waits.
  bool latest(T& out) {
    const int s = ring_.newest_done([this](std::uint32_t i) { return done(i); });
    if (s < 0) return false;
    out = host_[static_cast<std::uint32_t>(s)];
    return true;
  }

  // Blocks until the newest push has completed and returns it (end of a
  // run, tests). Throws if nothing was pushed (or every push failed).
  T wait_newest() {
    const int newest = ring_.newest();
    if (newest < 0) throw std::logic_error("gnmr: SummaryRing::wait_newest: nothing was pushed");
    const auto s = static_cast<std::uint32_t>(newest);
    check(cudaEventSynchronize(events_[s]), "SummaryRing: cudaEventSynchronize");
    return host_[s];
  }

  std::uint64_t pushed() const { return ring_.pushed(); }
  std::uint32_t slots() const { return ring_.size(); }

 private:
  bool done(std::uint32_t s) { return event_done(events_[s], "SummaryRing: cudaEventQuery"); }

  void release() {
    for (cudaEvent_t& e : events_) {
      if (e) {
        cudaEventSynchronize(e);  // no copy may still target the pinned slots
        cudaEventDestroy(e);
        e = nullptr;
      }
    }
    if (host_) cudaFreeHost(host_);
    host_ = nullptr;
  }

  gnmr::detail::RingSlots ring_;
  std::vector<cudaEvent_t> events_;  // one per slot: its copy has completed
  T* host_ = nullptr;                // pinned, one T per slot
};

}  // namespace cuda
}  // namespace gnmr
