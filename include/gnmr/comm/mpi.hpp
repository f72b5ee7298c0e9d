// gnmr/comm/mpi.hpp — MpiReducer: combine the N per-unit partials of all
// ranks of an MPI communicator (host buffers), one collective per step.
//
// Include it only in code built against MPI (it includes <mpi.h>); the core
// headers never do. Use it between computing this rank's partials of its
// shards and the controller step (gnmr::reduce_and_step, or
// gnmr::ReducedController<GnmrController<...>, mpi::MpiReducer>).
//
// The communicator is the group over which the units are sharded (the
// data-parallel shard group for ZeRO/FSDP, the tensor-parallel group for
// TP): see docs/record/distributed.md. It is borrowed, not duplicated or freed.
// Every rank of it must call allreduce() with the same n at the same point,
// like any MPI collective.
//
// Non-finite partials. For sums (L2, RMS) IEEE arithmetic keeps a NaN or an
// Inf of any rank non-finite in the result (the partials are >= 0, so no
// Inf - Inf can appear). MPI_MAX is another matter: implementations compute
// it with a comparison, which drops a NaN depending on operand order, so one
// rank's poisoned shard could vanish on some ranks. Before a max, NaN is
// therefore mapped to +Inf on every rank; the unit then ends NONFINITE on
// all ranks (its reported norm reads +Inf rather than NaN).
//
// Two algorithms, both one collective per step:
//  - kAllreduce (default): MPI_Allreduce in place, N values on the wire per
//    rank. Every rank receives the same bits with Open MPI and MPICH (their
//    built-in reductions of commutative ops combine symmetric operands or
//    broadcast one result), and the MPI test checks exactly that; but the
//    standard only *recommends* it, and the summation order may change with
//    the rank count or the library's tuning.
//  - kOrderedAllgather: MPI_Allgather of all ranks' partials, then every
//    rank combines them itself in rank order 0, 1, ..., R-1 (fp32, gnmr::math).
//    Bit-identical on every rank by construction and reproducible across MPI
//    libraries and tunings: the result equals a single process adding the
//    shard partials in rank order. Costs R*N values received per rank.
// For max (Linf) both give the same bits: max is exact in any order.
#pragma once

#include <mpi.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "gnmr/comm/reducer.hpp"
#include "gnmr/core/math.hpp"
#include "gnmr/core/numeric.hpp"
#include "gnmr/policy/norm.hpp"

namespace gnmr {
namespace mpi {

enum class Algorithm { kAllreduce, kOrderedAllgather };

namespace detail {

template <class T>
struct MpiType;
template <>
struct MpiType<float> {
  static MPI_Datatype get() { return MPI_FLOAT; }
};
template <>
struct MpiType<double> {
  static MPI_Datatype get() { return MPI_DOUBLE; }
};

inline void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw std::runtime_error(std::string("gnmr: MpiReducer: ") + what + " failed: " +
                           std::string(msg, static_cast<std::size_t>(len)));
}

// +Inf for NaN, so that a max over ranks cannot drop it (see the header).
inline void nan_to_inf(float* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (is_nan(p[i])) p[i] = inf_f();
}
inline void nan_to_inf(double* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (gnmr::detail::is_nan_d(p[i])) p[i] = static_cast<double>(inf_f());
}

inline float combine(float a, float b, Combine op) {
  return op == Combine::kSum ? math::add(a, b) : math::max_nan(a, b);
}
inline double combine(double a, double b, Combine op) {
  if (op == Combine::kSum) return math::dadd(a, b);
  if (gnmr::detail::is_nan_d(a)) return a;
  if (gnmr::detail::is_nan_d(b)) return b;
  return a > b ? a : b;
}

}  // namespace detail

class MpiReducer {
 public:
  static constexpr const char* kName = "mpi";

  // MPI must be initialised; comm is borrowed and must outlive the reducer.
  explicit MpiReducer(MPI_Comm comm, Algorithm algorithm = Algorithm::kAllreduce)
      : comm_(comm), algorithm_(algorithm) {
    int init = 0;
    MPI_Initialized(&init);
    if (!init) throw std::logic_error("gnmr: MpiReducer: MPI is not initialised (call MPI_Init first)");
    if (comm == MPI_COMM_NULL) throw std::invalid_argument("gnmr: MpiReducer: MPI_COMM_NULL");
    detail::check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    detail::check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }

  // In place: on return every rank holds the combined partials.
  void allreduce(float* partials, std::size_t n, Combine op) { run(partials, n, op, gather_f_); }
  void allreduce(double* partials, std::size_t n, Combine op) { run(partials, n, op, gather_d_); }

  template <class Norm>
  void reduce(float* partials, std::size_t n) {
    allreduce(partials, n, Norm::kCombine);
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm comm() const { return comm_; }
  Algorithm algorithm() const { return algorithm_; }
  // bytes: what each collective fills on this rank (N values for
  // kAllreduce, R*N for kOrderedAllgather); seconds: wall time inside them.
  ReducerStats stats() const { return stats_; }
  void reset_stats() { stats_ = ReducerStats{}; }

 private:
  template <class T>
  void run(T* p, std::size_t n, Combine op, std::vector<T>& gathered) {
    if (n == 0) return;  // every rank passes the same n: nobody communicates
    if (p == nullptr) throw std::invalid_argument("gnmr: MpiReducer: null partials");
    if (n > static_cast<std::size_t>(INT_MAX))
      throw std::invalid_argument("gnmr: MpiReducer: more than INT_MAX partials");
    if (op == Combine::kMax) detail::nan_to_inf(p, n);
    const int count = static_cast<int>(n);
    const double t0 = MPI_Wtime();
    if (algorithm_ == Algorithm::kAllreduce) {
      detail::check(MPI_Allreduce(MPI_IN_PLACE, p, count, detail::MpiType<T>::get(),
                                  op == Combine::kSum ? MPI_SUM : MPI_MAX, comm_),
                    "MPI_Allreduce");
      stats_.bytes += n * sizeof(T);
    } else {
      gathered.resize(n * static_cast<std::size_t>(size_));
      detail::check(MPI_Allgather(p, count, detail::MpiType<T>::get(), gathered.data(), count,
                                  detail::MpiType<T>::get(), comm_),
                    "MPI_Allgather");
      for (std::size_t i = 0; i < n; ++i) {
        T acc = gathered[i];
        for (int r = 1; r < size_; ++r)
          acc = detail::combine(acc, gathered[static_cast<std::size_t>(r) * n + i], op);
        p[i] = acc;
      }
      stats_.bytes += gathered.size() * sizeof(T);
    }
    stats_.seconds += MPI_Wtime() - t0;
    stats_.collectives += 1;
  }

  MPI_Comm comm_;
  Algorithm algorithm_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<float> gather_f_;
  std::vector<double> gather_d_;
  ReducerStats stats_{};
};

}  // namespace mpi
}  // namespace gnmr
