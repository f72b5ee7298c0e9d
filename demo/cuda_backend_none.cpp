// demo/cuda_backend_none.cpp — CudaBackend when gnmr-demo is built without
// nvcc: --device cuda then stops with a message that says so.
#include <stdexcept>

#include "cuda_backend.hpp"

namespace demo {

struct CudaBackend::Impl {};

bool CudaBackend::built() { return false; }

CudaBackend::CudaBackend(const CudaArm&, const std::vector<CudaTensorRef>&) {
  throw std::runtime_error(
      "gnmr-demo was built without its CUDA step (nvcc was not found at configure time); "
      "reconfigure with the CUDA Toolkit on PATH, or run --device cpu");
}
CudaBackend::~CudaBackend() = default;
std::size_t CudaBackend::num_units() const { return 0; }
std::uint32_t CudaBackend::max_in_recovery() const { return 0; }
// The constructor throws, so no object exists to call these on.
std::uint8_t* CudaBackend::promoted_mask() { throw std::logic_error("gnmr-demo: no CUDA step in this build"); }
const gnmr::StepSummary& CudaBackend::step(const gnmr::AdamWParams&, std::int64_t, double*, float*, float*, bool) {
  throw std::logic_error("gnmr-demo: no CUDA step in this build");
}
const std::vector<gnmr::UnitDecision>& CudaBackend::decisions() const {
  throw std::logic_error("gnmr-demo: no CUDA step in this build");
}
const std::vector<gnmr::UnitReport>& CudaBackend::reports() const {
  throw std::logic_error("gnmr-demo: no CUDA step in this build");
}

}  // namespace demo
