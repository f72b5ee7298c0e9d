// examples/sgd_case.hpp — the model, the gradients and the CPU reference of
// the CUDA example sgd_momentum_cuda.cu, in plain C++: the kernels and the
// reference call the same GNMR_HOST_DEVICE functions, and a machine
// without a GPU can check what the GPU run will be compared with
// (tests/unit/test_examples_logic.cpp).
//
// Five parameter tensors in three units (unit 0: a weight and its bias,
// unit 1: another weight and bias, unit 2: an embedding), synthetic
// gradients g = 0.1 p + noise, and three faults: unit 1's gradient x40 at
// step 30, a NaN in unit 2 at step 45, unit 0's gradient x25 at step 60.
// The controller is the recommended one, the preset "default"
// (gnmr::make_default here, gnmr::cuda::make_default on the device: the
// same decisions bit for bit on the same partials). Its stabilizer scales
// every unit on every step, and GNMR's calibrated trigger inside it (whose
// learned rules judge from each unit's 21st sample: both spikes come after)
// grants each spike a slot, one at a time: the unit's gradient is clipped
// to its mean on top of the stabilizer's scale and its operator promoted
// (kPromote) for the lock's 8 steps. So the run exercises two grants
// (steps 30 and 60) and a skip (45). The default never asks for a momentum
// reset (kResetMoments: its recovery is clip and promote); sgd_momentum.hpp
// honours one anyway, for the presets that do (tests/unit checks the rule).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "gnmr/core/math.hpp"
#include "gnmr/plan/norm_plan.hpp"
#include "gnmr/presets/make.hpp"
#include "../tests/reference/unit_partials.hpp"
#include "sgd_momentum.hpp"

namespace sgd_case {

constexpr std::uint32_t kUnits = 3, kTensors = 5;
constexpr int kSteps = 80, kSpikeStep = 30, kNanStep = 45, kSecondSpikeStep = 60;
constexpr int kLock = 8;  // the default's lock: a grant at step g promotes steps g+1 .. g+kLock

struct Spec {
  std::uint32_t numel, unit;
  float level;  // noise amplitude of the tensor's gradient
};
inline std::vector<Spec> specs() {
  return {{4096, 0, 0.02f}, {64, 0, 0.1f}, {8192, 1, 0.01f}, {128, 1, 0.05f}, {1000, 2, 0.03f}};
}

inline sgdm::Hyper hyper() { return sgdm::Hyper{0.05f, 0.9f, 0.0f}; }

// A number in [-1, 1) from (a, b, c), with integer operations only: the
// same bits on the host and the device.
GNMR_HOST_DEVICE float noise(std::uint32_t a, std::uint32_t b, std::uint32_t c) {
  std::uint32_t h = (a * 0x9E3779B1u) ^ (b * 0x85EBCA77u) ^ (c * 0xC2B2AE3Du);
  h ^= h >> 15, h *= 0x2C1B3C6Du, h ^= h >> 12, h *= 0x297A2D39u, h ^= h >> 15;
  return static_cast<float>(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

GNMR_HOST_DEVICE float init_param(std::uint32_t tensor, std::uint32_t i) { return 0.1f * noise(0u, tensor + 100u, i); }

// Element i of tensor k's gradient at step t (1-based), given its parameter p.
GNMR_HOST_DEVICE float grad(std::int64_t t, std::uint32_t k, std::uint32_t unit, float level, std::uint32_t i,
                            float p) {
  float g = gnmr::math::add(gnmr::math::mul(0.1f, p), gnmr::math::mul(level, noise(static_cast<std::uint32_t>(t), k, i)));
  if (t == kSpikeStep && unit == 1) g = gnmr::math::mul(g, 40.0f);
  if (t == kSecondSpikeStep && unit == 0) g = gnmr::math::mul(g, 25.0f);
  if (t == kNanStep && k == 4 && i == 10) g = gnmr::nan_f();
  return g;
}

// The whole run on the host, in the device's order: gradients, per-unit
// partials in the CUDA kernel's exact summation order (emulated), the
// controller, the update. The host buffers must sit at the device buffers'
// address modulo 16 (the kernel's head/body split depends on it): both are
// 16-byte aligned here (cudaMalloc gives 256, the vectors are checked).
struct Replay {
  std::vector<std::vector<float>> p, buf;
  std::vector<float> partials;                // kSteps x kUnits: each unit's sum of squares
  std::vector<gnmr::UnitDecision> decisions;  // kSteps x kUnits
  std::vector<gnmr::StepSummary> summaries;
  bool aligned = true;
};

inline Replay replay() {
  const std::vector<Spec> sp = specs();
  const sgdm::Hyper h = hyper();
  Replay r;
  std::vector<std::vector<float>> g(kTensors);
  std::vector<gnmr::Segment> segs;
  for (std::uint32_t k = 0; k < kTensors; ++k) {
    r.p.emplace_back(sp[k].numel);
    r.buf.emplace_back(sp[k].numel, 0.0f);
    g[k].resize(sp[k].numel);
    for (std::uint32_t i = 0; i < sp[k].numel; ++i) r.p[k][i] = init_param(k, i);
    r.aligned = r.aligned && reinterpret_cast<std::uintptr_t>(g[k].data()) % 16 == 0;
    segs.push_back({g[k].data(), sp[k].numel, gnmr::DType::kF32, sp[k].unit});
  }
  const gnmr::detail::NormLayout L = gnmr::detail::build_norm_layout(segs.data(), segs.size(), kUnits);
  const std::unique_ptr<gnmr::DynController> ctl = gnmr::make_default(kUnits);
  for (int t = 1; t <= kSteps; ++t) {
    for (std::uint32_t k = 0; k < kTensors; ++k)
      for (std::uint32_t i = 0; i < sp[k].numel; ++i) g[k][i] = grad(t, k, sp[k].unit, sp[k].level, i, r.p[k][i]);
    const std::vector<float> partials = gnmr::reference::emulate_unit_partials<gnmr::L2Norm>(L);
    const gnmr::StepSummary s = ctl->step(partials);
    r.partials.insert(r.partials.end(), partials.begin(), partials.end());
    r.summaries.push_back(s);
    r.decisions.insert(r.decisions.end(), ctl->decisions().begin(), ctl->decisions().end());
    if (s.skip_step) continue;  // a suggested global skip: nothing moves (the default never suggests one)
    for (std::uint32_t k = 0; k < kTensors; ++k) {
      const gnmr::UnitDecision d = ctl->decisions()[sp[k].unit];
      for (std::uint32_t i = 0; i < sp[k].numel; ++i) sgdm::update(h, d, r.p[k][i], r.buf[k][i], g[k][i]);
    }
  }
  return r;
}

}  // namespace sgd_case
