// demo/quant.hpp — emulated low-precision activations and injected gradient
// faults: the two stresses gnmr-demo puts on an otherwise ordinary run.
//
// Quantization is a per-tensor-scaled quantize-dequantize of a linear layer's
// input onto the FP8 E4M3 or FP4 E2M1 grid (OCP formats: E4M3 max 448, no
// infinities; E2M1 values 0, 0.5, 1, 1.5, 2, 3, 4, 6), round to nearest even,
// with a straight-through backward: y = x + (q(x) - x).detach(). Per-tensor
// amax scaling is what a naive FP8/FP4 recipe does; one outlier activation
// then crushes every other value of the tensor toward zero — that is the
// stress (real FP4 recipes use 16- or 32-element block scales).
//
// Faults model what low-precision training produces in the wild: a single
// unit's gradient blown up by an overflowing partial product, or a NaN/Inf
// from an overflow. The schedule is drawn once from the seed, so every
// controller of a comparison meets the same faults at the same steps.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace demo {

enum class Stress { kNone, kFp8, kFp4 };

inline Stress parse_stress(const std::string& s) {
  if (s == "none") return Stress::kNone;
  if (s == "fp8") return Stress::kFp8;
  if (s == "fp4") return Stress::kFp4;
  throw std::invalid_argument("--stress must be none, fp8 or fp4, got '" + s + "'");
}
inline const char* stress_name(Stress s) {
  return s == Stress::kFp8 ? "fp8" : s == Stress::kFp4 ? "fp4" : "none";
}

struct FloatGrid {
  int mantissa_bits;  // explicit mantissa bits
  int emin;           // exponent of the smallest normal
  double max;         // largest finite value
};
inline FloatGrid grid_of(Stress s) {
  if (s == Stress::kFp8) return {3, -6, 448.0};
  return {1, 0, 6.0};  // E2M1
}

// Nearest grid value (ties to even) of t = x * scale, then back to x's range.
// frexp gives the exponent exactly (log2 would round up just below a power
// of two); below the smallest normal the spacing is that of the subnormals.
inline torch::Tensor quantize_dequantize(const torch::Tensor& x, Stress s) {
  if (s == Stress::kNone) return x;
  torch::NoGradGuard ng;
  const FloatGrid g = grid_of(s);
  const auto xf = x.to(torch::kFloat);
  const auto amax = xf.abs().max().clamp_min(1e-30);
  const auto scale = g.max / amax;
  const auto t = (xf * scale).clamp(-g.max, g.max);
  auto e = std::get<1>(torch::frexp(t)).to(torch::kFloat) - 1.0;  // floor(log2|t|)
  e = e.clamp_min(static_cast<double>(g.emin));
  const auto step = torch::pow(2.0, e - static_cast<double>(g.mantissa_bits));
  const auto q = (torch::round(t / step) * step).clamp(-g.max, g.max);
  return (q / scale).to(x.scalar_type());
}

// Straight-through estimator: forward sees q(x), backward is the identity.
inline torch::Tensor fake_quant(const torch::Tensor& x, Stress s) {
  if (s == Stress::kNone) return x;
  return x + (quantize_dequantize(x.detach(), s) - x.detach());
}

enum class FaultKind { kScale, kNan, kMixed };

inline FaultKind parse_fault_kind(const std::string& s) {
  if (s == "scale") return FaultKind::kScale;
  if (s == "nan") return FaultKind::kNan;
  if (s == "mixed") return FaultKind::kMixed;
  throw std::invalid_argument("--fault-kind must be scale, nan or mixed, got '" + s + "'");
}

struct Fault {
  int unit = -1;       // -1: no fault this step
  bool nonfinite = false;
  std::int64_t element = 0;  // which element becomes NaN/Inf (mod numel)
  bool inf = false;    // +Inf instead of NaN
};

// One entry per step (index 0 = step 1). Drawn from its own generator so
// the schedule does not depend on how many batches or inits were drawn.
inline std::vector<Fault> fault_schedule(int steps, double rate, FaultKind kind, int num_units,
                                         std::uint64_t seed) {
  if (!(rate >= 0.0 && rate <= 1.0)) throw std::invalid_argument("--fault-rate must be in [0, 1]");
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::uniform_int_distribution<int> unit(0, num_units - 1);
  std::vector<Fault> f(static_cast<std::size_t>(steps));
  for (auto& x : f) {
    const double a = u(rng), b = u(rng), c = u(rng);
    const int un = unit(rng);
    const auto el = static_cast<std::int64_t>(rng() >> 1);
    if (a >= rate) continue;
    x.unit = un;
    x.nonfinite = kind == FaultKind::kNan || (kind == FaultKind::kMixed && b < 0.25);
    x.inf = c < 0.5;
    x.element = el;
  }
  return f;
}

// Applies a fault to one parameter's gradient in place.
inline void inject(torch::Tensor& grad, const Fault& f, double factor) {
  torch::NoGradGuard ng;
  if (f.nonfinite) {
    auto flat = grad.view({-1});
    const auto i = f.element % flat.numel();
    flat[i] = f.inf ? INFINITY : NAN;
  } else {
    grad.mul_(factor);
  }
}

}  // namespace demo
