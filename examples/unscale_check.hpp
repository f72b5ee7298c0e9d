// examples/unscale_check.hpp — the per-value work of a framework's AMP
// "unscale and check" pass, written as a gnmr Xform (gnmr/plan/
// norm_plan.hpp, chunk_thread_partial_ex) so that the same pass also
// deposits gnmr's per-unit norms (gnmr/cuda/fused_partials.cuh).
//
// Shared by the example kernel (fused_unscale_cuda.cu), its benchmark
// (bench/cuda/bench_fused.cu) and the CPU test that checks the bits
// (tests/unit/test_cuda_logic_fused.cpp): one GNMR_HOST_DEVICE functor, as
// CUTLASS shares its epilogues.
//
// fp32 gradients only (AMP unscales the fp32 gradients of fp32 master
// weights): each value becomes value * inv_scale, correctly rounded, and is
// stored back; a non-finite result sets *found_inf (a plain integer store of
// 1 by any thread that sees one: no float atomic, and every writer writes
// the same value).
#pragma once

#include <cstdint>
#include <cstring>

#include "gnmr/core/math.hpp"
#include "gnmr/plan/norm_plan.hpp"

namespace example {

struct UnscaleCheck {
  float inv_scale;
  unsigned int* found_inf;

  GNMR_HOST_DEVICE float one(float x) const {
    const float y = gnmr::math::mul(x, inv_scale);
    if (!gnmr::is_finite(y)) *found_inf = 1u;
    return y;
  }
  // fp32 chunks are unscaled in place; a plan of this example holds fp32
  // segments only (fused_unscale_cuda.cu checks), 16-bit chunks are left
  // as they are.
  template <std::uint32_t D>
  GNMR_HOST_DEVICE void vec(gnmr::detail::Vec16& v, const gnmr::detail::Vec16* where) const {
    if constexpr (D == gnmr::detail::kDF32) {
      for (int j = 0; j < 4; ++j) v.w[j] = gnmr::detail::float_to_bits(one(gnmr::detail::bits_to_float(v.w[j])));
      *const_cast<gnmr::detail::Vec16*>(where) = v;
    }
  }
  template <std::uint32_t D, class Bits>
  GNMR_HOST_DEVICE void elem(Bits& b, const Bits* where) const {
    if constexpr (D == gnmr::detail::kDF32) {
      b = gnmr::detail::float_to_bits(one(gnmr::detail::bits_to_float(b)));
      *const_cast<Bits*>(where) = b;
    }
  }
};

}  // namespace example
