// GPU test: the whole guarded step — per-unit norms, DeviceController,
// fused AdamW — captured once in a CUDA graph (global capture mode, which
// rejects synchronising or allocating calls) and replayed step after step
// must leave bit-identical weights, moments and decisions to the same steps
// run eagerly; the eager steps must not allocate (cudaMemGetInfo) and must
// not wait for the device (they enqueue behind a spinning kernel).
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "gnmr/core/half.hpp"
#include "gnmr/cuda/all.cuh"
#include "harness.cuh"

namespace gpu_test {
namespace {

__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

constexpr std::size_t kTensors = 40;

// One training world: weights, moments, gradients and the three plans.
struct World {
  std::vector<std::size_t> n;
  std::vector<std::unique_ptr<Dev<float>>> p, m, v;
  std::vector<std::unique_ptr<Dev<std::uint16_t>>> g;  // bf16 grads
  std::unique_ptr<gnmr::cuda::NormPlan> norms;
  std::unique_ptr<gnmr::cuda::DeviceController<>> ctl;
  std::unique_ptr<gnmr::cuda::AdamWPlan> opt;
  Dev<float> partials{kTensors};
  Dev<float> lr{1};
  gnmr::AdamWParams h;

  World(const std::vector<std::size_t>& sizes, const std::vector<std::vector<float>>& init,
        const gnmr::ControllerOptions& copt)
      : n(sizes) {
    std::vector<gnmr::Segment> segs;
    std::vector<gnmr::AdamWTensor> ts;
    for (std::size_t i = 0; i < n.size(); ++i) {
      p.emplace_back(new Dev<float>(n[i]));
      m.emplace_back(new Dev<float>(n[i]));
      v.emplace_back(new Dev<float>(n[i]));
      g.emplace_back(new Dev<std::uint16_t>(n[i]));
      p[i]->upload(init[i]);
      cudaMemset(m[i]->p, 0, n[i] * 4);
      cudaMemset(v[i]->p, 0, n[i] * 4);
      segs.push_back({g[i]->p, n[i], gnmr::DType::kBF16, static_cast<std::uint32_t>(i)});
      ts.push_back({p[i]->p, g[i]->p, m[i]->p, v[i]->p, n[i], gnmr::DType::kBF16, static_cast<std::uint32_t>(i)});
    }
    norms.reset(new gnmr::cuda::NormPlan(segs, n.size(), gnmr::cuda::NormPlanOptions{16384}));
    gnmr::GnmrTrigger trig;
    trig.warmup = 3;
    gnmr::MaxO b;
    b.max_o = 2;
    b.lock = 3;
    ctl.reset(new gnmr::cuda::DeviceController<>(n.size(), {}, {}, trig, {}, b, copt));
    opt.reset(new gnmr::cuda::AdamWPlan(ts, n.size()));
    h.lr = 1e-3f;
    const float lr0 = 1e-3f;
    cudaMemcpy(lr.p, &lr0, 4, cudaMemcpyHostToDevice);
  }
  cudaError_t step(cudaStream_t s) {
    cudaError_t e = gnmr::cuda::unit_partials(*norms, partials.p, s);
    if (e == cudaSuccess) e = ctl->step(partials.p, s);
    if (e == cudaSuccess) e = gnmr::cuda::adamw_step(*opt, h, ctl->decisions(), s, lr.p);
    return e;
  }
};

// Gradients of step t: noise, a spike burst every 6 steps, a NaN at step 9.
void make_grads(std::uint64_t seed, int t, const std::vector<std::size_t>& n, std::vector<std::vector<std::uint16_t>>& out) {
  std::mt19937_64 rng(seed * 1000 + static_cast<std::uint64_t>(t));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (std::size_t i = 0; i < n.size(); ++i) {
    const float scale = (t % 6 == 0 && i % 3 == 0) ? 50.0f : 1e-2f * static_cast<float>(1 + i % 5);
    out[i].resize(n[i]);
    for (std::size_t k = 0; k < n[i]; ++k) out[i][k] = gnmr::float_to_bf16(scale * nd(rng));
    if (t == 9 && i == 7) out[i][n[i] / 2] = gnmr::float_to_bf16(gnmr::nan_f());
  }
}

}  // namespace

namespace {

// with the systemic rule off, and on with global-clip (the action with the
// most device work: the tree of squares, the tracker in device memory).
void graph_case(const char* name, const gnmr::ControllerOptions& opt) {
  std::printf("  %s\n", name);
  std::mt19937_64 rng(31337);
  std::vector<std::size_t> sizes(kTensors);
  std::vector<std::vector<float>> init(kTensors);
  for (std::size_t i = 0; i < kTensors; ++i) {
    sizes[i] = 1 + rng() % (i == 0 ? 1000000 : 120000);
    init[i].resize(sizes[i]);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    for (float& x : init[i]) x = nd(rng);
  }
  World eager(sizes, init, opt), graphed(sizes, init, opt);
  cudaStream_t se, sg;
  CK(cudaStreamCreateWithFlags(&se, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&sg, cudaStreamNonBlocking));
  CK(cudaDeviceSynchronize());

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(sg, cudaStreamCaptureModeGlobal));
  const cudaError_t cap = graphed.step(sg);
  CK(cudaStreamEndCapture(sg, &graph));
  CK(cap);
  CK(cudaGraphInstantiate(&exec, graph, 0));

