// gnmr_cuda_tests: what only a GPU can check of the CUDA backend.
//
// Exit 77 (CTest: skipped) without a usable device. The arithmetic was
// already checked on the CPU ([cuda-logic] tests replay the kernels' exact
// order); here the device must produce those same bits: per-unit norms for
// every dtype on random data with poisoned outputs and NaN/Inf segments,
// AdamW against its host replay, the controller against GnmrController
// (test_controller.cu), and the whole step (norms + controller + AdamW)
// captured in a CUDA graph and replayed, with no allocation and no host
// synchronisation per step (test_graph.cu).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gnmr/core/half.hpp"
#include "gnmr/cuda/adamw.cuh"
#include "gnmr/cuda/unit_norms.cuh"
#include "gnmr/host/adamw.hpp"
#include "../reference/unit_partials.hpp"
#include "harness.cuh"

namespace gpu_test {
namespace {

using gnmr::DType;

std::size_t esize(DType d) { return d == DType::kF32 ? 4 : 2; }

// The same segments in host and device memory, at the same address modulo
// 16 (the kernel's head/body split depends on it).
struct Mirror {
  struct Spec {
    std::size_t n;
    DType d;
    std::uint32_t unit;
    std::size_t off_elems;
    int poison;  // 0 none, 1 NaN inside, 2 -Inf at the end
  };
  std::vector<Spec> specs;
  std::vector<unsigned char> host_raw;
  unsigned char* host_base = nullptr;
  unsigned char* dev_base = nullptr;
  std::vector<std::size_t> offset;  // byte offset of each segment from the bases
  std::vector<std::vector<double>> vals;

