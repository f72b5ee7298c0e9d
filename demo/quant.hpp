// demo/quant.hpp — quantize-dequantize of one GEMM operand, as a training
// recipe does it: the format (formats.hpp), the scaling (per-tensor current,
// per-tensor delayed with an amax history, or NVFP4-like 16-element blocks)
// and the operator's promotion to high precision.
//
// Two implementations of the same arithmetic: loops over the raw floats on
// the CPU (the benchmark's hot path: one pass for the amax, one to round),
// and torch tensor ops for CUDA tensors, so that on a GPU the scale, the
// amax history and the promoted select stay on the device (no host
// synchronisation). tests/demo/test_quant.cpp checks that both give the bits
// of a double-precision reference.
//
// Delayed scaling follows Transformer Engine: scale = format max / max(amax
// history), margin 0; the current step's amax is pushed after use; values
// above the stale range saturate. Our choice for the first use (empty
// history): this step's own amax, i.e. current scaling once, rather than
// TE's initial scale of 1 (which would flush an FP4 tensor to zero).
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <torch/torch.h>

#include "formats.hpp"

namespace demo {

// kNvfp4Recipe: NVIDIA's NVFP4 training recipe (nvfp4_recipe.hpp; the CPU
// only): 1-D blocks for the activations and gradients, 16x16 blocks for the
// weights, stochastic rounding of the gradients, the random Hadamard
// transform on the weight-gradient GEMM's inputs.
enum class Scaling : std::uint8_t { kCurrent, kDelayed, kBlock16, kNvfp4Recipe };

inline const char* scaling_name(Scaling s) {
  return s == Scaling::kDelayed        ? "delayed"
         : s == Scaling::kBlock16      ? "block16"
         : s == Scaling::kNvfp4Recipe  ? "nvfp4-recipe"
                                       : "current";
}
inline Scaling parse_scaling(const std::string& s) {
  static const Scaling all[] = {Scaling::kCurrent, Scaling::kDelayed, Scaling::kBlock16, Scaling::kNvfp4Recipe};
  return parse_named(s, all, scaling_name, "scaling");
}

// What a run quantizes. Forward: the GEMM's activation input (fwd_x) and
// weight (fwd_w); backward: the output gradient (bwd) in the data-gradient
// GEMM, and, with wgrad, both inputs of the weight-gradient GEMM (the
// activation in fwd_x's format, the output gradient in bwd's).
struct QuantConfig {
  Fmt fwd_x = Fmt::kNone, fwd_w = Fmt::kNone, bwd = Fmt::kNone;
  Scaling scaling = Scaling::kCurrent;
  bool wgrad = false;
  int history = 16;  // amax history length (delayed scaling)
  bool head_high = false;  // the output head never quantized (the NVFP4 recipe keeps it in BF16)

  bool any() const { return fwd_x != Fmt::kNone || fwd_w != Fmt::kNone || bwd != Fmt::kNone; }
  void check() const {
    if (history < 1 || history > 1024) throw std::invalid_argument("--amax-history must be in [1, 1024]");
    if (scaling == Scaling::kBlock16)
      for (Fmt f : {fwd_x, fwd_w, bwd})
        if (f != Fmt::kNone && f != Fmt::kE2M1)
          throw std::invalid_argument("block16 scaling is NVFP4's: every quantized operand must be e2m1");
    if (scaling == Scaling::kNvfp4Recipe && (fwd_x != Fmt::kE2M1 || fwd_w != Fmt::kE2M1 || bwd != Fmt::kE2M1 || !wgrad))
      throw std::invalid_argument(
          "nvfp4-recipe quantizes all three GEMMs in e2m1: --fwd e2m1 --bwd e2m1 --wgrad-quant 1 (or --format "
          "nvfp4-recipe, which sets them)");
  }
};

// One operand's amax history: a float tensor on the model's device (a ring;
// only its max matters) and a host count of pushes.
struct AmaxHistory {
  torch::Tensor h;
  std::int64_t count = 0;

