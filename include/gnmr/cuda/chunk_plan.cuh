// gnmr/cuda/chunk_plan.cuh — the device tables both chunk plans
// (NormPlan, unit_norms.cuh; AdamWPlan, adamw.cuh) are built on: the chunk
// table their kernel reads one entry of per block, a per-unit index, and
// one counter per unit for the last-block handoff (grid.cuh), carved from
// the plan's workspace and uploaded once, at setup.
//
// The layouts themselves (gnmr/plan/) are validated and cut on the host;
// what is the same for both on the device is here, once, with one argument
// order: (workspace, chunks, units).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gnmr/cuda/error.cuh"
#include "gnmr/cuda/memory.cuh"

namespace gnmr {
namespace cuda {
namespace detail {

template <class Chunk>
struct ChunkTables {
  Chunk* chunks = nullptr;
  // NormPlan: where each unit's chunks begin (units + 1 entries, the fold
  // of a unit's chunk partials needs the range); AdamWPlan: chunks per unit.
  std::uint32_t* unit_index = nullptr;
  // Zero between launches: each unit's last block resets its own.
  unsigned int* counters = nullptr;

  // Carves the three from c, in this order; a dry-run Carver measures.
  static ChunkTables carve(Carver& c, std::size_t chunks, std::size_t units, std::size_t index_len) {
    ChunkTables t;
    t.chunks = c.take<Chunk>(chunks);
    t.unit_index = c.take<std::uint32_t>(index_len);
    t.counters = c.take<unsigned int>(units);
    return t;
  }

  // Setup time: uploads the chunk table and the index and zeroes the
  // counters. The caller's device_barrier() orders them before any step.
  void upload(const std::vector<Chunk>& host_chunks, const std::vector<std::uint32_t>& host_index,
              std::size_t units, const char* who) const {
    const std::string w(who);
    gnmr::cuda::upload(chunks, host_chunks.data(), host_chunks.size(), (w + ": upload chunk table").c_str());
    gnmr::cuda::upload(unit_index, host_index.data(), host_index.size(), (w + ": upload unit index").c_str());
    check(cudaMemset(counters, 0, units * sizeof(unsigned int)), (w + ": zero counters").c_str());
  }
};

}  // namespace detail
}  // namespace cuda
}  // namespace gnmr