  explicit Mirror(std::vector<Spec> s, std::uint64_t seed) : specs(std::move(s)) {
    std::size_t total = 0;
    for (const Spec& sp : specs) {
      total = (total + 255) / 256 * 256;
      offset.push_back(total + sp.off_elems * esize(sp.d));
      total = offset.back() + sp.n * esize(sp.d);
    }
    host_raw.resize(total + 512);
    std::uintptr_t a = reinterpret_cast<std::uintptr_t>(host_raw.data());
    host_base = reinterpret_cast<unsigned char*>((a + 255) / 256 * 256);
    if (cudaMalloc(&dev_base, total + 256) != cudaSuccess) dev_base = nullptr;
    std::mt19937_64 rng(seed);
    for (std::size_t k = 0; k < specs.size(); ++k) {
      const Spec& sp = specs[k];
      std::normal_distribution<float> dist(0.0f, std::exp(std::uniform_real_distribution<float>(-3.f, 3.f)(rng)));
      std::vector<double> v(sp.n);
      for (std::size_t i = 0; i < sp.n; ++i) {
        float x = dist(rng);
        if (sp.poison == 1 && i == sp.n / 2) x = gnmr::nan_f();
        if (sp.poison == 2 && i == sp.n - 1) x = -gnmr::inf_f();
        unsigned char* p = host_base + offset[k] + i * esize(sp.d);
        if (sp.d == DType::kF32) {
          std::memcpy(p, &x, 4);
          v[i] = x;
        } else {
          const std::uint16_t h = sp.d == DType::kBF16 ? gnmr::float_to_bf16(x) : gnmr::float_to_fp16(x);
          std::memcpy(p, &h, 2);
          v[i] = sp.d == DType::kBF16 ? gnmr::bf16_to_float(h) : gnmr::fp16_to_float(h);
        }
      }
      vals.push_back(std::move(v));
    }
    if (dev_base) cudaMemcpy(dev_base, host_base, total, cudaMemcpyHostToDevice);
  }
  ~Mirror() {
    if (dev_base) cudaFree(dev_base);
  }
  std::vector<gnmr::Segment> segments(bool device) const {
    std::vector<gnmr::Segment> s;
    for (std::size_t k = 0; k < specs.size(); ++k)
      s.push_back({(device ? dev_base : host_base) + offset[k], specs[k].n, specs[k].d, specs[k].unit});
    return s;
  }
};

template <class Norm>
void check_norms(const char* name, const Mirror& m, std::size_t units, std::uint64_t chunk) {
  const auto hsegs = m.segments(false);
  const auto dsegs = m.segments(true);
  gnmr::cuda::NormPlan plan(dsegs, units, gnmr::cuda::NormPlanOptions{chunk});
  const auto L = gnmr::detail::build_norm_layout(hsegs.data(), hsegs.size(), units, chunk);
  const std::vector<float> emu = gnmr::reference::emulate_unit_partials<Norm>(L);
  std::vector<double> ref(units, 0.0);
  std::vector<int> bad(units, 0);
  for (std::size_t k = 0; k < m.specs.size(); ++k) {
    const std::uint32_t u = m.specs[k].unit;
    bad[u] |= m.specs[k].poison;
    for (double x : m.vals[k]) {
      if (Norm::kCombine == gnmr::Combine::kSum)
        ref[u] += x * x;
      else
        ref[u] = std::max(ref[u], std::fabs(x));
    }
  }
  Dev<float> out(units);
  std::vector<float> first;
  for (int rep = 0; rep < (quick() ? 1 : 3); ++rep) {
    CK(cudaMemset(out.p, 0xFF, units * sizeof(float)));  // poison: every unit must be written
    CK(gnmr::cuda::unit_partials<Norm>(plan, out.p, 0));
    CK(cudaDeviceSynchronize());
    const std::vector<float> got = out.download();
    std::size_t exact = 0, refbad = 0;
    for (std::size_t u = 0; u < units; ++u) {
      exact += !(same_bits(got[u], emu[u]) || (got[u] != got[u] && emu[u] != emu[u]));
      if (bad[u] == 1) {
        refbad += got[u] == got[u];  // must be NaN
      } else if (bad[u] == 2) {
        refbad += !(got[u] == gnmr::inf_f());
      } else {
        const double tol = Norm::kCombine == gnmr::Combine::kSum ? 1e-5 * ref[u] : 0.0;
        refbad += !(std::fabs(static_cast<double>(got[u]) - ref[u]) <= tol);
      }
    }
    EXPECT(exact == 0, "%s chunk %llu: %zu units differ from the host replay of the kernel", name,
           static_cast<unsigned long long>(chunk), exact);
    EXPECT(refbad == 0, "%s chunk %llu: %zu units off the double reference", name,
           static_cast<unsigned long long>(chunk), refbad);
    if (rep == 0) first = got;
    EXPECT(std::memcmp(first.data(), got.data(), units * sizeof(float)) == 0, "%s: run %d differs from run 0",
           name, rep);
  }
}

}  // namespace

void test_norms() {
  std::printf("[norms]\n");
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::vector<Mirror::Spec> specs = {
        {300000, d, 0, 0, 0}, {70001, d, 1, 1, 0}, {333, d, 1, 3, 0}, {65536, d, 1, 0, 0},
        {1, d, 2, 0, 0},      {7, d, 3, 2, 0},     {262149, d, 4, 1, 0}, {1000, d, 5, 0, 1},
        {200000, d, 6, 0, 2}, {16, d, 7, 0, 0},    {17, d, 7, 1, 0}};
    std::mt19937_64 rng(static_cast<unsigned>(d) + 5);
    for (std::uint32_t u = 8; u < 40; ++u) specs.push_back({1 + rng() % 150000, d, u, rng() % 4, 0});
    Mirror m(specs, 1000 + static_cast<unsigned>(d));
    if (!m.dev_base) {
      EXPECT(false, "cudaMalloc failed");
      return;
    }
    const char* dn = gnmr::dtype_name(d);
    std::printf("  dtype %s: %zu segments\n", dn, specs.size());
    for (std::uint64_t chunk : {std::uint64_t{65536}, std::uint64_t{8192}}) {
      check_norms<gnmr::L2Norm>((std::string("l2 ") + dn).c_str(), m, 40, chunk);
      check_norms<gnmr::LinfNorm>((std::string("linf ") + dn).c_str(), m, 40, chunk);
    }
  }
  // Mixed dtypes inside units, and a plan on a caller-owned workspace.
  std::vector<Mirror::Spec> mixed = {{100000, DType::kF32, 0, 1, 0}, {100000, DType::kBF16, 0, 5, 0},
                                     {5000, DType::kF16, 1, 3, 0},   {77777, DType::kBF16, 1, 0, 0},
                                     {9, DType::kF16, 2, 0, 0}};
  Mirror m(mixed, 77);
  if (!m.dev_base) {
    EXPECT(false, "cudaMalloc failed");
    return;
  }
  check_norms<gnmr::L2Norm>("l2 mixed", m, 3, 65536);
  const auto dsegs = m.segments(true);
  const std::size_t bytes = gnmr::cuda::NormPlan::workspace_bytes(dsegs.data(), dsegs.size(), 3);
  Dev<unsigned char> ws(bytes);
  // Poisoned workspace and output: the plan must zero its own counters, and
  // the output buffer may reuse check_norms' freed one, which already holds
  // exactly the expected bits.
  CK(cudaMemset(ws.p, 0xA5, bytes));
  gnmr::cuda::NormPlan plan(dsegs.data(), dsegs.size(), 3, ws.p, bytes);
  Dev<float> out(3);
  CK(cudaMemset(out.p, 0xFF, 3 * sizeof(float)));
  CK(gnmr::cuda::unit_partials(plan, out.p, 0));
  CK(cudaDeviceSynchronize());
  const auto hsegs = m.segments(false);
  const auto emu = gnmr::reference::emulate_unit_partials<gnmr::L2Norm>(
      gnmr::detail::build_norm_layout(hsegs.data(), hsegs.size(), 3));
  const auto got = out.download();
  EXPECT(std::memcmp(got.data(), emu.data(), 3 * sizeof(float)) == 0, "caller workspace plan differs");
}

