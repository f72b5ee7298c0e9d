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
#include <memory>
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

namespace detail {
// A controller held by value, by pointer or by smart pointer: the object
// itself (so a ReducedController may own a std::unique_ptr<DynController>).
template <class C>
C& controller_ref(C& c) {
  return c;
}
template <class C>
C& controller_ref(C* c) {
  return *c;
}
template <class C, class D>
C& controller_ref(std::unique_ptr<C, D>& c) {
  return *c;
}
template <class C, class D>
const C& controller_ref(const std::unique_ptr<C, D>& c) {
  return *c;
}
template <class C>
C& controller_ref(std::shared_ptr<C>& c) {
  return *c;
}
}  // namespace detail

// Free-function form: reduce in place with the controller's own combine
// (partial_combine(): the sum for L2 and RMS partials, the max for Linf),
// then step. Any controller: a typed GnmrController, a DynController (so
// gnmr::make_default's), a layered one, or a pointer to one. Use it when
// the controller is owned elsewhere.
template <class Controller, class Reducer>
const StepSummary& reduce_and_step(Controller& controller, Reducer& reducer, float* partials,
                                   std::size_t n) {
  static_assert(is_host_reducer<Reducer>::value,
                "gnmr: Reducer needs allreduce(float*, std::size_t, gnmr::Combine)");
  auto& c = detail::controller_ref(controller);
  reducer.allreduce(partials, n, c.partial_combine());
  return c.step(partials, n);
}

// The same on the device, on a stream: any device controller (typed,
// DynDeviceController, gnmr::cuda::make_default's) and a device reducer
// with allreduce(float*, size_t, Combine, stream) (gnmr::cuda::NcclReducer).
// Enqueues the collective and the step; returns the step's cudaError_t.
template <class Controller, class Reducer, class Stream>
auto reduce_and_step(Controller& controller, Reducer& reducer, float* d_partials, std::size_t n, Stream stream)
    -> decltype(detail::controller_ref(controller).step(d_partials, stream)) {
  auto& c = detail::controller_ref(controller);
  reducer.allreduce(d_partials, n, c.partial_combine(), stream);
  return c.step(d_partials, stream);
}

// Wrapper form: owns a controller and a reducer; step() reduces the caller's
// partials in place (they hold the global partials afterwards) and steps.
// Everything else is reached through controller(). The controller's own
// template parameters are untouched, so every backend and preset composes;
// Controller may be a typed controller or a std::unique_ptr to any
// controller (ReducedController<std::unique_ptr<gnmr::DynController>, R>
// holds gnmr::make_default's).
template <class Controller, class Reducer = NoReduce>
class ReducedController {
  static_assert(is_host_reducer<Reducer>::value,
                "gnmr: Reducer needs allreduce(float*, std::size_t, gnmr::Combine)");

 public:
  ReducedController(Controller controller, Reducer reducer)
      : controller_(std::move(controller)), reducer_(std::move(reducer)) {}

  const StepSummary& step(float* partials, std::size_t n) {
    return reduce_and_step(controller_, reducer_, partials, n);
  }

  // The controller itself (dereferenced when held by pointer).
  auto& controller() { return detail::controller_ref(controller_); }
  const auto& controller() const { return detail::controller_ref(controller_); }
  Reducer& reducer() { return reducer_; }
  const Reducer& reducer() const { return reducer_; }

 private:
  Controller controller_;
  Reducer reducer_;
};

}  // namespace gnmr
