// gnmr/core/parallel.hpp — the executor interface of gnmr's host loops.
//
// A host routine that can spread independent work items over threads takes
// an executor `pfor` with this contract: pfor(n, fn) calls fn(begin, end) on
// disjoint ranges that cover [0, n), on any threads, and returns when all
// are done. gnmr never owns threads: the caller brings its pool (a wrapper
// of at::parallel_for, an OpenMP loop, a TBB parallel_for, ...). Every
// routine that takes one defines its work items so that its result is
// bit-identical whatever the executor (each item is computed alone, and any
// fold over items happens afterwards, in item order, on the calling thread).
#pragma once

#include <cstddef>

namespace gnmr {

// Runs fn(0, n) on the calling thread: the default executor.
struct SerialFor {
  template <class F>
  void operator()(std::size_t n, F&& fn) const {
    if (n != 0) fn(std::size_t{0}, n);
  }
};

}  // namespace gnmr
