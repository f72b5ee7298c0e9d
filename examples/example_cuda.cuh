// examples/example_cuda.cuh — the two bits of plumbing every CUDA example
// needs and that are not about gnmr: a CUDA error check that fails the
// example with a message, and the "no GPU here" exit (77, which CTest
// reports as skipped, so a CPU-only CI stays green).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>

// In main(): on a CUDA error, print where and return 1 (the message says
// FAILED, which CTest's FAIL_REGULAR_EXPRESSION catches too).
#define EXAMPLE_CUDA_OK(call)                                                                        \
  do {                                                                                               \
    const cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) {                                                                         \
      std::printf("CUDA error at %s:%d: %s (FAILED)\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      return 1;                                                                                      \
    }                                                                                                \
  } while (0)

// False (after saying so) when there is no usable device: main() then returns 77.
inline bool have_device(const char* example) {
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) return true;
  std::printf("%s: no usable CUDA device: skipped\n", example);
  return false;
}
