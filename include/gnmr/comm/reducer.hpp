// gnmr/comm/reducer.hpp — the Reducer slot between per-unit partials and the
// controller step (step (b), docs/algorithm.md).
//
// With sharded gradients (ZeRO/FSDP, tensor parallel) each rank holds part
// of every unit, so its partials (sum of squares, or max |x|) are partial in
// a second sense: they must be combined across ranks before the finish, or
// every rank would judge a different norm and take different decisions. A
// Reducer combines the N partials of all ranks, in place, with the
// NormPolicy's combine (sum for L2/RMS, max for Linf), in ONE collective of
// N values per step — never one per tensor.
//
// This header needs no communication library: it holds the no-op reducer
// (the default, single process / unsharded), the trait that says what a host
// Reducer must provide, and the two ways of plugging one in front of a
// controller. The engines live in their own headers, included only by code
// that has the engine: gnmr/comm/mpi.hpp (MPI, host buffers) and
// gnmr/comm/nccl.cuh (NCCL, device buffers).
//
// A host Reducer is any type with
//   void allreduce(float* partials, std::size_t n, Combine op);
// (and, optionally, the same for double*). After the call every rank holds
// the same n values. Non-finite partials must stay non-finite on every rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "gnmr/core/types.hpp"
#include "gnmr/policy/norm.hpp"

namespace gnmr {

// What a reducer did so far: collectives issued, payload bytes per rank,
// and (where the engine is synchronous, i.e. MPI) the wall time spent in
// them. Device reducers leave `seconds` at 0: timing them would need a sync.
struct ReducerStats {
  std::uint64_t collectives = 0;
  std::uint64_t bytes = 0;
  double seconds = 0.0;
};

// Default: one process holds whole units, nothing to combine.
struct NoReduce {
  static constexpr const char* kName = "none";
  void allreduce(float* /*partials*/, std::size_t /*n*/, Combine /*op*/) {}
  void allreduce(double* /*partials*/, std::size_t /*n*/, Combine /*op*/) {}
  ReducerStats stats() const { return {}; }
};

template <class R, class = void>
struct is_host_reducer : std::false_type {};
template <class R>
struct is_host_reducer<R, std::void_t<decltype(std::declval<R&>().allreduce(
                              std::declval<float*>(), std::size_t{}, Combine::kSum))>>
    : std::true_type {};

// The combine a Norm's partials need across ranks.
template <class Norm>
constexpr Combine combine_of() {
  return Norm::kCombine;
}

// Free-function form: reduce in place with the controller's own NormPolicy,
// then step. Use it when the controller is owned elsewhere.
template <class Controller, class Reducer>
const StepSummary& reduce_and_step(Controller& controller, Reducer& reducer, float* partials,
                                   std::size_t n) {
  static_assert(is_host_reducer<Reducer>::value,
                "gnmr: Reducer needs allreduce(float*, std::size_t, gnmr::Combine)");
  reducer.allreduce(partials, n, combine_of<typename Controller::Policies::NormT>());
  return controller.step(partials, n);
}

// Wrapper form: owns a controller and a reducer; step() reduces the caller's
// partials in place (they hold the global partials afterwards) and steps.
// Everything else is reached through controller(). The controller's own
// template parameters are untouched, so every backend and preset composes.
template <class Controller, class Reducer = NoReduce>
class ReducedController {
  static_assert(is_host_reducer<Reducer>::value,
                "gnmr: Reducer needs allreduce(float*, std::size_t, gnmr::Combine)");

 public:
  using Norm = typename Controller::Policies::NormT;

  ReducedController(Controller controller, Reducer reducer)
      : controller_(std::move(controller)), reducer_(std::move(reducer)) {}

  const StepSummary& step(float* partials, std::size_t n) {
    return reduce_and_step(controller_, reducer_, partials, n);
  }

  Controller& controller() { return controller_; }
  const Controller& controller() const { return controller_; }
  Reducer& reducer() { return reducer_; }
  const Reducer& reducer() const { return reducer_; }

 private:
  Controller controller_;
  Reducer reducer_;
};

}  // namespace gnmr
