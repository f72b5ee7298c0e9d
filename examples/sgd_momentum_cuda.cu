// examples/sgd_momentum_cuda.cu — the recommended controller inside an
// optimizer of one's own: SGD with momentum as a CUDA kernel that reads
// gnmr::cuda::make_default's decisions through the __device__ accessors
// (gnmr/cuda/accessors.cuh), with the partials from gnmr::cuda::NormPlan.
// Copy it when your framework has its own optimizer kernels (for AdamW,
// gnmr/cuda/adamw.cuh is ready made).
//
// One training step, all on one stream, captured once in a CUDA graph and
// replayed kSteps times (no allocation, no host synchronisation, no copy to
// the host per step):
//
//   make_grads        the "backward": synthetic gradients (sgd_case.hpp)
//   unit_partials     NormPlan: per-unit sums of squares, one launch
//   ctl->step         the default controller (DefaultDeviceController: the
//                     stabilizer inside GNMR's calibrated trigger, two
//                     launches): the decisions of this step
//   sgd_momentum      the user's optimizer: per block, one 8-byte load of
//                     its unit's decision, then skip (a select: return
//                     before reading anything), reset the momentum if asked,
//                     scale the gradient
//   record            keeps each step's decisions, to compare afterwards
//
// The default scales every unit on every step (the stabilizer sets each
// unit's gradient norm), so the kernel always multiplies by grad_scale(d);
// on a spike GNMR grants the unit a slot, clips it further and sets
// kPromote for the lock. kPromote is for the unit's operator's next forward
// and backward (promote_fake_quant_cuda.cu reads it in a kernel); an
// optimizer has nothing to do with it. The faults (sgd_case.hpp): unit 1
// x40 at step 30 and unit 0 x25 at step 60 (each granted), a NaN in unit 2
// at step 45 (skipped).
//
// The step number the gradient generator needs comes from the controller's
// own device counter, so the captured graph is replayed as is. Afterwards
// the program compares, bit for bit, every step's decisions and the final
// parameters and momentum buffers with the CPU reference (sgd_case.hpp:
// the same functions, gnmr::make_default on the host and the norm kernel's
// order emulated), checks that the run granted and skipped what the header
// says, and prints what the controller did.
//
// Build outside CMake, from the repository root (what gnmr's CMake build
// gives nvcc for this file: C++17, the include path and
// -Xcompiler=-ffp-contract=off from the gnmr::gnmr target, -O3 for Release,
// sm_90 by default: use your GPU's architecture):
//   nvcc -std=c++17 -O3 -arch=sm_90 -I include -Xcompiler=-ffp-contract=off examples/sgd_momentum_cuda.cu
// -Xcompiler=-ffp-contract=off stops the host compiler from fusing a*b+c
// into an FMA: the CPU reference must round every operation as the device
// does. nvcc needs no -fmad=false: gnmr's device arithmetic, and this
// example's, goes through gnmr::math, whose device forms are the _rn
// intrinsics nvcc never fuses; the one FMA nvcc forms here (in noise(), an
// integer times 2^-23 minus 1) is exact, so it gives the same bits.
//
// Exit status: 0 all checks passed, 1 a check failed, 77 no usable CUDA
// device (CTest: skipped). Expected output: docs/record/examples.md.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "example_cuda.cuh"
#include "gnmr/cuda/accessors.cuh"
#include "gnmr/cuda/presets.cuh"
#include "gnmr/cuda/unit_norms.cuh"
#include "sgd_case.hpp"

namespace {

using namespace sgd_case;

// What the kernels know of a parameter tensor (uploaded once).
struct DevTensor {
  float* p;
  float* g;
  float* buf;
  std::uint32_t numel, unit;
  float level;
};

// grid.y = tensor, grid.x = blocks striding over its elements.
__global__ void make_grads(const DevTensor* __restrict__ ts, const std::int64_t* __restrict__ steps_done) {
  const DevTensor T = ts[blockIdx.y];
  const std::int64_t t = *steps_done + 1;  // the step this backward belongs to
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < T.numel; i += gridDim.x * blockDim.x)
    T.g[i] = grad(t, blockIdx.y, T.unit, T.level, i, T.p[i]);
}

