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
// operators or steps never share draws. The rounding also yields each
// element's variance, from which sr_product_noise gives the expected squared
// norm of the noise in the weight gradient (the noise-floor trigger's aux).
// The same two-level scale rule as qdq_nvfp4 (g = amax / (6 * 448), block
// scale e4m3(block amax / 6 / g)); NaN and Inf pass through unchanged.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

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

// The grid neighbours lo <= a < hi of a = |t| (0 <= a < 6) and the chance
// p = (a - lo) / (hi - lo) of rounding up (exact in fp32: hi - lo is a
// power of two).
inline void e2m1_neighbours(float a, float& lo, float& hi, float& p) {
  static const float grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  int k = 0;
  while (k < 6 && grid[k + 1] <= a) ++k;
  lo = grid[k];
  hi = grid[k + 1];
  p = (a - lo) / (hi - lo);
}

// t rounded stochastically to E2M1 with the draw u: between the grid
// neighbours lo <= |t| < hi it goes up iff u < p, so E[q] = t to 2^-24 of
// a step; |t| >= 6 saturates to 6; NaN and Inf pass through.
inline float e2m1_round_sr(float t, float u) {
  if (!std::isfinite(t)) return t;
  const float a = std::fabs(t);
  if (a >= 6.0f) return std::copysign(6.0f, t);
  float lo, hi, p;
  e2m1_neighbours(a, lo, hi, p);
  return std::copysign(u < p ? hi : lo, t);
}

// The variance of e2m1_round_sr(t, u) over u, in E2M1 units: p (1 - p)
// (hi - lo)^2 (0 on the grid and when saturated; NaN for NaN or Inf).
inline float e2m1_sr_variance(float t) {
  if (!std::isfinite(t)) return NAN;
  const float a = std::fabs(t);
  if (a >= 6.0f) return 0.0f;
  float lo, hi, p;
  e2m1_neighbours(a, lo, hi, p);
  const float d = hi - lo;
  return p * (1.0f - p) * d * d;
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
// draws of `key` (element index r * cols + c). With `var`, also each
// element's variance over the draws in the dequantized units,
// e2m1_sr_variance(v / s) * s^2 for block scale s (0 in a zero block): the
// noise the rounding adds, from the values it computes anyway.
inline void qdq_nvfp4_sr(const float* x, float* y, std::size_t rows, std::size_t cols, std::uint64_t key,
                         float* var = nullptr) {
  const float g = detail::nvfp4_tensor_scale(x, rows * cols);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c0 = 0; c0 < cols; c0 += kNvfp4Block) {
      const std::size_t len = cols - c0 < kNvfp4Block ? cols - c0 : kNvfp4Block;
      const std::size_t at = r * cols + c0;
      const float sc = detail::nvfp4_block_scale(finite_amax(x + at, len), g);
      for (std::size_t i = 0; i < len; ++i) {
        const float v = x[at + i];
        y[at + i] = !std::isfinite(v) ? v : sc > 0.0f ? e2m1_round_sr(v / sc, sr_uniform(key, at + i)) * sc : 0.0f;
        if (var) var[at + i] = !std::isfinite(v) ? NAN : sc > 0.0f ? e2m1_sr_variance(v / sc) * sc * sc : 0.0f;
      }
    }
}

// E||e||^2 of the noise that stochastic rounding of A adds to the product
// A B^T (A [n, m] rounded with per-element variances `var`, B [k, m] the
// other operand as used): the draws are independent and zero-mean, so
// E||e||^2 = sum_t (sum_i var[i, t]) (sum_j B[j, t]^2). Two reductions, no
// second GEMM; double accumulators in a fixed order (deterministic).
inline double sr_product_noise(const float* var, std::size_t n, const float* b, std::size_t k, std::size_t m) {
  std::vector<double> sv(m, 0.0), sb(m, 0.0);  // column sums, accumulated row by row (contiguous reads)
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t t = 0; t < m; ++t) sv[t] += var[i * m + t];
  for (std::size_t j = 0; j < k; ++j)
    for (std::size_t t = 0; t < m; ++t) sb[t] += static_cast<double>(b[j * m + t]) * b[j * m + t];
  double total = 0.0;
  for (std::size_t t = 0; t < m; ++t) total += sv[t] * sb[t];
  return total;
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
