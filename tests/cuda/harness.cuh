// tests/cuda/harness.cuh — the little test harness of gnmr_cuda_tests.
//
// The GPU tests are a plain program rather than Catch2 so that the GPU
// machine needs nothing but nvcc and CMake (bench/gpu.sh), and so that "no
// GPU here" can be the distinct exit code 77 (CTest SKIP_RETURN_CODE).
// EXPECT records a failure and goes on; a test body returns early on a CUDA
// error (CK) because nothing after it would mean anything.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace gnmr {
class DynController;
namespace cuda {
class DynDeviceController;
}  // namespace cuda
}  // namespace gnmr

namespace gpu_test {

inline int& failures() {
  static int n = 0;
  return n;
}
inline bool quick() {  // GNMR_CUDA_TEST_QUICK=1: smaller sizes (sanitizer runs)
  const char* q = std::getenv("GNMR_CUDA_TEST_QUICK");
  return q && q[0] == '1';
}

#define EXPECT(cond, ...)                                                  \
  do {                                                                     \
    if (!(cond)) {                                                         \
      ++gpu_test::failures();                                              \
      std::printf("  FAILED %s:%d: %s | ", __FILE__, __LINE__, #cond);     \
      std::printf(__VA_ARGS__);                                            \
      std::printf("\n");                                                   \
    }                                                                      \
  } while (0)

#define CK(call)                                                                         \
  do {                                                                                   \
    const cudaError_t ck_e_ = (call);                                                    \
    if (ck_e_ != cudaSuccess) {                                                          \
      ++gpu_test::failures();                                                            \
      std::printf("  FAILED %s:%d: %s -> %s\n", __FILE__, __LINE__, #call,               \
                  cudaGetErrorString(ck_e_));                                            \
      return;                                                                            \
    }                                                                                    \
  } while (0)

inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }
// Equal, both NaN, or one ulp apart.
inline bool within_ulp(float a, float b, unsigned ulps = 1) {
  if (same_bits(a, b) || (a != a && b != b)) return true;
  std::int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if ((ia < 0) != (ib < 0)) return a == b;
  const std::int64_t d = static_cast<std::int64_t>(ia) - ib;
  return (d < 0 ? -d : d) <= static_cast<std::int64_t>(ulps);
}

// A device allocation owned by a test (freed on scope exit).
template <class T>
struct Dev {
  T* p = nullptr;
  std::size_t n = 0;
  explicit Dev(std::size_t count) : n(count) {
    if (cudaMalloc(&p, count * sizeof(T) + 64) != cudaSuccess) p = nullptr;
  }
  ~Dev() {
    if (p) cudaFree(p);
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  void upload(const std::vector<T>& h) { cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice); }
  std::vector<T> download() const {
    std::vector<T> h(n);
    cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
};

// Tests, defined in the .cu files.
void test_norms();
void test_adamw();
void test_graph_and_no_alloc();
void test_controller_vs_host();
void test_telemetry();
void test_presets_on_device();
void test_fused_layered();
void test_summary_ring();
void test_errors_without_device();  // runs without a GPU
void test_conformance_device();
void test_errors();
void test_state_stage();

// presets::make and cuda::make_device, compiled in test_presets.cu only
// (each instantiates every preset: about a minute of nvcc per file that
// calls them).
std::unique_ptr<gnmr::DynController> make_host(const std::string& name, std::size_t n);
std::unique_ptr<gnmr::cuda::DynDeviceController> make_dev(const std::string& name, std::size_t n);

}  // namespace gpu_test