// The optimizer. Everything gnmr asks of it is in the first four lines.
__global__ void sgd_momentum(const DevTensor* __restrict__ ts, sgdm::Hyper h,
                             const gnmr::UnitDecision* __restrict__ decisions,
                             const gnmr::StepSummary* __restrict__ summary) {
  if (gnmr::cuda::step_skipped(summary)) return;  // a suggested global skip
  const DevTensor T = ts[blockIdx.y];
  const gnmr::UnitDecision d = gnmr::cuda::decision(decisions, T.unit);  // one 8-byte load per block
  if (gnmr::cuda::should_skip(d)) return;  // the unit's p, buf untouched; its (NaN) gradient unread
  // sgdm::update applies gnmr::cuda::reset_moments(d) and grad_scale(d).
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < T.numel; i += gridDim.x * blockDim.x)
    sgdm::update(h, d, T.p[i], T.buf[i], T.g[i]);
}

__global__ void record(const gnmr::UnitDecision* __restrict__ decisions, const std::int64_t* __restrict__ steps_done,
                       gnmr::UnitDecision* history) {
  const std::int64_t t = *steps_done;  // after the controller step: this step's number
  if (threadIdx.x < kUnits && t >= 1 && t <= kSteps) history[(t - 1) * kUnits + threadIdx.x] = decisions[threadIdx.x];
}

}  // namespace

