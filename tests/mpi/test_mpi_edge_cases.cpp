// tests/mpi/test_mpi_edge_cases.cpp — MpiReducer's collective on its own,
// under mpirun with the ranks of gnmr_mpi_tests: a NaN on one rank becomes
// +Inf on every rank under max (and stays NaN under sum), the double
// overloads, n = 0 (no collective) and null data (an error); and, for
// contrast, how many NaNs a raw MPI_MAX keeps.
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "gnmr/comm/mpi.hpp"
#include "gnmr/core/math.hpp"
#include "mpi_check.hpp"

namespace mpitest {

void nan_and_edge_cases() {
  using gnmr::Combine;
  const int last = g_size - 1;
  for (auto alg : {gnmr::mpi::Algorithm::kAllreduce, gnmr::mpi::Algorithm::kOrderedAllgather}) {
    gnmr::mpi::MpiReducer red(MPI_COMM_WORLD, alg);
    // A NaN on ONE rank, larger finite values elsewhere: max must be +Inf everywhere.
    std::vector<float> v = {g_rank == last ? gnmr::nan_f() : 5.0f + static_cast<float>(g_rank),
                            g_rank == 0 ? gnmr::nan_f() : 1.0f, 2.0f};
    red.allreduce(v.data(), v.size(), Combine::kMax);
    CHECK(fbits(v[0]) == fbits(gnmr::inf_f()) && fbits(v[1]) == fbits(gnmr::inf_f()) && v[2] == 2.0f,
          "%s max with NaN: %g %g %g", alg_name(alg), static_cast<double>(v[0]), static_cast<double>(v[1]),
          static_cast<double>(v[2]));
    std::vector<float> s = {g_rank == last ? gnmr::nan_f() : 1.0f, g_rank == 0 ? gnmr::inf_f() : 1.0f, 0.5f};
    red.allreduce(s.data(), s.size(), Combine::kSum);
    CHECK(gnmr::is_nan(s[0]) && fbits(s[1]) == fbits(gnmr::inf_f()) &&
              s[2] == 0.5f * static_cast<float>(g_size),
          "%s sum with NaN/Inf", alg_name(alg));
    // Doubles: sums of small integers are exact in any order.
    std::vector<double> d = {static_cast<double>(g_rank) + 0.5, g_rank == last ? std::nan("") : 1.0};
    red.allreduce(d.data(), d.size(), Combine::kSum);
    CHECK(d[0] == 0.5 * g_size * g_size && std::isnan(d[1]), "%s double sum %g", alg_name(alg), d[0]);
    d = {static_cast<double>(g_rank), g_rank == last ? std::nan("") : 1.0};
    red.allreduce(d.data(), d.size(), Combine::kMax);
    CHECK(d[0] == last && std::isinf(d[1]), "%s double max", alg_name(alg));
    // n = 0 is a no-op on every rank (no collective); null data is an error.
    red.allreduce(static_cast<float*>(nullptr), 0, Combine::kSum);
    CHECK(red.stats().collectives == 4, "collectives %llu", static_cast<unsigned long long>(red.stats().collectives));
    bool threw = false;
    try {
      red.allreduce(static_cast<float*>(nullptr), 3, Combine::kSum);
    } catch (const std::invalid_argument&) {
      threw = true;
    }
    CHECK(threw, "null partials must throw");
  }
  // What the NaN -> +Inf mapping guards against: raw MPI_MAX over floats.
  float raw[2] = {g_rank == last ? gnmr::nan_f() : 5.0f, g_rank == 0 ? gnmr::nan_f() : 5.0f};
  MPI_Allreduce(MPI_IN_PLACE, raw, 2, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  int kept = (gnmr::is_nan(raw[0]) ? 1 : 0) + (gnmr::is_nan(raw[1]) ? 1 : 0), kept_all = 0;
  MPI_Reduce(&kept, &kept_all, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (g_rank == 0)
    std::printf("[gnmr-mpi] raw MPI_MAX kept %d of %d NaNs across ranks (the reducer maps NaN to +Inf first)\n",
                kept_all, 2 * g_size);
}

}  // namespace mpitest
