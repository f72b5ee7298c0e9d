// examples/cub_partials_cuda.cu — gnmr fed from a framework's own reduction:
// the per-unit sums of squares computed with CUB's segmented reduction over
// the framework's gradient layout, then the recommended controller
// (gnmr::cuda::make_default) stepped on them, on one stream, with no copy
// to the host.
//
// The layout is what many CUDA trainers keep (llm.c, Megatron's contiguous
// grad buffer): every gradient in one flat fp32 buffer, a unit a contiguous
// range of it (here a tensor: an embedding of 4 M elements and 63 others of
// 4 K to 300 K). Per step:
//
//   make_grads                         the "backward": synthetic gradients,
//                                      spikes on a few units, one NaN
//   cub::DeviceSegmentedReduce::Sum    over thrust::transform_iterator(g, square):
//                                      one partial per unit, the user's own order
//   ctl.step(d_partials, stream)       the decisions, on the device
//
// CUB's order is not gnmr's (NormPlan: a fixed chunked order, the same bits
// on every run, docs/algorithm.md "Norms"), so its partials differ from
// gnmr's in the last bits. Both sum fp32 in trees, within a relative 1e-5 of
// the exact sum here; the controller's decisions are a function of the
// partials, so they are the same as long as no ratio sits within that of a
// threshold. The program checks exactly that: every step it also runs
// gnmr's NormPlan and a second controller, and compares the partials with
// a double-precision sum of the gradients on the host (relative 1e-5) and
// the two controllers' decisions: the same flags (trigger, grant,
// promotion, skip) bit for bit, the scales (continuous in the norm: the
// stabilizer's, the clip's) within a relative 1e-4. CUB's segmented reduction
// is deterministic for a given layout and GPU; it is not specified to give
// the same bits on another GPU, which is why gnmr ships its own.
//
// Build outside CMake, from the repository root (what gnmr's CMake build
// gives nvcc for this file: C++17, the include path and
// -Xcompiler=-ffp-contract=off from the gnmr::gnmr target, -O3 for Release,
// sm_90 by default: use your GPU's architecture):
//   nvcc -std=c++17 -O3 -arch=sm_90 -I include -Xcompiler=-ffp-contract=off examples/cub_partials_cuda.cu
// -Xcompiler=-ffp-contract=off keeps the host compiler from fusing a*b+c in
// gnmr's host code (host and device decide alike bit for bit). nvcc needs
// no -fmad=false for gnmr: its device arithmetic is gnmr::math's _rn
// intrinsics, which nvcc never fuses. It does fuse this example's own
// square into CUB's sum (an FMA per element), which moves CUB's partials in
// their last bits only, within the tolerance checked above.
//
// Exit status: 0 all checks passed, 1 a check failed, 77 no usable CUDA
// device (CTest: skipped). docs/cuda.md, "Partials from your own reduction".
#include <cuda_runtime.h>

#include <cub/device/device_segmented_reduce.cuh>
#include <thrust/iterator/transform_iterator.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "example_cuda.cuh"
#include "gnmr/cuda/presets.cuh"
#include "gnmr/cuda/unit_norms.cuh"

namespace {

constexpr int kSteps = 60;
constexpr std::uint32_t kUnits = 64;

struct Square {
  __host__ __device__ float operator()(float x) const { return x * x; }
};

// A deterministic gradient value: unit u's level times a hash in [-1, 1);
// spikes (x200) on unit 7 at step 31 and unit 40 at steps 44-45, a NaN in
// unit 12 at step 50.
__host__ __device__ float grad_value(int t, std::uint32_t u, std::uint64_t i) {
  std::uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ (static_cast<std::uint64_t>(t) << 32) ^ u;
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  const float r = static_cast<float>(h >> 40) * (1.0f / 8388608.0f) - 1.0f;
  const float level = 1e-3f * static_cast<float>(1u + u % 7u);
  float g = level * r * (1.0f + 0.05f * static_cast<float>(t % 3));
  if ((u == 7 && t == 31) || (u == 40 && (t == 44 || t == 45))) g *= 200.0f;
  if (u == 12 && t == 50 && i == 3) g = NAN;
  return g;
}

__global__ void make_grads(float* g, const std::uint64_t* begin, int t) {
  const std::uint32_t u = blockIdx.y;
  const std::uint64_t b = begin[u], e = begin[u + 1];
  for (std::uint64_t i = b + blockIdx.x * blockDim.x + threadIdx.x; i < e; i += gridDim.x * blockDim.x)
    g[i] = grad_value(t, u, i - b);
}

}  // namespace

