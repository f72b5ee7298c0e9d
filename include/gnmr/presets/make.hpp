// gnmr/presets/make.hpp — the peers' methods (and GNMR) by name, on the host.
//
// Two ways in: the typed aliases and factories of gnmr/presets/typed.hpp
// (zero overhead), or presets::make(name, units, options), which returns a
// DynController for code that picks a method at run time. The names, the
// overrides each preset accepts and their checks are in
// gnmr/presets/table.hpp; the CUDA counterpart of make() is
// gnmr::cuda::make_device (gnmr/cuda/presets.cuh). Presets whose rule is
// global (clip, zclip, skip-step) are meant for ONE unit: sum the per-tensor
// L2 partials into unit 0 (is_global() tells). "outer+inner" names a
// layered controller (gnmr/host/layered.hpp): a peer's rule with a GNMR
// preset inside it, one partial per unit.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "gnmr/host/dyn_controller.hpp"
#include "gnmr/host/layered.hpp"
#include "gnmr/presets/table.hpp"
#include "gnmr/presets/typed.hpp"

namespace gnmr {
namespace presets {

// A controller for `name` with the peer's published defaults, changed by the
// overrides in `o`, behind the DynController interface. Throws
// std::invalid_argument for an unknown name, an override the preset has no
// use for, or a value its policies reject.
inline std::unique_ptr<DynController> make(const std::string& name, std::size_t num_units,
                                           const Options& o = {}) {
  if (is_layered(name)) {
    const LayeredPlan l = plan_layered(name, num_units, o);
    return std::unique_ptr<DynController>(new LayeredController(
        make(l.names.outer, l.outer_units, l.outer), make(l.names.inner, num_units, l.inner), ScaleCombine::kProduct,
        name));
  }
  return with_preset(name, num_units, o, [&name](auto c) { return make_dyn(std::move(c), name); });
}

}  // namespace presets

// The recommended controller, by one name: the preset "default", the
// stabilizer with GNMR's calibrated promotion inside it
// (presets::kDefaultPreset, docs/presets.md), over num_units units, with
// the overrides in `o` (those of "gnmr-calibrated" and of "stabilizer").
// On the device: gnmr::cuda::make_default (gnmr/cuda/presets.cuh), the same
// decisions bit for bit in two launches. GnmrController<> is another
// controller: GNMR's own rule with the policies' defaults.
//
// Determinism: a function of the per-unit partials alone (docs/algorithm.md,
// "Determinism"); the same partials give the same decisions on every run,
// rank and backend.
inline std::unique_ptr<DynController> make_default(std::size_t num_units, const presets::Options& o = {}) {
  return presets::make("default", num_units, o);  // named "default", as gnmr::cuda::make_default's
}

}  // namespace gnmr