int main() {
  if (!have_device("sgd_momentum_cuda")) return 77;
  const std::vector<Spec> sp = specs();
  std::vector<DevTensor> ts;
  std::vector<gnmr::Segment> segs;
  std::vector<std::vector<float>> p0;
  for (std::uint32_t k = 0; k < kTensors; ++k) {
    DevTensor T{nullptr, nullptr, nullptr, sp[k].numel, sp[k].unit, sp[k].level};
    EXAMPLE_CUDA_OK(cudaMalloc(&T.p, T.numel * sizeof(float)));
    EXAMPLE_CUDA_OK(cudaMalloc(&T.g, T.numel * sizeof(float)));
    EXAMPLE_CUDA_OK(cudaMalloc(&T.buf, T.numel * sizeof(float)));
    p0.emplace_back(T.numel);
    for (std::uint32_t i = 0; i < T.numel; ++i) p0[k][i] = init_param(k, i);
    EXAMPLE_CUDA_OK(cudaMemcpy(T.p, p0[k].data(), T.numel * sizeof(float), cudaMemcpyHostToDevice));
    EXAMPLE_CUDA_OK(cudaMemset(T.buf, 0, T.numel * sizeof(float)));
    ts.push_back(T);
    segs.push_back({T.g, T.numel, gnmr::DType::kF32, T.unit});  // one unit per operator: weight + bias
  }
  DevTensor* d_ts = nullptr;
  float* d_partials = nullptr;
  gnmr::UnitDecision* d_history = nullptr;
  EXAMPLE_CUDA_OK(cudaMalloc(&d_ts, ts.size() * sizeof(DevTensor)));
  EXAMPLE_CUDA_OK(cudaMemcpy(d_ts, ts.data(), ts.size() * sizeof(DevTensor), cudaMemcpyHostToDevice));
  EXAMPLE_CUDA_OK(cudaMalloc(&d_partials, kUnits * sizeof(float)));
  EXAMPLE_CUDA_OK(cudaMalloc(&d_history, kSteps * kUnits * sizeof(gnmr::UnitDecision)));

  // Setup: the plan and the controller allocate here, once.
  gnmr::cuda::NormPlan plan(segs, kUnits);
  auto ctl = gnmr::cuda::make_default(kUnits);  // the recommended controller (gnmr::make_default on the host)
  const sgdm::Hyper h = hyper();
  const dim3 grid(8, kTensors), block(256);

  cudaStream_t st;
  EXAMPLE_CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  EXAMPLE_CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  make_grads<<<grid, block, 0, st>>>(d_ts, ctl->steps_done_device());
  EXAMPLE_CUDA_OK(gnmr::cuda::unit_partials<gnmr::L2Norm>(plan, d_partials, st));
  EXAMPLE_CUDA_OK(ctl->step(d_partials, st));
  sgd_momentum<<<grid, block, 0, st>>>(d_ts, h, ctl->decisions(), ctl->summary());
  record<<<1, 32, 0, st>>>(ctl->decisions(), ctl->steps_done_device(), d_history);
  EXAMPLE_CUDA_OK(cudaStreamEndCapture(st, &graph));
  EXAMPLE_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int t = 1; t <= kSteps; ++t) EXAMPLE_CUDA_OK(cudaGraphLaunch(exec, st));
  EXAMPLE_CUDA_OK(cudaStreamSynchronize(st));

  // Compare with the CPU reference.
  const Replay ref = replay();
  int bad = 0;
  if (!ref.aligned) {
    std::printf("CHECK FAILED: a host gradient buffer is not 16-byte aligned (the emulation needs it)\n");
    ++bad;
  }
  std::vector<gnmr::UnitDecision> hist(kSteps * kUnits);
  EXAMPLE_CUDA_OK(cudaMemcpy(hist.data(), d_history, hist.size() * sizeof(gnmr::UnitDecision), cudaMemcpyDeviceToHost));
  if (std::memcmp(hist.data(), ref.decisions.data(), hist.size() * sizeof(gnmr::UnitDecision)) != 0) {
    std::printf("CHECK FAILED: the device's decisions differ from the host controller's\n");
    ++bad;
  }
  for (std::uint32_t k = 0; k < kTensors; ++k) {
    std::vector<float> p(sp[k].numel), buf(sp[k].numel);
    EXAMPLE_CUDA_OK(cudaMemcpy(p.data(), ts[k].p, p.size() * sizeof(float), cudaMemcpyDeviceToHost));
    EXAMPLE_CUDA_OK(cudaMemcpy(buf.data(), ts[k].buf, buf.size() * sizeof(float), cudaMemcpyDeviceToHost));
    if (std::memcmp(p.data(), ref.p[k].data(), p.size() * sizeof(float)) != 0 ||
        std::memcmp(buf.data(), ref.buf[k].data(), buf.size() * sizeof(float)) != 0) {
      std::printf("CHECK FAILED: tensor %u differs from the CPU reference\n", k);
      ++bad;
    }
  }
  // What the device's run did (its decisions, which equal the reference's
  // when the check above passed): the header's two grants and one skip.
  int grants = 0, skips = 0, promoted = 0;
  for (int t = 1; t <= kSteps; ++t)
    for (std::uint32_t u = 0; u < kUnits; ++u) {
      const gnmr::UnitDecision d = hist[(t - 1) * kUnits + u];
      grants += (d.flags & gnmr::kGranted) != 0u;
      skips += (d.flags & gnmr::kSkip) != 0u;
      promoted += (d.flags & gnmr::kPromote) != 0u;
      if (d.flags & (gnmr::kGranted | gnmr::kNonFinite))
        std::printf("step %2d unit %u: %s scale %.4g\n", t, u,
                    (d.flags & gnmr::kGranted) ? "spike granted: clipped to its mean on top of the stabilizer, promoted;"
                                               : "non-finite gradient, update skipped;",
                    static_cast<double>(d.scale));
    }
  std::printf("%d unit-steps carried kPromote (the lock after each grant)\n", promoted);
  if (grants != 2 || skips != 1 || promoted != 2 * kLock) {
    std::printf("CHECK FAILED: %d grants, %d skips, %d promoted unit-steps (expected 2, 1, %d)\n", grants, skips,
                promoted, 2 * kLock);
    ++bad;
  }

  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(st);
  for (DevTensor& T : ts) cudaFree(T.p), cudaFree(T.g), cudaFree(T.buf);
  cudaFree(d_ts), cudaFree(d_partials), cudaFree(d_history);
  std::printf(bad ? "sgd_momentum_cuda: %d check(s) FAILED\n"
                  : "sgd_momentum_cuda: %d steps in one CUDA graph; decisions, weights and momenta equal "
                    "the CPU reference bit for bit; all checks passed\n",
              bad ? bad : kSteps);
  return bad ? 1 : 0;
}
