// gnmr/cuda/error.cuh — how the CUDA backend reports errors: the exception
// type, the check that throws it, and the event query that tells "not yet"
// from a failure.
//
// One rule for the whole device API (docs/algorithm.md, Errors on the
// device API): (1) a caller's mistake that the host can see before
// enqueuing anything (a null pointer, an empty plan, a size or count
// mismatch, an invalid hyperparameter, a call the configuration does not
// allow) throws std::invalid_argument (std::logic_error for the last), and
// nothing is enqueued or changed; (2) a failure reported by CUDA is
// returned as the cudaError_t by the entry points that return one (the
// per-step enqueues: unit_partials, DeviceController::step / step_norms /
// copy_summary_async, adamw_step, SummaryRing::push; CUB style) and thrown
// as gnmr::cuda::Error by every other (constructors, plan builders,
// blocking copies, save/restore, TelemetryDrain, NcclReducer, whose NCCL
// failures are std::runtime_error).
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace gnmr {
namespace cuda {

class Error : public std::runtime_error {
 public:
  Error(cudaError_t e, const std::string& what)
      : std::runtime_error("gnmr: " + what + ": " + cudaGetErrorName(e) + " (" +
                           cudaGetErrorString(e) + ")"),
        code_(e) {}
  cudaError_t code() const { return code_; }

 private:
  cudaError_t code_;
};

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(e, what);
}

// Whether the work before event `e` has completed; never waits. A query
// that says "not yet" is not an error, but the runtime may keep it as the
// last error, which a caller's cudaGetLastError() after its next launch
// would then report: only that is cleared, an error of the caller's that
// was pending before stays. Any other failure throws Error.
inline bool event_done(cudaEvent_t e, const char* what) {
  const cudaError_t before = cudaPeekAtLastError();
  const cudaError_t q = cudaEventQuery(e);
  if (q == cudaSuccess) return true;
  if (q == cudaErrorNotReady) {
    if (before == cudaSuccess) (void)cudaGetLastError();
    return false;
  }
  check(q, what);
  return false;
}

}  // namespace cuda
}  // namespace gnmr
