// tests/mpi/mpi_check.hpp — the check harness of the MPI reducer test
// (gnmr_mpi_tests: test_mpi_reducer.cpp and test_mpi_edge_cases.cpp).
//
// Plain checks rather than Catch2: every rank must run every collective in
// the same order, so a failing CHECK counts and reports the failure on its
// rank and carries on; main() sums the failures over all ranks at the end.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "gnmr/comm/mpi.hpp"
#include "gnmr/core/math.hpp"

namespace mpitest {

// This process's rank, the communicator's size, and the failed checks so
// far (defined in test_mpi_reducer.cpp).
extern int g_rank;
extern int g_size;
extern int g_failures;

// The collective's NaN handling, the double overloads, n = 0 and null data
// (test_mpi_edge_cases.cpp).
void nan_and_edge_cases();

inline std::uint32_t fbits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline double rel(double a, double b) {
  const double m = std::max(std::fabs(a), std::fabs(b));
  return m == 0.0 ? 0.0 : std::fabs(a - b) / m;
}
inline void map_nan(std::vector<float>& p) {
  for (float& x : p)
    if (gnmr::is_nan(x)) x = gnmr::inf_f();
}

inline const char* alg_name(gnmr::mpi::Algorithm a) {
  return a == gnmr::mpi::Algorithm::kAllreduce ? "allreduce" : "ordered-allgather";
}

}  // namespace mpitest

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      ++mpitest::g_failures;                                                   \
      std::fprintf(stderr, "[rank %d] FAIL %s:%d: %s: ", mpitest::g_rank,      \
                   __FILE__, __LINE__, #cond);                                 \
      std::fprintf(stderr, __VA_ARGS__);                                       \
      std::fprintf(stderr, "\n");                                              \
    }                                                                          \
  } while (0)
