// examples/fake_quant_case.hpp — the data and the CPU reference of the CUDA
// example promote_fake_quant_cuda.cu, in plain C++ so that a machine
// without a GPU can check what the GPU run will be compared with
// (tests/unit/test_examples_logic.cpp: the promoted steps, and that the two
// paths differ on every step).
//
// Two linear layers, units 0 (FP8 E4M3) and 1 (FP4 E2M1), one forward per
// step; the recommended controller (gnmr::make_default here,
// gnmr::cuda::make_default on the device: the same decisions bit for bit)
// steps on a trace of norms in which unit 1 jumps tenfold at step
// kSpikeStep, after the 20 samples in which the default's calibrated
// trigger learns each unit's thresholds (a tenfold jump is below its
// ceiling of 16x, the only rule while a unit calibrates). The default
// grants it a slot: kPromote for the lock, steps kSpikeStep+1 ..
// kSpikeStep+kLock. The forward of step s uses the decisions of step s-1
// (docs/algorithm.md, Precision promotion).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "fake_quant.hpp"
#include "gnmr/presets/make.hpp"

namespace fq_case {

constexpr std::uint32_t kIn = 64, kOut = 32, kBatch = 16, kUnits = 2;
constexpr int kSteps = 32, kSpikeStep = 24;
constexpr int kLock = 8;  // the default's lock: a grant at step g promotes steps g+1 .. g+kLock

inline fq::Format format_of(std::uint32_t unit) { return unit == 0 ? fq::e4m3() : fq::e2m1(); }

// Deterministic data in [-1, 1), the same on every machine (no <random>).
inline float hashed(std::uint32_t a, std::uint32_t b) {
  std::uint32_t h = (a * 0x9E3779B1u) ^ ((b + 0x7F4A7C15u) * 0x85EBCA77u);
  h ^= h >> 15, h *= 0x2C1B3C6Du, h ^= h >> 12, h *= 0x297A2D39u, h ^= h >> 15;
  return static_cast<float>(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

struct Case {
  std::vector<float> W[kUnits], B[kUnits];
  std::vector<float> X;      // kSteps batches of kBatch x kIn
  std::vector<float> norms;  // kSteps x kUnits
  const float* x(int step) const { return X.data() + static_cast<std::size_t>(step - 1) * kBatch * kIn; }
  const float* norms_at(int step) const { return norms.data() + static_cast<std::size_t>(step - 1) * kUnits; }
};

inline Case make_case() {
  Case c;
  for (std::uint32_t u = 0; u < kUnits; ++u) {
    for (std::uint32_t i = 0; i < kOut * kIn; ++i) c.W[u].push_back(0.2f * hashed(u, i));
    for (std::uint32_t o = 0; o < kOut; ++o) c.B[u].push_back(0.1f * hashed(u + 10, o));
  }
  c.X.resize(static_cast<std::size_t>(kSteps) * kBatch * kIn);
  for (std::size_t i = 0; i < c.X.size(); ++i) c.X[i] = hashed(99, static_cast<std::uint32_t>(i));
  // An outlier feature in sample 2 of every batch: the per-tensor scale then
  // matters, and the quantized and fp32 paths give different outputs.
  for (int s = 0; s < kSteps; ++s) c.X[(static_cast<std::size_t>(s) * kBatch + 2) * kIn + 5] = 30.0f;
  c.norms.resize(static_cast<std::size_t>(kSteps) * kUnits);
  for (int s = 1; s <= kSteps; ++s)
    for (std::uint32_t u = 0; u < kUnits; ++u)
      c.norms[(s - 1) * kUnits + u] = (1.0f + 0.05f * hashed(7, static_cast<std::uint32_t>(s) * kUnits + u)) *
                                      (s == kSpikeStep && u == 1 ? 10.0f : 1.0f);
  return c;
}

// One layer's forward on the host, with the same functions as the kernel.
inline std::vector<float> forward(const Case& c, std::uint32_t unit, int step, bool promoted) {
  const fq::Format f = format_of(unit);
  const float* x = c.x(step);
  const float ws = fq::tensor_scale(fq::amax(c.W[unit].data(), kOut * kIn), f);
  const float xs = fq::tensor_scale(fq::amax(x, kBatch * kIn), f);
  std::vector<float> y(kBatch * kOut);
  for (std::uint32_t r = 0; r < kBatch; ++r)
    for (std::uint32_t o = 0; o < kOut; ++o)
      y[r * kOut + o] = fq::linear_out(&c.W[unit][o * kIn], x + r * kIn, kIn, c.B[unit][o], promoted, f, ws, xs);
  return y;
}

// The whole run on the host: promoted[s-1][u] and the outputs y[s-1][u].
struct Replay {
  std::vector<std::vector<bool>> promoted;
  std::vector<std::vector<std::vector<float>>> y;
};

inline Replay replay(const Case& c) {
  Replay r;
  const std::unique_ptr<gnmr::DynController> ctl = gnmr::make_default(kUnits);
  for (int s = 1; s <= kSteps; ++s) {
    std::vector<bool> p(kUnits);
    std::vector<std::vector<float>> y(kUnits);
    for (std::uint32_t u = 0; u < kUnits; ++u) {
      // Before step 1 there are no decisions: every unit runs low.
      p[u] = s > 1 && (ctl->decisions()[u].flags & gnmr::kPromote) != 0u;
      y[u] = forward(c, u, s, p[u]);
    }
    r.promoted.push_back(p);
    r.y.push_back(y);
    ctl->step_norms(c.norms_at(s), kUnits);
  }
  return r;
}

}  // namespace fq_case
