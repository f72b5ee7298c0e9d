// demo/nvfp4_recipe.hpp — what NVIDIA's NVFP4 training recipe (arXiv
// 2509.25149) adds to plain 16-element NVFP4 blocks (formats.hpp,
// qdq_nvfp4), on raw float arrays: 16x16 two-dimensional weight blocks, so
// that the forward and the input-gradient GEMMs see the same quantized
// weight; stochastic rounding of the gradients to E2M1; a 16x16 random
// Hadamard transform on the weight-gradient GEMM's inputs along the
// contraction dimension. qlinear.hpp wires them into the three GEMMs under
// `--format nvfp4-recipe`; tests/demo/test_quant.cpp holds each against a
// direct double-precision reference.
//
// Stochastic rounding draws from a counter-based generator: the draw of an
// element is splitmix64 (demo::mix64, promotion.hpp) of (run seed, step,
// operator, which operand, element index), so a run is reproducible,
// resumes bit for bit and needs no generator state; two operands,
// operators or steps never share draws.
// The same two-level scale rule as qdq_nvfp4 (g = amax / (6 * 448), block
// scale e4m3(block amax / 6 / g)); NaN and Inf pass through unchanged.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "formats.hpp"
#include "promotion.hpp"

namespace demo {

// The key of one operand's draws: (seed, step, operator, which).
inline std::uint64_t sr_key(std::uint64_t seed, std::int64_t step, int op, int which) {
  std::uint64_t h = mix64(seed ^ 0x5352ull);  // "SR"
  h = mix64(h ^ static_cast<std::uint64_t>(step));
  h = mix64(h ^ static_cast<std::uint64_t>(op));
  return mix64(h ^ static_cast<std::uint64_t>(which));
}
// Element i's uniform draw in [0, 1): a multiple of 2^-24.
inline float sr_uniform(std::uint64_t key, std::uint64_t i) {
  return static_cast<float>(mix64(key ^ (i * 0xD1B54A32D192ED03ull)) >> 40) * (1.0f / 16777216.0f);
}

// t rounded stochastically to E2M1 with the draw u: between the grid
// neighbours lo <= |t| < hi it goes up iff u < p = (|t| - lo) / (hi - lo)
// (exact in fp32: hi - lo is a power of two), so E[q] = t to 2^-24 of a
// step; |t| >= 6 saturates to 6; NaN and Inf pass through.
inline float e2m1_round_sr(float t, float u) {
  if (!std::isfinite(t)) return t;
  static const float grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float a = std::fabs(t);
  if (a >= 6.0f) return std::copysign(6.0f, t);
  int k = 0;
  while (k < 6 && grid[k + 1] <= a) ++k;
  const float lo = grid[k], hi = grid[k + 1];
  const float p = (a - lo) / (hi - lo);
  return std::copysign(u < p ? hi : lo, t);
}

namespace detail {
inline float nvfp4_tensor_scale(const float* x, std::size_t n) {
  const FmtInfo e4m3 = fmt_info(Fmt::kE4M3), e2m1 = fmt_info(Fmt::kE2M1);
  return finite_amax(x, n) / (e2m1.max * e4m3.max);
}
inline float nvfp4_block_scale(float block_amax, float g) {
  const FmtInfo e4m3 = fmt_info(Fmt::kE4M3), e2m1 = fmt_info(Fmt::kE2M1);
  return g > 0.0f ? round_to_grid(block_amax / e2m1.max / g, e4m3) * g : 0.0f;
}
}  // namespace detail

// NVFP4 with one scale per 16x16 block of a row-major [rows, cols] array
// (edge blocks may be smaller), round to nearest even. q2d(W)^T equals
// q2d(W^T) bit for bit: a block's scale does not depend on the orientation.
inline void qdq_nvfp4_2d(const float* x, float* y, std::size_t rows, std::size_t cols) {
  const FmtInfo e2m1 = fmt_info(Fmt::kE2M1);
  const float g = detail::nvfp4_tensor_scale(x, rows * cols);
  for (std::size_t r0 = 0; r0 < rows; r0 += kNvfp4Block) {
    const std::size_t rn = rows - r0 < kNvfp4Block ? rows - r0 : kNvfp4Block;
    for (std::size_t c0 = 0; c0 < cols; c0 += kNvfp4Block) {
      const std::size_t cn = cols - c0 < kNvfp4Block ? cols - c0 : kNvfp4Block;
      float amax = 0.0f;
      for (std::size_t r = r0; r < r0 + rn; ++r) {
        const float m = finite_amax(x + r * cols + c0, cn);
        amax = m > amax ? m : amax;
      }
      const float sc = detail::nvfp4_block_scale(amax, g);
      for (std::size_t r = r0; r < r0 + rn; ++r)
        for (std::size_t c = c0; c < c0 + cn; ++c) {
          const float v = x[r * cols + c];
          y[r * cols + c] = !std::isfinite(v) ? v : sc > 0.0f ? round_to_grid(v / sc, e2m1) * sc : 0.0f;
        }
    }
  }
}

// NVFP4 with 16-element blocks along each row, stochastic rounding with the
// draws of `key` (element index r * cols + c).
inline void qdq_nvfp4_sr(const float* x, float* y, std::size_t rows, std::size_t cols, std::uint64_t key) {
  const float g = detail::nvfp4_tensor_scale(x, rows * cols);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c0 = 0; c0 < cols; c0 += kNvfp4Block) {
      const std::size_t len = cols - c0 < kNvfp4Block ? cols - c0 : kNvfp4Block;
      const std::size_t at = r * cols + c0;
      const float sc = detail::nvfp4_block_scale(finite_amax(x + at, len), g);
      for (std::size_t i = 0; i < len; ++i) {
        const float v = x[at + i];
        y[at + i] = !std::isfinite(v) ? v : sc > 0.0f ? e2m1_round_sr(v / sc, sr_uniform(key, at + i)) * sc : 0.0f;
      }
    }
}

// The transform's 16 signs, fixed for a run.
inline void rht_signs(std::uint64_t seed, float* signs) {
  const std::uint64_t h = mix64(seed ^ 0x524854ull);  // "RHT"
  for (int i = 0; i < 16; ++i) signs[i] = (mix64(h + static_cast<std::uint64_t>(i)) >> 63) ? -1.0f : 1.0f;
}

// Each full 16-element block b of each row becomes b Q, Q = diag(signs) H / 4
// (H the 16x16 Sylvester-Hadamard matrix: Q is orthonormal, so two operands
// transformed alike along their contraction dimension keep their product);
// a shorter last block is left as it is (the same for both operands). In
// place; the sums in a fixed order (a fast Walsh-Hadamard transform).
inline void rht16_rows(float* x, std::size_t rows, std::size_t cols, const float* signs) {
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c0 = 0; c0 + kNvfp4Block <= cols; c0 += kNvfp4Block) {
      float* b = x + r * cols + c0;
      for (int i = 0; i < 16; ++i) b[i] *= signs[i];
      for (int h = 1; h < 16; h *= 2)
        for (int i = 0; i < 16; i += 2 * h)
          for (int j = i; j < i + h; ++j) {
            const float a = b[j], c = b[j + h];
            b[j] = a + c;
            b[j + h] = a - c;
          }
      for (int i = 0; i < 16; ++i) b[i] *= 0.25f;
    }
}

}  // namespace demo
