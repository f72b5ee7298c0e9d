// gnmr/cuda/telemetry.cuh — the event log of the CUDA backend, a step late.
//
// Logging must not bring back the host sync it was meant to avoid (OLMo-core
// #43). After each device controller step, TelemetryDrain::record() enqueues
// on the caller's stream one kernel (compact_events below) that compacts the
// units with an event (trigger, grant, deny, release, non-finite) in unit
// order and writes the summary, the event count and the first `capacity`
// events straight into one of two pinned, mapped host slots; then an event.
// Nothing waits on the GPU: the host writes a slot with
// EventLog::write_sparse() once its event has completed, which is the next
// record() call (or the one after, when the device runs more than a step
// behind the host: only then does record() wait, on work enqueued two steps
// earlier). flush() writes what is left.
//
// Why this shape (measured on an H100, docs/record/performance-gpu.md, issue 32):
// the first version compacted in one block and copied the whole slot with
// two cudaMemcpyAsync per step. One block walking 10^6 reports took the
// step from 0.17 to 3.07 ms, and the copies cost a slot's bytes every step
// (2.4 MB at the Python binding's capacity of 65,536) even on a quiet step.
// Now every block scans its 1,024 units' decision flags (8 B per unit, not
// the 32 B report), keeps its events' unit indices in a device scratch, and
// the block that finishes last (the backend's last_block_done handoff, no
// float, no spin) turns the per-block counts into starts in block order and
// gathers the first `capacity` events into the host slot. Only the events
// cross the bus; a quiet step writes the summary and a zero count. On sm_90
// the kernel is a programmatic dependent of the controller's last kernel.
//
// Capacity: at most `capacity` units with events per step are kept (in unit
// order); the rest are counted in dropped(). The summary is always exact.
// Memory: two pinned slots of 64 + 16 + 36 B x capacity, and 4 B per unit
// plus 4 B per 1,024 units of device scratch.
//
// Determinism: positions come from integer prefix sums over blocks in block
// order and over threads in unit order, so the log lists the same units in
// the same order as the host backend's, whatever the scheduling.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "gnmr/core/types.hpp"
#include "gnmr/detail/compact.hpp"
#include "gnmr/cuda/block.cuh"
#include "gnmr/cuda/error.cuh"
#include "gnmr/cuda/grid.cuh"
#include "gnmr/cuda/memory.cuh"
#include "gnmr/io/telemetry.hpp"

namespace gnmr {
namespace cuda {

namespace detail {

constexpr int kDrainThreads = 256;
constexpr std::uint32_t kDrainPerThread = 4;
constexpr std::uint32_t kDrainTile = kDrainThreads * kDrainPerThread;  // units per block

struct DrainArgs {
  const UnitDecision* dec;  // flags only: a decision's flags are its report's
  const UnitReport* rep;
  const StepSummary* summary;
  std::uint32_t n;
  std::uint32_t capacity;
  std::uint32_t tile_keep;         // min(kDrainTile, capacity): events a block keeps
  std::uint32_t* block_count;      // per block: its events
  std::uint32_t* tile_units;       // per block: its first tile_keep event units, in order
  unsigned int* counter;           // last_block_done
  // The host slot (pinned, mapped: device pointers to host memory).
  StepSummary* out_summary;
  std::uint32_t* out_count;
  std::uint32_t* out_units;
  UnitReport* out_rep;
};

// ceil(n / kDrainTile) blocks of Threads. A template so that the header can
// be included by several translation units (one definition per
// instantiation, merged by the linker).
template <int Threads = kDrainThreads>
__global__ void __launch_bounds__(Threads) compact_events(DrainArgs a) {
  static_assert(Threads * kDrainPerThread == kDrainTile, "compact_events: a block covers kDrainTile units");
  __shared__ BlockScanStorage<Threads> tmp;
  __shared__ std::uint32_t s_start[Threads];
  __shared__ int s_last;
  wait_prior_grid();  // the controller's decisions, reports and summary
  const StepSummary sum = *a.summary;
  if (!step_has_events(sum)) {  // the common case: every block leaves at once
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      *a.out_summary = sum;
      *a.out_count = 0u;
      __threadfence_system();
    }
    return;
  }
  // This block's events, in unit order, into its part of the scratch.
  const std::uint32_t base = blockIdx.x * kDrainTile;
  std::uint32_t run = 0;
  for (std::uint32_t k = 0; k < kDrainPerThread; ++k) {
    const std::uint32_t i = base + k * Threads + threadIdx.x;
    const std::uint32_t has = (i < a.n && (a.dec[i].flags & kEventFlags)) ? 1u : 0u;
    std::uint32_t tot = 0;
    const std::uint32_t pos = run + block_exclusive_sum<Threads>(has, tot, tmp);
    if (has && pos < a.tile_keep) a.tile_units[static_cast<std::size_t>(blockIdx.x) * a.tile_keep + pos] = i;
    run += tot;
  }
  if (threadIdx.x == 0) a.block_count[blockIdx.x] = run;
  if (!last_block_done(a.counter, gridDim.x, &s_last)) return;

