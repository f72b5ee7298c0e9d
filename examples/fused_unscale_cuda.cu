// examples/fused_unscale_cuda.cu — a framework's own AMP "unscale and
// check" kernel that also deposits gnmr's per-unit norms, so the guarded
// step does not read the gradients a second time
// (gnmr/cuda/fused_partials.cuh).
//
// Three fp32 gradient tensors (two units, odd sizes, one starting off a
// 16-byte boundary) are unscaled by 1/1024 in place by unscale_kernel: one
// 256-thread block per chunk of a NormPlan, each value through
// example::UnscaleCheck (examples/unscale_check.hpp), the chunk's partial
// left in the plan's table by deposit_chunk_partial; fold_unit_partials
// then writes one partial per unit. The program checks, on the device's
// results: the unscaled gradients and the found-inf flag equal the CPU
// replay's bit for bit, the fused partials equal gnmr::cuda::unit_partials
// run afterwards over the unscaled gradients (today's two-pass path) bit
// for bit, and equal the host emulation (tests/reference/unit_partials.hpp)
// bit for bit. Then an Inf is planted and found.
//
// Build outside CMake, from the repository root (what gnmr's CMake build
// gives nvcc for this file: C++17, the include path and
// -Xcompiler=-ffp-contract=off from the gnmr::gnmr target, -O3 for Release,
// sm_90 by default: use your GPU's architecture):
//   nvcc -std=c++17 -O3 -arch=sm_90 -I include -Xcompiler=-ffp-contract=off examples/fused_unscale_cuda.cu
// nvcc needs no -fmad=false: the unscale (example::UnscaleCheck) and gnmr's
// sums go through gnmr::math, whose device forms are the _rn intrinsics
// nvcc never fuses, so the bit-for-bit comparisons hold either way.
//
// Exit status: 0 all checks passed, 1 a check failed, 77 no usable CUDA
// device (CTest: skipped).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "../tests/reference/unit_partials.hpp"
#include "example_cuda.cuh"
#include "gnmr/cuda/fused_partials.cuh"
#include "gnmr/cuda/memory.cuh"
#include "unscale_check.hpp"

namespace {

// The framework's kernel: its own pass, plus one call.
__global__ void unscale_kernel(gnmr::cuda::FusedNormView view, float inv_scale, unsigned int* found_inf) {
  const example::UnscaleCheck xf{inv_scale, found_inf};
  gnmr::cuda::deposit_chunk_partial<gnmr::L2Norm>(view, blockIdx.x, xf);
}

std::uint32_t bits(float x) { return gnmr::detail::float_to_bits(x); }

int fails = 0;
void check(bool ok, const char* what) {
  std::printf("%s: %s\n", ok ? "ok" : "CHECK FAILED", what);
  fails += ok ? 0 : 1;
}

}  // namespace

