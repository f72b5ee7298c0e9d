// python-jax/gnmr_jax/csrc/host_step.hpp — the body of gnmr_jax's CPU
// handler (ffi_cpu.cpp) without XLA: one controller step from the partials
// and the state blob to the new blob, the decisions and the summary.
//
// Why a slot and not a bare controller: the JAX state is the blob, so every
// call must start from the blob it is given. Loading it costs a parse, a
// checksum and a temporary (load_state validates before it changes
// anything), so the slot keeps the bytes it saved last: when the blob given
// is byte for byte that one (a training loop feeds each step's state to
// the next), the controller already holds its state and the load is
// skipped. Any other blob (a restored checkpoint, a second guard of the
// same configuration) is loaded in full. The new blob is written by
// DynController::save_into. So a step in a loop allocates nothing
// (tests/unit/test_alloc.cpp counts it) and its decisions are those of a
// load, a step and a save (tests/jax/test_equality.py, test_checkpoint.py).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "gnmr/host/dyn_controller.hpp"

namespace gnmr_jax {

struct HostSlot {
  explicit HostSlot(std::unique_ptr<gnmr::DynController> c)
      : ctl(std::move(c)), last(ctl->state_bytes()) {
    ctl->save_into(last.data(), last.size());  // the controller holds what `last` says
  }
  std::unique_ptr<gnmr::DynController> ctl;
  std::vector<std::uint8_t> last;  // the blob of the controller's current state
};

// One step. `in` and `out` may be the same buffer (input_output_aliases);
// `bytes` is both their sizes. A blob that does not load throws
// gnmr::StateError and leaves the slot as it was.
inline const gnmr::StepSummary& host_step(HostSlot& slot, const float* partials, std::size_t n,
                                          const std::uint8_t* in, std::uint8_t* out, std::size_t bytes,
                                          float* scale, std::uint32_t* flags, std::int32_t* counts,
                                          float* values) {
  gnmr::DynController& c = *slot.ctl;
  // Load before anything is written: `out` may be `in`.
  if (bytes != slot.last.size() || std::memcmp(in, slot.last.data(), bytes) != 0) {
    c.load(in, bytes);  // the library's message on a bad blob; the controller unchanged
    if (bytes != slot.last.size()) {
      // It loaded (a version-1 blob migrates) but the new state would not
      // fit in the array: back to what `last` says, and refuse.
      c.load(slot.last.data(), slot.last.size());
      throw gnmr::StateError("gnmr: the state array has " + std::to_string(bytes) + " bytes, a state of " +
                             c.name() + " over " + std::to_string(n) + " units " + std::to_string(slot.last.size()) +
                             " (a state of an older format: re-create it with the guard's init)");
    }
    std::memcpy(slot.last.data(), in, bytes);
  }
  const gnmr::StepSummary& s = c.step(partials, n);
  c.save_into(slot.last.data(), bytes);
  std::memcpy(out, slot.last.data(), bytes);
  const std::vector<gnmr::UnitDecision>& d = c.decisions();
  for (std::size_t u = 0; u < n; ++u) {
    scale[u] = d[u].scale;
    flags[u] = d[u].flags;
  }
  write_summary(s, counts, values);
  return s;
}

}  // namespace gnmr_jax