void test_adamw() {
  std::printf("[adamw]\n");
  struct Spec {
    std::size_t n;
    DType d;
    std::uint32_t unit;
    std::size_t off;  // elements; != 0 takes the scalar path
  };
  const std::vector<Spec> specs = {{100003, DType::kF32, 0, 0}, {4099, DType::kBF16, 0, 0}, {70000, DType::kF16, 1, 0},
                                   {5000, DType::kF32, 2, 1},   {333, DType::kBF16, 3, 1},  {1, DType::kF32, 4, 0},
                                   {2048, DType::kF16, 5, 0}};
  const std::size_t units = 7;  // unit 6 has no tensor
  std::mt19937_64 rng(4242);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  struct T {
    std::vector<float> p, m, v;
    std::vector<unsigned char> g;
    Dev<float> dp, dm, dv;
    Dev<unsigned char> dg;
    T(std::size_t n, std::size_t off, std::size_t es)
        : p(n), m(n), v(n), g(n * es), dp(n + off), dm(n + off), dv(n + off), dg((n + off) * es) {}
  };
  std::vector<std::unique_ptr<T>> ts;
  std::vector<gnmr::AdamWTensor> host_t, dev_t;
  for (const Spec& s : specs) {
    ts.emplace_back(new T(s.n, s.off, esize(s.d)));
    T& t = *ts.back();
    for (std::size_t i = 0; i < s.n; ++i) {
      t.p[i] = nd(rng);
      t.m[i] = 0.1f * nd(rng);
      t.v[i] = 0.01f * std::fabs(nd(rng));
    }
    CK(cudaMemcpy(t.dp.p + s.off, t.p.data(), s.n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(t.dm.p + s.off, t.m.data(), s.n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(t.dv.p + s.off, t.v.data(), s.n * 4, cudaMemcpyHostToDevice));
    host_t.push_back({t.p.data(), t.g.data(), t.m.data(), t.v.data(), s.n, s.d, s.unit});
    dev_t.push_back({t.dp.p + s.off, t.dg.p + s.off * esize(s.d), t.dm.p + s.off, t.dv.p + s.off, s.n, s.d, s.unit});
  }
  // Tensor 1 is in the no-decay group (biases, norms), in the same launch.
  host_t[1].weight_decay = dev_t[1].weight_decay = false;
  gnmr::cuda::AdamWPlan plan(dev_t, units, gnmr::cuda::AdamWPlanOptions{16384});
  const auto L = gnmr::detail::build_adamw_layout(host_t.data(), host_t.size(), units, 16384);
  std::vector<gnmr::AdamWUnitState> hstate(units, gnmr::detail::adamw_unit_init());
  gnmr::AdamWParams h;
  h.lr = 3e-3f;
  h.weight_decay = 0.05f;
  Dev<gnmr::UnitDecision> ddec(units);
  Dev<gnmr::StepSummary> dsum(1);
  const std::vector<float> p5_before = ts[6]->p;
  for (int step = 1; step <= 6; ++step) {
    for (std::size_t k = 0; k < specs.size(); ++k) {
      T& t = *ts[k];
      for (std::size_t i = 0; i < specs[k].n; ++i) {
        float x = nd(rng);
        if (specs[k].unit == 5 && i == 100) x = gnmr::nan_f();  // unit 5 is always skipped
        unsigned char* q = t.g.data() + i * esize(specs[k].d);
        if (specs[k].d == DType::kF32) {
          std::memcpy(q, &x, 4);
        } else {
          const std::uint16_t b = specs[k].d == DType::kBF16 ? gnmr::float_to_bf16(x) : gnmr::float_to_fp16(x);
          std::memcpy(q, &b, 2);
        }
      }
      CK(cudaMemcpy(t.dg.p + specs[k].off * esize(specs[k].d), t.g.data(), t.g.size(), cudaMemcpyHostToDevice));
    }
    std::vector<gnmr::UnitDecision> dec(units, gnmr::UnitDecision{1.0f, 0u});
    dec[5] = {0.0f, gnmr::kSkip | gnmr::kNonFinite};
    if (step == 2) dec[2] = {0.7f, gnmr::kResetMoments | gnmr::kGranted | gnmr::kInRecovery};
    if (step == 3) dec[0] = {0.0f, gnmr::kSkip | gnmr::kInRecovery};
    if (step >= 3) dec[3] = {0.5f, gnmr::kInRecovery};
    if (step == 4) dec[1] = {0.25f, gnmr::kResetMoments | gnmr::kInRecovery};
    ddec.upload(dec);
    // Step 5: the controller suggested a global skip; nothing may change.
    gnmr::StepSummary sum{};
    sum.skip_step = step == 5 ? 1u : 0u;
    dsum.upload(std::vector<gnmr::StepSummary>{sum});
    CK(gnmr::cuda::adamw_step(plan, h, ddec.p, 0, nullptr, dsum.p));
    gnmr::adamw_step_host(L, h, h.lr, dec.data(), hstate, sum.skip_step != 0u);
  }
  CK(cudaDeviceSynchronize());
  std::size_t diff = 0;
  for (std::size_t k = 0; k < specs.size(); ++k) {
    T& t = *ts[k];
    std::vector<float> p(specs[k].n), m(specs[k].n), v(specs[k].n);
    CK(cudaMemcpy(p.data(), t.dp.p + specs[k].off, specs[k].n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(m.data(), t.dm.p + specs[k].off, specs[k].n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(v.data(), t.dv.p + specs[k].off, specs[k].n * 4, cudaMemcpyDeviceToHost));
    diff += std::memcmp(p.data(), t.p.data(), p.size() * 4) != 0;
    diff += std::memcmp(m.data(), t.m.data(), m.size() * 4) != 0;
    diff += std::memcmp(v.data(), t.v.data(), v.size() * 4) != 0;
    if (specs[k].unit == 5) {
      EXPECT(std::memcmp(p.data(), p5_before.data(), p.size() * 4) == 0, "skipped unit's weights changed");
    }
  }
  EXPECT(diff == 0, "%zu AdamW arrays differ from the host replay", diff);
  const auto ds = plan.copy_unit_states();
  for (std::size_t u = 0; u < units; ++u)
    EXPECT(ds[u].step == hstate[u].step && ds[u].beta1_pow == hstate[u].beta1_pow &&
               ds[u].beta2_pow == hstate[u].beta2_pow,
           "unit %zu AdamW state: step %lld vs host %lld", u, static_cast<long long>(ds[u].step),
           static_cast<long long>(hstate[u].step));
  EXPECT(hstate[5].step == 0 && hstate[6].step == 0 && hstate[2].step == 4 && hstate[0].step == 4,
         "host replay bookkeeping (test's own expectation)");
}

}  // namespace gpu_test

int main() {
  // Argument checks that happen on the host, before any CUDA call: they run
  // (and must pass) on a machine without a GPU too.
  gpu_test::test_errors_without_device();
  if (gpu_test::failures()) {
    std::printf("gnmr_cuda_tests: %d FAILURE(S) before looking for a device\n", gpu_test::failures());
    return 1;
  }
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    // On the GPU machine (bench/gpu.sh sets GNMR_REQUIRE_GPU=1) "no device"
    // means a broken setup, e.g. a driver older than this runtime
    // (cudaErrorInsufficientDriver): fail loudly instead of skipping.
    const char* req = std::getenv("GNMR_REQUIRE_GPU");
    const bool required = req && req[0] == '1';
    std::printf("gnmr_cuda_tests: no usable CUDA device (%s): %s\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices",
                required ? "FAILED (GNMR_REQUIRE_GPU=1)" : "skipped");
    return required ? 1 : 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("gnmr_cuda_tests on %s (sm_%d%d)%s\n", prop.name, prop.major, prop.minor,
              gpu_test::quick() ? " [quick]" : "");
  // GNMR_CUDA_TEST_ONLY=telemetry,fused (say) runs those groups only: a
  // sanitizer run over the kernels that changed.
  const char* only = std::getenv("GNMR_CUDA_TEST_ONLY");
  const auto want = [only](const char* group) {
    if (only == nullptr || only[0] == '\0') return true;
    const std::string list = std::string(",") + only + ",";
    return list.find(std::string(",") + group + ",") != std::string::npos;
  };
  if (want("norms")) gpu_test::test_norms();
  if (want("adamw")) gpu_test::test_adamw();
  if (want("controller")) gpu_test::test_controller_vs_host();
  if (want("graph")) gpu_test::test_graph_and_no_alloc();
  if (want("telemetry")) gpu_test::test_telemetry();
  if (want("presets")) gpu_test::test_presets_on_device();
  if (want("fused")) gpu_test::test_fused_layered();
  if (want("ring")) gpu_test::test_summary_ring();
  if (want("conformance")) gpu_test::test_conformance_device();
  if (want("errors")) gpu_test::test_errors();
  if (want("stage")) gpu_test::test_state_stage();
  const cudaError_t last = cudaDeviceSynchronize();
  EXPECT(last == cudaSuccess, "device error at exit: %s", cudaGetErrorString(last));
  std::printf(gpu_test::failures() ? "gnmr_cuda_tests: %d FAILURE(S)\n" : "gnmr_cuda_tests: all passed\n",
              gpu_test::failures());
  return gpu_test::failures() ? 1 : 0;
}
