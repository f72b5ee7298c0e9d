// examples/promote_fake_quant_cuda.cu — a fake-quantized linear layer on the
// GPU that runs in fp32 while the recommended controller
// (gnmr::cuda::make_default) has its unit promoted, next to its CPU
// reference (fake_quant_case.hpp): how a forward kernel reads kPromote
// through gnmr::cuda::unit_promoted.
//
// Two linear layers (units 0 and 1; layer 0 FP8 E4M3, layer 1 FP4 E2M1)
// run a forward every step, and the default controller steps on a trace of
// norms in which unit 1 jumps tenfold at step 24 (after the 20 steps in
// which the default's calibrated trigger learns each unit's thresholds).
// Per step, on one stream and with no host synchronisation:
//
//   amax kernel   per-tensor amax of W and x (taken every step, promoted or not)
//   forward       y = Q(W) Q(x) + b, or W x + b where unit_promoted() says so
//   ctl->step     the controller's decisions for this step
//
// so the forward of step s reads the decisions of step s-1, and a grant at
// step t promotes steps t+1 .. t+lock (docs/algorithm.md, Precision
// promotion). The program then compares every output with the CPU replay
// bit for bit and checks that unit 1 ran in fp32 exactly at steps 25..32
// and unit 0 never; the replay's two paths differ on every step (a unit
// test checks that on the CPU), so equal bits say which path the kernel took.
//
// Build outside CMake, from the repository root (what gnmr's CMake build
// gives nvcc for this file: C++17, the include path and
// -Xcompiler=-ffp-contract=off from the gnmr::gnmr target, -O3 for Release,
// sm_90 by default: use your GPU's architecture):
//   nvcc -std=c++17 -O3 -arch=sm_90 -I include -Xcompiler=-ffp-contract=off examples/promote_fake_quant_cuda.cu
// -Xcompiler=-ffp-contract=off stops the host compiler from fusing a*b+c
// in the CPU reference; nvcc needs no -fmad=false: the quantizer and the
// dot product (fake_quant.hpp) are exact or go through gnmr::math, whose
// device forms are the _rn intrinsics nvcc never fuses.
//
// Exit status: 0 all checks passed, 1 a check failed, 77 no usable CUDA
// device (CTest: skipped). Expected output: docs/record/examples.md.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "example_cuda.cuh"
#include "fake_quant_case.hpp"
#include "gnmr/cuda/accessors.cuh"
#include "gnmr/cuda/presets.cuh"

namespace {

using namespace fq_case;

// max |x| of one tensor into *out: one block, a fixed tree (max is exact,
// so any order would give these bits; the fixed one costs nothing).
__global__ void amax_kernel(const float* __restrict__ x, std::uint32_t n, float* out) {
  __shared__ float s[256];
  float m = 0.0f;
  for (std::uint32_t i = threadIdx.x; i < n; i += blockDim.x) m = gnmr::math::max_nan(m, fabsf(x[i]));
  s[threadIdx.x] = m;
  __syncthreads();
  for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) s[threadIdx.x] = gnmr::math::max_nan(s[threadIdx.x], s[threadIdx.x + w]);
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = s[0];
}

// One thread per output. Every thread of the launch reads the same flag
// (the layer is one unit), so the branch never diverges.
__global__ void fake_quant_linear(const float* __restrict__ W, const float* __restrict__ b,
                                  const float* __restrict__ x, const float* __restrict__ amax_wx,
                                  fq::Format f, const gnmr::UnitDecision* __restrict__ decisions,
                                  std::uint32_t unit, float* __restrict__ y) {
  const std::uint32_t k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= kBatch * kOut) return;
  const std::uint32_t r = k / kOut, o = k % kOut;
  const bool hp = gnmr::cuda::unit_promoted(decisions, unit);
  y[k] = fq::linear_out(W + o * kIn, x + r * kIn, kIn, b[o], hp, f, fq::tensor_scale(amax_wx[0], f),
                        fq::tensor_scale(amax_wx[1], f));
}

template <class T>
T* upload(const std::vector<T>& h) {
  T* d = nullptr;
  if (cudaMalloc(&d, h.size() * sizeof(T)) != cudaSuccess) return nullptr;
  if (cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice) != cudaSuccess) return nullptr;
  return d;
}

}  // namespace