  const int steps = quick() ? 12 : 30;
  std::vector<std::vector<std::uint16_t>> grads(kTensors);
  std::size_t free0 = 0, free1 = 0, total = 0;
  std::size_t dec_diff = 0, skipped_steps = 0, systemic_steps = 0;
  for (int t = 1; t <= steps; ++t) {
    make_grads(5, t, sizes, grads);
    for (std::size_t i = 0; i < kTensors; ++i) {
      eager.g[i]->upload(grads[i]);
      graphed.g[i]->upload(grads[i]);
    }
    CK(cudaDeviceSynchronize());
    if (t == 2) CK(cudaMemGetInfo(&free0, &total));
    CK(eager.step(se));
    CK(cudaGraphLaunch(exec, sg));
    CK(cudaDeviceSynchronize());
    const auto de = eager.ctl->copy_decisions();
    const auto dg = graphed.ctl->copy_decisions();
    dec_diff += std::memcmp(de.data(), dg.data(), de.size() * sizeof(gnmr::UnitDecision)) != 0;
    skipped_steps += (de[7].flags & gnmr::kSkip) != 0u;
    systemic_steps += eager.ctl->copy_summary().systemic != 0u;
  }
  CK(cudaMemGetInfo(&free1, &total));
  if (!quick()) {
    EXPECT(free0 == free1, "device memory changed across steps: %zu -> %zu free bytes", free0, free1);
  } else if (free0 != free1) {  // under compute-sanitizer the tool's own buffers may move it
    std::printf("  note: free device memory %zu -> %zu (quick/sanitizer run, not checked)\n", free0, free1);
  }
  EXPECT(dec_diff == 0, "graph replay decisions differ on %zu steps", dec_diff);
  EXPECT(skipped_steps >= 1, "the NaN step was not skipped");
  EXPECT((opt.systemic.action == gnmr::SystemicAction::kOff) == (systemic_steps == 0),
         "%zu systemic steps under action %s", systemic_steps, gnmr::systemic_action_name(opt.systemic.action));
  EXPECT(eager.ctl->steps_done() == steps && graphed.ctl->steps_done() == steps, "step counters");
  const gnmr::StepSummary se_sum = eager.ctl->copy_summary(), sg_sum = graphed.ctl->copy_summary();
  EXPECT(std::memcmp(&se_sum, &sg_sum, sizeof se_sum) == 0, "summaries differ");
  std::size_t arr_diff = 0, nonfinite = 0;
  for (std::size_t i = 0; i < kTensors; ++i) {
    const auto pe = eager.p[i]->download(), pg = graphed.p[i]->download();
    const auto me = eager.m[i]->download(), mg = graphed.m[i]->download();
    arr_diff += std::memcmp(pe.data(), pg.data(), pe.size() * 4) != 0;
    arr_diff += std::memcmp(me.data(), mg.data(), me.size() * 4) != 0;
    for (float x : pe) nonfinite += !(x == x) || x == gnmr::inf_f() || x == -gnmr::inf_f();
  }
  EXPECT(arr_diff == 0, "%zu weight/moment arrays differ between graph and eager", arr_diff);
  EXPECT(nonfinite == 0, "%zu non-finite weights: the NaN gradient leaked", nonfinite);

  // No host synchronisation: enqueue a whole step behind a kernel that
  // spins for ~100 ms (2 s under a sanitizer, whose launches are slow); the
  // calls must return while it still runs.
  int clock_khz = 0;
  CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  spin_kernel<<<1, 1, 0, se>>>(static_cast<long long>(clock_khz) * (quick() ? 2000 : 100));
  CK(cudaGetLastError());
  const auto t0 = std::chrono::steady_clock::now();
  CK(eager.step(se));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const cudaError_t pending = cudaStreamQuery(se);
  // NotReady is the expected answer, but the runtime may keep it as the
  // last error, which the next launch check (in test_telemetry) would read.
  if (pending == cudaErrorNotReady) (void)cudaGetLastError();
  EXPECT(pending == cudaErrorNotReady, "the stream had drained: the step waited for the device");
  EXPECT(quick() || ms < 20.0, "enqueueing a step took %.2f ms behind a busy stream", ms);
  CK(cudaStreamSynchronize(se));
  std::printf("    %d steps (%zu systemic): graph == eager; enqueue behind a busy stream took %.3f ms\n", steps,
              systemic_steps, ms);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(se);
  cudaStreamDestroy(sg);
}

}  // namespace

void test_graph_and_no_alloc() {
  std::printf("[graph capture, no allocation, no host sync]\n");
  graph_case("systemic rule off", gnmr::ControllerOptions{});
  gnmr::ControllerOptions o;
  o.systemic.action = gnmr::SystemicAction::kGlobalClip;
  o.systemic.share = 0.25;  // the bursts of make_grads spike 14 of 40 tensors
  graph_case("systemic global-clip", o);
}

}  // namespace gpu_test