int main() {
  if (!have_device("cub_partials_cuda")) return 77;
  // The framework's layout: unit u is g[begin[u], begin[u + 1]).
  std::vector<std::uint64_t> begin(kUnits + 1, 0);
  for (std::uint32_t u = 0; u < kUnits; ++u)
    begin[u + 1] = begin[u] + (u == 0 ? 4u << 20 : 4096u + (u * 7919u) % 300000u);
  const std::uint64_t total = begin[kUnits];
  float* g = nullptr;
  std::uint64_t* d_begin = nullptr;
  float *p_cub = nullptr, *p_gnmr = nullptr;
  EXAMPLE_CUDA_OK(cudaMalloc(&g, total * sizeof(float)));
  EXAMPLE_CUDA_OK(cudaMalloc(&d_begin, begin.size() * sizeof(std::uint64_t)));
  EXAMPLE_CUDA_OK(cudaMemcpy(d_begin, begin.data(), begin.size() * sizeof(std::uint64_t), cudaMemcpyHostToDevice));
  EXAMPLE_CUDA_OK(cudaMalloc(&p_cub, kUnits * sizeof(float)));
  EXAMPLE_CUDA_OK(cudaMalloc(&p_gnmr, kUnits * sizeof(float)));

  // Setup (allocations happen here, once): CUB's two-phase workspace, the
  // reference plan, the two controllers.
  const auto squares = thrust::make_transform_iterator(g, Square{});
  std::size_t temp_bytes = 0;
  EXAMPLE_CUDA_OK(cub::DeviceSegmentedReduce::Sum(nullptr, temp_bytes, squares, p_cub, kUnits, d_begin, d_begin + 1));
  void* temp = nullptr;
  EXAMPLE_CUDA_OK(cudaMalloc(&temp, temp_bytes));
  std::vector<gnmr::Segment> segs;
  for (std::uint32_t u = 0; u < kUnits; ++u) segs.push_back({g + begin[u], begin[u + 1] - begin[u], gnmr::DType::kF32, u});
  gnmr::cuda::NormPlan plan(segs, kUnits);
  auto ctl = gnmr::cuda::make_default(kUnits);  // fed CUB's partials
  auto ref = gnmr::cuda::make_default(kUnits);  // fed gnmr's
  cudaStream_t st;
  EXAMPLE_CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

  int bad = 0;
  double worst = 0.0;
  std::uint32_t granted = 0, nonfinite = 0;
  std::vector<float> pc(kUnits), pg(kUnits), host(total);
  for (int t = 1; t <= kSteps; ++t) {
    make_grads<<<dim3(64, kUnits), 256, 0, st>>>(g, d_begin, t);
    EXAMPLE_CUDA_OK(cub::DeviceSegmentedReduce::Sum(temp, temp_bytes, squares, p_cub, kUnits, d_begin, d_begin + 1, st));
    EXAMPLE_CUDA_OK(ctl->step(p_cub, st));
    EXAMPLE_CUDA_OK(gnmr::cuda::unit_partials<gnmr::L2Norm>(plan, p_gnmr, st));
    EXAMPLE_CUDA_OK(ref->step(p_gnmr, st));
    // The checks (not part of a training step: they read back and wait).
    EXAMPLE_CUDA_OK(cudaStreamSynchronize(st));
    EXAMPLE_CUDA_OK(cudaMemcpy(pc.data(), p_cub, kUnits * sizeof(float), cudaMemcpyDeviceToHost));
    EXAMPLE_CUDA_OK(cudaMemcpy(pg.data(), p_gnmr, kUnits * sizeof(float), cudaMemcpyDeviceToHost));
    EXAMPLE_CUDA_OK(cudaMemcpy(host.data(), g, total * sizeof(float), cudaMemcpyDeviceToHost));
    for (std::uint32_t u = 0; u < kUnits; ++u) {
      double exact = 0.0;
      for (std::uint64_t i = begin[u]; i < begin[u + 1]; ++i) exact += static_cast<double>(host[i]) * host[i];
      if (!std::isfinite(exact)) {
        if (std::isfinite(pc[u]) || std::isfinite(pg[u])) {
          std::printf("CHECK FAILED: step %d unit %u: a NaN gradient gave a finite partial\n", t, u);
          ++bad;
        }
        continue;
      }
      for (float p : {pc[u], pg[u]}) {
        const double rel = std::fabs(p - exact) / exact;
        worst = rel > worst ? rel : worst;
        if (!(rel <= 1e-5)) {
          std::printf("CHECK FAILED: step %d unit %u: partial %.9g, exact %.9g\n", t, u, p, exact);
          ++bad;
        }
      }
    }
    const std::vector<gnmr::UnitDecision> a = ctl->copy_decisions(), b = ref->copy_decisions();
    for (std::uint32_t u = 0; u < kUnits; ++u) {
      // The same flags; the scales (the stabilizer's and the clip's are
      // continuous in the norm) as close as the partials are.
      const bool same_scale = a[u].scale == b[u].scale || std::fabs(a[u].scale - b[u].scale) <= 1e-4f * b[u].scale;
      if (a[u].flags != b[u].flags || !same_scale) {
        std::printf("CHECK FAILED: step %d unit %u: from CUB's partials flags %#x scale %.9g, from gnmr's %#x %.9g\n",
                    t, u, a[u].flags, a[u].scale, b[u].flags, b[u].scale);
        ++bad;
      }
    }
    const gnmr::StepSummary s = ctl->copy_summary();
    granted += s.granted;
    nonfinite += s.nonfinite;
  }
  std::printf("%d steps, %u units (%llu gradient elements): CUB's partials within %.2g of the exact sums; "
              "the same flags as from gnmr's own partials; %u grants, %u non-finite unit-steps\n",
              kSteps, kUnits, static_cast<unsigned long long>(total), worst, granted, nonfinite);
  if (granted < 2 || nonfinite != 1) {
    std::printf("CHECK FAILED: the spikes were not granted or the NaN not flagged (%u grants, %u non-finite)\n",
                granted, nonfinite);
    ++bad;
  }
  cudaFree(temp);
  cudaFree(g);
  cudaFree(d_begin);
  cudaFree(p_cub);
  cudaFree(p_gnmr);
  cudaStreamDestroy(st);
  std::printf(bad ? "cub_partials_cuda: %d checks FAILED\n" : "cub_partials_cuda: all checks passed\n", bad);
  return bad ? 1 : 0;
}