int main() {
  if (!have_device("promote_fake_quant_cuda")) return 77;
  const Case c = make_case();
  const std::size_t out_elems = static_cast<std::size_t>(kBatch) * kOut;

  // Uploaded once; the loop below only enqueues.
  float *dW[kUnits], *dB[kUnits];
  for (std::uint32_t u = 0; u < kUnits; ++u) {
    dW[u] = upload(c.W[u]);
    dB[u] = upload(c.B[u]);
  }
  float* dX = upload(c.X);
  float* dN = upload(c.norms);
  float* dY = upload(std::vector<float>(kSteps * kUnits * out_elems));
  float* dAmax = upload(std::vector<float>(kSteps * kUnits * 2));
  if (!dW[0] || !dW[1] || !dB[0] || !dB[1] || !dX || !dN || !dY || !dAmax) {
    std::printf("promote_fake_quant_cuda: device allocation FAILED\n");
    return 1;
  }

  auto ctl = gnmr::cuda::make_default(kUnits);  // the recommended controller (gnmr::make_default on the host)
  cudaStream_t st;
  EXAMPLE_CUDA_OK(cudaStreamCreate(&st));
  for (int s = 1; s <= kSteps; ++s) {
    const float* x = dX + static_cast<std::size_t>(s - 1) * kBatch * kIn;
    for (std::uint32_t u = 0; u < kUnits; ++u) {
      float* am = dAmax + (static_cast<std::size_t>(s - 1) * kUnits + u) * 2;
      amax_kernel<<<1, 256, 0, st>>>(dW[u], kOut * kIn, am);
      amax_kernel<<<1, 256, 0, st>>>(x, kBatch * kIn, am + 1);
      // Before step 1 the decision array is zeroed by the controller: no kPromote.
      fake_quant_linear<<<(kBatch * kOut + 127) / 128, 128, 0, st>>>(
          dW[u], dB[u], x, am, format_of(u), ctl->decisions(), u,
          dY + (static_cast<std::size_t>(s - 1) * kUnits + u) * out_elems);
    }
    EXAMPLE_CUDA_OK(cudaGetLastError());
    EXAMPLE_CUDA_OK(ctl->step_norms(dN + (s - 1) * kUnits, st));
  }
  EXAMPLE_CUDA_OK(cudaStreamSynchronize(st));
  std::vector<float> Y(kSteps * kUnits * out_elems);
  EXAMPLE_CUDA_OK(cudaMemcpy(Y.data(), dY, Y.size() * sizeof(float), cudaMemcpyDeviceToHost));

  const Replay ref = replay(c);
  int bad = 0;
  std::vector<int> fp32_steps[kUnits];
  for (int s = 1; s <= kSteps; ++s)
    for (std::uint32_t u = 0; u < kUnits; ++u) {
      if (ref.promoted[s - 1][u]) fp32_steps[u].push_back(s);
      const float* got = Y.data() + (static_cast<std::size_t>(s - 1) * kUnits + u) * out_elems;
      if (std::memcmp(got, ref.y[s - 1][u].data(), out_elems * sizeof(float)) != 0) {
        std::printf("CHECK FAILED: step %d unit %u: device output differs from the CPU reference\n", s, u);
        ++bad;
      }
    }
  for (std::uint32_t u = 0; u < kUnits; ++u) {
    std::printf("unit %u (%s): fp32 at steps", u, fq::format_name(format_of(u)));
    for (int s : fp32_steps[u]) std::printf(" %d", s);
    std::printf(fp32_steps[u].empty() ? " none\n" : "\n");
  }
  std::vector<int> want1;
  for (int s = kSpikeStep + 1; s <= kSpikeStep + kLock; ++s) want1.push_back(s);
  if (!fp32_steps[0].empty() || fp32_steps[1] != want1) {
    std::printf("CHECK FAILED: expected unit 1 in fp32 at steps %d..%d and unit 0 never\n", kSpikeStep + 1,
                kSpikeStep + kLock);
    ++bad;
  }
  for (float* p : {dW[0], dW[1], dB[0], dB[1], dX, dN, dY, dAmax}) cudaFree(p);
  cudaStreamDestroy(st);
  std::printf(bad ? "promote_fake_quant_cuda: %d check(s) FAILED\n"
                  : "promote_fake_quant_cuda: %d forwards, device == CPU reference bit for bit; all checks passed\n",
              bad ? bad : kSteps * static_cast<int>(kUnits));
  return bad ? 1 : 0;
}