  // The last block: 256 blocks' starts at a time (exclusive sums in block
  // order), and the outputs that fall in them gathered from the scratch.
  std::uint32_t total = 0;
  for (std::uint32_t c = 0; c < gridDim.x; c += Threads) {
    const std::uint32_t b = c + threadIdx.x;
    const std::uint32_t cnt = b < gridDim.x ? __ldcg(a.block_count + b) : 0u;
    std::uint32_t chunk = 0;
    const std::uint32_t ex = block_exclusive_sum<Threads>(cnt, chunk, tmp);
    s_start[threadIdx.x] = total + ex;  // past the grid: total + chunk, never chosen below
    __syncthreads();
    const gnmr::detail::OutputRange r = gnmr::detail::chunk_outputs(total, chunk, a.capacity);
    for (std::uint32_t o = r.begin + threadIdx.x; o < r.end; o += Threads) {
      // The block holding output o (gnmr/detail/compact.hpp): the last j with
      // s_start[j] <= o; s_start[0] = total <= o.
      const std::uint32_t j = gnmr::detail::last_start_at_or_below(s_start, Threads, o);
      const std::uint32_t u =
          __ldcg(a.tile_units + static_cast<std::size_t>(c + j) * a.tile_keep + (o - s_start[j]));
      a.out_units[o] = u;
      a.out_rep[o] = a.rep[u];
    }
    total += chunk;
    __syncthreads();  // s_start is rewritten by the next chunk
  }
  if (threadIdx.x == 0) {
    *a.out_summary = sum;
    *a.out_count = total;
  }
  __threadfence_system();  // the host reads the slot after the stream's event
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
    nb_ = (n_ + detail::kDrainTile - 1u) / detail::kDrainTile;
    keep_ = cap_ < detail::kDrainTile ? cap_ : detail::kDrainTile;
    // Scratch: [counter][block counts][tile units]; the counter starts at 0
    // and last_block_done leaves it at 0.
    scratch_ = DeviceBuffer((1u + nb_ + static_cast<std::size_t>(nb_) * keep_) * sizeof(std::uint32_t),
                            "TelemetryDrain: cudaMalloc");
    check(cudaMemset(scratch_.get(), 0, sizeof(std::uint32_t)), "TelemetryDrain: cudaMemset");
    device_barrier("TelemetryDrain: cudaMemset");
    pdl_ = pdl_supported(detail::compact_events<detail::kDrainThreads>);
    try {
      for (Slot& sl : slot_) {
        check(cudaHostAlloc(&sl.host, bytes_per_slot(), cudaHostAllocMapped), "TelemetryDrain: cudaHostAlloc");
        check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&sl.dev), sl.host, 0),
              "TelemetryDrain: cudaHostGetDevicePointer");
        check(cudaEventCreateWithFlags(&sl.done, cudaEventDisableTiming), "TelemetryDrain: cudaEventCreate");
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
  // step has completed to `log`, then enqueues this step's events. DeviceCtl:
  // anything with num_units(), decisions(), reports() and summary() on the
  // device (DeviceController, DynDeviceController).
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
    // first would then put step k-1's lines before step k-2's. mine must be
    // written before the kernel below overwrites it.
    if (mine.pending) {  // enqueued two steps ago and still unwritten
      check(cudaEventSynchronize(mine.done), "TelemetryDrain: cudaEventSynchronize");
      write(mine, log, names);
    }
    // event_done clears the "not ready" it may leave, which the launch
    // check below would otherwise throw.
    if (prev.pending && event_done(prev.done, "TelemetryDrain: cudaEventQuery")) write(prev, log, names);
    detail::DrainArgs a{};
    a.dec = ctl.decisions();
    a.rep = ctl.reports();
    a.summary = ctl.summary();
    a.n = n_;
    a.capacity = cap_;
    a.tile_keep = keep_;
    auto* sc = static_cast<std::uint32_t*>(scratch_.get());
    a.counter = sc;
    a.block_count = sc + 1;
    a.tile_units = sc + 1 + nb_;
    a.out_summary = summary_of(mine.dev);
    a.out_count = count_of(mine.dev);
    a.out_units = units_of(mine.dev);
    a.out_rep = reps_of(mine.dev);
    check(launch_dependent(detail::compact_events<detail::kDrainThreads>, nb_, detail::kDrainThreads, stream, pdl_, a),
          "TelemetryDrain: compact_events launch");
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
  // Whether the kernel is launched as a programmatic dependent (sm_90+).
  bool programmatic_launch() const { return pdl_; }

 private:
  struct Slot {
    unsigned char* host = nullptr;  // pinned, mapped: summary, count, units[cap], reports[cap]
    unsigned char* dev = nullptr;   // the same memory as the device sees it
    cudaEvent_t done = nullptr;
    bool pending = false;
    std::uint64_t order = 0;
  };
  // Layout of a slot.
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
  std::uint32_t nb_ = 0, keep_ = 0;
  DeviceBuffer scratch_;
  bool pdl_ = false;
  Slot slot_[2];
  std::uint64_t k_ = 0;
  std::uint64_t dropped_ = 0;
};

}  // namespace cuda
}  // namespace gnmr
