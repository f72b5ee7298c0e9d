// gnmr/config.hpp — compiler glue shared by every gnmr header.
//
// Policy headers are plain .hpp files that must compile with g++ (host
// backend, CPU tests) and with nvcc (CUDA kernels run the same functors).
// GNMR_HOST_DEVICE marks those functions; only .cuh files include CUDA
// headers. The arithmetic those functions share is in gnmr/core/math.hpp.
#pragma once

// The library's version, defined here only: the top-level CMakeLists.txt
// reads these three lines (keep their form), and GNMR_VERSION is for
// preprocessor tests, e.g. #if GNMR_VERSION >= 100 (0.1.0).
#define GNMR_VERSION_MAJOR 0
#define GNMR_VERSION_MINOR 1
#define GNMR_VERSION_PATCH 0
#define GNMR_VERSION (GNMR_VERSION_MAJOR * 10000 + GNMR_VERSION_MINOR * 100 + GNMR_VERSION_PATCH)

#if defined(__CUDACC__)
#define GNMR_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define GNMR_HOST_DEVICE inline
#endif
