// gnmr/core/cpu.hpp — which x86 instruction-set extensions the running CPU
// has, for the host loops that carry a build for them (host/unit_norms.hpp,
// host/adamw.hpp).
//
// A header-only library cannot assume the consumer's -march: each loop that
// gains from AVX2 or F16C is compiled a second time with
// __attribute__((target(...))) and chosen at run time here. Every such pair
// of builds gives the same bits (the docs of each loop say why). Off x86-64,
// under nvcc, or with a compiler without the GNU builtins, every query is
// false and only the portable loops exist.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__CUDACC__)
#define GNMR_HOST_X86_SIMD 1
#include <cpuid.h>
#else
#define GNMR_HOST_X86_SIMD 0
#endif

namespace gnmr {
namespace detail {

inline bool host_has_avx2() {
#if GNMR_HOST_X86_SIMD
  static const bool yes = __builtin_cpu_supports("avx2") != 0;
  return yes;
#else
  return false;
#endif
}

inline bool host_has_avx2_f16c() {
#if GNMR_HOST_X86_SIMD
  // F16C by CPUID leaf 1 (clang's __builtin_cpu_supports has no "f16c").
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx2") != 0 && __get_cpuid(1, &a, &b, &c, &d) != 0 &&
           (c & bit_F16C) != 0;
  }();
  return yes;
#else
  return false;
#endif
}

// AVX-512 F and BW, with AVX2 and F16C (the 512-bit builds use all four).
inline bool host_has_avx512bw() {
#if GNMR_HOST_X86_SIMD
  static const bool yes = __builtin_cpu_supports("avx512f") != 0 && __builtin_cpu_supports("avx512bw") != 0 &&
                          host_has_avx2_f16c();
  return yes;
#else
  return false;
#endif
}

}  // namespace detail
}  // namespace gnmr