int main() {
  if (!have_device("fused_unscale_cuda")) return 77;
  const std::vector<std::size_t> sizes = {100003, 4097, 65543};
  const std::vector<std::uint32_t> units = {0, 1, 0};
  const std::size_t offset = 1;  // tensor 1 starts 4 bytes past a 16-byte boundary
  std::size_t total = 0;
  std::vector<std::size_t> start;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    total = (total + 3) & ~std::size_t{3};  // 16-byte aligned starts ...
    if (i == 1) total += offset;            // ... but this one
    start.push_back(total);
    total += sizes[i];
  }
  std::vector<float> host(total, 0.0f);
  std::mt19937_64 rng(5);
  std::normal_distribution<float> nd(0.0f, 2048.0f);
  for (float& x : host) x = nd(rng);
  const float inv = 1.0f / 1024.0f;

  float* d_grad = nullptr;
  float* d_partials = nullptr;
  float* d_twice = nullptr;
  unsigned int* d_found = nullptr;
  EXAMPLE_CUDA_OK(cudaMalloc(&d_grad, total * sizeof(float)));
  EXAMPLE_CUDA_OK(cudaMalloc(&d_partials, 2 * sizeof(float)));
  EXAMPLE_CUDA_OK(cudaMalloc(&d_twice, 2 * sizeof(float)));
  EXAMPLE_CUDA_OK(cudaMalloc(&d_found, sizeof(unsigned int)));
  std::vector<gnmr::Segment> segs, hsegs;
  std::vector<float> replay = host;  // the CPU replay's copy
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    segs.push_back({d_grad + start[i], sizes[i], gnmr::DType::kF32, units[i]});
    hsegs.push_back({replay.data() + start[i], sizes[i], gnmr::DType::kF32, units[i]});
  }
  gnmr::cuda::NormPlan plan(segs, 2);

  for (int round = 0; round < 2; ++round) {
    std::vector<float> h = host;
    if (round == 1) h[start[2] + 7] = gnmr::inf_f();  // a non-finite gradient in unit 0
    replay = h;
    EXAMPLE_CUDA_OK(cudaMemcpy(d_grad, h.data(), total * sizeof(float), cudaMemcpyHostToDevice));
    EXAMPLE_CUDA_OK(cudaMemset(d_found, 0, sizeof(unsigned int)));
    const float nan = gnmr::nan_f();
    const float poison[2] = {nan, nan};
    EXAMPLE_CUDA_OK(cudaMemcpy(d_partials, poison, sizeof poison, cudaMemcpyHostToDevice));
    // The framework's pass with the deposit, then gnmr's fold.
    unscale_kernel<<<static_cast<unsigned int>(plan.num_chunks()), gnmr::cuda::kFusedThreads>>>(
        gnmr::cuda::fused_view(plan), inv, d_found);
    EXAMPLE_CUDA_OK(cudaGetLastError());
    EXAMPLE_CUDA_OK(gnmr::cuda::fold_unit_partials<gnmr::L2Norm>(plan, d_partials));
    // Today's path, for comparison: NormPlan reads the unscaled gradients again.
    EXAMPLE_CUDA_OK(gnmr::cuda::unit_partials<gnmr::L2Norm>(plan, d_twice));
    std::vector<float> got(total), fused(2), twice(2);
    unsigned int found = 0;
    EXAMPLE_CUDA_OK(cudaMemcpy(got.data(), d_grad, total * sizeof(float), cudaMemcpyDeviceToHost));
    EXAMPLE_CUDA_OK(cudaMemcpy(fused.data(), d_partials, 2 * sizeof(float), cudaMemcpyDeviceToHost));
    EXAMPLE_CUDA_OK(cudaMemcpy(twice.data(), d_twice, 2 * sizeof(float), cudaMemcpyDeviceToHost));
    EXAMPLE_CUDA_OK(cudaMemcpy(&found, d_found, sizeof found, cudaMemcpyDeviceToHost));

    // The CPU replay of the same pass (same functors, thread by thread).
    unsigned int found_h = 0;
    const gnmr::detail::NormLayout L = gnmr::detail::build_norm_layout(hsegs.data(), hsegs.size(), 2);
    std::vector<float> cp(L.chunks.size());
    for (std::size_t c = 0; c < L.chunks.size(); ++c)
      cp[c] = gnmr::reference::emulate_deposit_chunk_partial<gnmr::L2Norm>(L.chunks[c],
                                                                          example::UnscaleCheck{inv, &found_h});
    const std::vector<float> emu = gnmr::reference::emulate_fold<gnmr::L2Norm>(L, cp);

    bool same_grads = true;
    for (std::size_t i = 0; i < total; ++i) same_grads = same_grads && bits(got[i]) == bits(replay[i]);
    std::printf("round %d: fused partials %.9g %.9g, two-pass %.9g %.9g, found_inf %u\n", round, fused[0],
                fused[1], twice[0], twice[1], found);
    check(same_grads, "unscaled gradients equal the CPU replay bit for bit");
    check(found == found_h && found == (round == 1 ? 1u : 0u), "found_inf as the replay, set only with the Inf");
    check(bits(fused[0]) == bits(twice[0]) && bits(fused[1]) == bits(twice[1]),
          "fused partials equal NormPlan's second pass bit for bit");
    check(bits(fused[0]) == bits(emu[0]) && bits(fused[1]) == bits(emu[1]),
          "fused partials equal the host emulation bit for bit");
  }
  cudaFree(d_grad);
  cudaFree(d_partials);
  cudaFree(d_twice);
  cudaFree(d_found);
  std::printf("%s\n", fails ? "FAILED" : "all checks passed");
  return fails ? 1 : 0;
}
