// The device API's error rule (docs/algorithm.md, Errors on the device API):
// a caller's mistake that the host can see throws std::invalid_argument
// before anything is enqueued or changed; a CUDA failure is returned by the
// per-step entry points. test_errors_without_device() needs no GPU (it runs
// before main() looks for one, so the CPU-only CI runs it too);
// test_errors() checks the paths that need device objects to reach.
#include <cuda_runtime.h>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "gnmr/cuda/adamw.cuh"
#include "gnmr/cuda/controller.cuh"
#include "gnmr/cuda/summary_ring.cuh"
#include "gnmr/cuda/unit_norms.cuh"
#include "harness.cuh"

namespace gpu_test {
namespace {

// The message of the std::invalid_argument that f throws, or "" (and a
// failure recorded) when it throws nothing or something else.
template <class F>
std::string invalid_argument_of(const char* what, F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (...) {
    EXPECT(false, "%s: threw something other than std::invalid_argument", what);
    return "";
  }
  EXPECT(false, "%s: did not throw", what);
  return "";
}

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

}  // namespace

void test_errors_without_device() {
  std::printf("[errors without a device]\n");
  // Empty plans: default-constructed, no device memory behind them. The
  // pointers are never dereferenced: the check comes first.
  gnmr::cuda::NormPlan empty_norms;
  float not_device = 0.0f;
  std::string m = invalid_argument_of("unit_partials(empty plan)", [&] {
    (void)gnmr::cuda::unit_partials(empty_norms, &not_device, 0);
  });
  EXPECT(has(m, "unit_partials") && has(m, "empty NormPlan"), "message: %s", m.c_str());
  m = invalid_argument_of("unit_partials<LinfNorm>(empty plan, null)", [&] {
    (void)gnmr::cuda::unit_partials<gnmr::LinfNorm>(empty_norms, nullptr, 0);
  });
  EXPECT(has(m, "empty NormPlan"), "message: %s", m.c_str());

  gnmr::cuda::AdamWPlan empty_adamw;
  gnmr::AdamWParams h;
  m = invalid_argument_of("adamw_step(empty plan)",
                          [&] { (void)gnmr::cuda::adamw_step(empty_adamw, h, nullptr, 0); });
  EXPECT(has(m, "adamw_step") && has(m, "empty AdamWPlan"), "message: %s", m.c_str());
  h.lr = -1.0f;  // both wrong: the plan is checked first, either way it throws
  m = invalid_argument_of("adamw_step(empty plan, lr < 0)",
                          [&] { (void)gnmr::cuda::adamw_step(empty_adamw, h, nullptr, 0); });
  EXPECT(!m.empty(), "no message");
}

void test_errors() {
  std::printf("[errors on the device]\n");
  const std::size_t n = 4096;
  Dev<float> grad(n), partials(4), param(n), m1(n), m2(n);
  if (!grad.p || !partials.p || !param.p || !m1.p || !m2.p) {
    EXPECT(false, "cudaMalloc failed");
    return;
  }
  CK(cudaMemset(grad.p, 0, n * sizeof(float)));
  CK(cudaDeviceSynchronize());
  std::vector<gnmr::Segment> segs;
  for (std::uint32_t u = 0; u < 4; ++u) segs.push_back({grad.p + u * 1024, 1024, gnmr::DType::kF32, u});
  gnmr::cuda::NormPlan plan(segs, 4);
  std::string m = invalid_argument_of("unit_partials(null partials)",
                                      [&] { (void)gnmr::cuda::unit_partials(plan, nullptr, 0); });
  EXPECT(has(m, "null partials"), "message: %s", m.c_str());

  gnmr::cuda::DeviceController<> ctl(4);
  m = invalid_argument_of("step(null)", [&] { (void)ctl.step(nullptr, 0); });
  EXPECT(has(m, "null partials"), "message: %s", m.c_str());
  m = invalid_argument_of("copy_summary_async(null)", [&] { (void)ctl.copy_summary_async(nullptr, 0); });
  EXPECT(has(m, "null host pointer"), "message: %s", m.c_str());

  std::vector<gnmr::AdamWTensor> ts;
  for (std::uint32_t u = 0; u < 4; ++u)
    ts.push_back({param.p + u * 1024, grad.p + u * 1024, m1.p + u * 1024, m2.p + u * 1024, 1024,
                  gnmr::DType::kF32, u});
  gnmr::cuda::AdamWPlan adamw(ts, 4);
  gnmr::AdamWParams bad;
  bad.eps = 0.0f;
  m = invalid_argument_of("adamw_step(eps 0)", [&] { (void)gnmr::cuda::adamw_step(adamw, bad, nullptr, 0); });
  EXPECT(has(m, "eps"), "message: %s", m.c_str());

  gnmr::cuda::SummaryRing<> ring(2);
  m = invalid_argument_of("SummaryRing::push(null)", [&] { (void)ring.push(nullptr, 0); });
  EXPECT(has(m, "null value"), "message: %s", m.c_str());
  EXPECT(ring.pushed() == 0, "a refused push took a slot: pushed %llu",
         static_cast<unsigned long long>(ring.pushed()));

  // Nothing was enqueued by the refused calls, and no error is pending.
  CK(cudaDeviceSynchronize());
  CK(cudaGetLastError());
  // A valid call still works after the refused ones.
  CK(gnmr::cuda::unit_partials(plan, partials.p, 0));
  CK(cudaDeviceSynchronize());
  const std::vector<float> got = partials.download();
  for (std::size_t u = 0; u < 4; ++u) EXPECT(got[u] == 0.0f, "unit %zu partial %g", u, static_cast<double>(got[u]));
}

}  // namespace gpu_test