  void init(int len, torch::Device dev) {
    h = torch::zeros({len}, torch::TensorOptions().dtype(torch::kFloat).device(dev));
    count = 0;
  }
  void push(const torch::Tensor& amax0d) {  // device path
    h.select(0, count % h.size(0)).copy_(amax0d);
    ++count;
  }
  void push(float amax) {  // CPU path
    h.data_ptr<float>()[count % h.size(0)] = amax;
    ++count;
  }
  float max_host() const {
    const float* p = h.data_ptr<float>();
    return *std::max_element(p, p + h.size(0));
  }
};

// Whether the operator runs in high precision this step: a host flag on the
// CPU, a 0-dim bool tensor on the device (written by the promotion kernel).
struct Promoted {
  bool host = false;
  torch::Tensor dev;  // undefined on the CPU
};

// --- the torch-op implementation (CUDA; also run on the CPU by the test) --

inline torch::Tensor pow2_t(const torch::Tensor& e_int) {  // 2^e from its bits, e in [-126, 127]
  return ((e_int + 127) * 8388608).to(torch::kInt).view(torch::kFloat);
}

// round_to_grid, elementwise.
inline torch::Tensor round_to_grid_t(const torch::Tensor& t, const FmtInfo& f) {
  const auto a = t.abs();
  const auto e = (std::get<1>(torch::frexp(a)) - 1).clamp_min(f.emin);  // floor(log2 a), int
  const auto s = e - f.mant;
  auto q = torch::round(a * pow2_t(-s)) * pow2_t(s);
  q = torch::where(a >= f.max, torch::full_like(q, f.max), q);
  return torch::where(torch::isfinite(t), torch::copysign(q, t), t);
}

inline torch::Tensor finite_amax_t(const torch::Tensor& x) {
  const auto a = x.abs();
  return torch::where(torch::isfinite(a), a, torch::zeros_like(a)).max();
}

inline torch::Tensor scale_for_t(const torch::Tensor& amax, float fmt_max) {
  const auto s = (fmt_max / amax).clamp_max(FLT_MAX);
  return torch::where(amax > 0, s, torch::ones_like(s));
}

inline torch::Tensor qdq_scaled_t(const torch::Tensor& x, const torch::Tensor& scale, const FmtInfo& f) {
  return round_to_grid_t(x * scale, f) / scale;
}

// qdq_nvfp4 on a 2-D tensor, blocks of 16 along dim 1.
inline torch::Tensor qdq_nvfp4_t(const torch::Tensor& x) {
  const FmtInfo e4m3 = fmt_info(Fmt::kE4M3), e2m1 = fmt_info(Fmt::kE2M1);
  const auto rows = x.size(0), cols = x.size(1);
  const auto nb = (cols + kNvfp4Block - 1) / kNvfp4Block;
  auto xp = torch::constant_pad_nd(x, {0, nb * kNvfp4Block - cols}).view({rows, nb, kNvfp4Block});
  const auto g = finite_amax_t(x) / (e2m1.max * e4m3.max);
  const auto ab = xp.abs();
  const auto bmax = torch::where(torch::isfinite(ab), ab, torch::zeros_like(ab)).amax(-1, true);
  const auto bs = torch::where(g > 0, round_to_grid_t(bmax / e2m1.max / g, e4m3), torch::zeros_like(bmax));
  const auto sc = bs * g;
  auto q = torch::where(sc > 0, round_to_grid_t(xp / sc, e2m1) * sc, torch::zeros_like(xp));
  q = torch::where(torch::isfinite(xp), q, xp);
  return q.view({rows, nb * kNvfp4Block}).slice(1, 0, cols);
}

// --- one GEMM operand ------------------------------------------------------

// x: a contiguous 2-D float tensor whose dim 1 is the GEMM's reduction dim.
// Returns the operand the GEMM uses: x itself for format none or a promoted
// operator, its quantize-dequantize otherwise. With delayed scaling the
// history is read before and fed after (promoted or not); hist may be null
// for block16 and current scaling.
inline torch::Tensor operand(const torch::Tensor& x, Fmt fmt, Scaling sc, AmaxHistory* hist,
                             const Promoted& pro) {
  if (fmt == Fmt::kNone) return x;
  const FmtInfo f = fmt_info(fmt);
  const bool delayed = sc == Scaling::kDelayed;
  if (delayed && !hist) throw std::logic_error("operand: delayed scaling without a history");
  if (x.is_cpu()) {
    const auto xc = x.contiguous();
    const float* xp = xc.data_ptr<float>();
    const auto n = static_cast<std::size_t>(xc.numel());
    const float amax = finite_amax(xp, n);
    if (pro.host) {
      if (delayed) hist->push(amax);
      return x;
    }
    auto y = torch::empty_like(xc);
    if (sc == Scaling::kBlock16) {
      qdq_nvfp4(xp, y.data_ptr<float>(), static_cast<std::size_t>(xc.size(0)),
                static_cast<std::size_t>(xc.size(1)));
      return y;
    }
    const float ref = delayed && hist->count > 0 ? hist->max_host() : amax;
    qdq_scaled(xp, y.data_ptr<float>(), n, scale_for(ref, f.max), f);
    if (delayed) hist->push(amax);
    return y;
  }
  torch::Tensor y;
  const auto amax = finite_amax_t(x);
  if (sc == Scaling::kBlock16) {
    y = qdq_nvfp4_t(x);
  } else {
    const auto ref = delayed && hist->count > 0 ? hist->h.max() : amax;
    y = qdq_scaled_t(x, scale_for_t(ref, f.max), f);
  }
  if (delayed) hist->push(amax);
  if (pro.dev.defined()) return torch::where(pro.dev, x, y);
  return pro.host ? x : y;
}

}  // namespace demo
