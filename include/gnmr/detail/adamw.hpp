// gnmr/detail/adamw.hpp — the per-element and per-unit arithmetic of the
// guarded fused AdamW (gnmr/cuda/adamw.cuh), as plain C++.
//
// The CUDA kernel calls exactly these functions, so a CPU test can check the
// update against a double-precision AdamW and the GPU test can demand the
// same bits as a host replay. Every operation is a correctly rounded gnmr::fm
// operation (no FMA contraction), hence host == device.
//
// How a UnitDecision acts (docs/algorithm.md, Recovery):
//   kSkip          the unit's param and moments are not written at all, and
//                  its bias-correction step does not advance; a select, so a
//                  NaN gradient in a skipped unit never reaches anything;
//   kResetMoments  m = v = 0 before the update (a select, not a multiply,
//                  so NaN moments are cleared too) and the unit's step
//                  restarts at 1, as for a fresh optimizer;
//   scale          multiplies the gradient before both moments.
// Weight decay is decoupled (torch.optim.AdamW): p <- p*(1 - lr*wd) first.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "gnmr/config.hpp"
#include "gnmr/detail/check.hpp"
#include "gnmr/detail/norm_plan.hpp"
#include "gnmr/host/norms.hpp"
#include "gnmr/types.hpp"

namespace gnmr {

struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 1e-2f;
  std::string check() const {
    return detail::first_error(
        {detail::non_negative("AdamW", "lr", lr),
         detail::in_range_open_hi("AdamW", "beta1", beta1, 0.0f, 1.0f),
         detail::in_range_open_hi("AdamW", "beta2", beta2, 0.0f, 1.0f),
         detail::positive("AdamW", "eps", eps),
         detail::non_negative("AdamW", "weight_decay", weight_decay)});
  }
};

// One parameter tensor: fp32 master weights and moments, grads of any dtype.
struct AdamWTensor {
  float* param;
  const void* grad;
  float* exp_avg;
  float* exp_avg_sq;
  std::uint64_t numel;
  DType grad_dtype;
  std::uint32_t unit;  // whose UnitDecision applies
  // false: no weight decay on this tensor (biases, norm gains: PyTorch's
  // usual second parameter group), in the same launch as the others.
  bool weight_decay = true;
};

namespace detail {

// Per-unit optimizer state: the bias-correction step and beta^step as
// running double products (powf's last bit differs between libm and CUDA).
struct AdamWUnitState {
  std::int64_t step;
  double beta1_pow;
  double beta2_pow;
};
GNMR_HOST_DEVICE AdamWUnitState adamw_unit_init() { return AdamWUnitState{0, 1.0, 1.0}; }

GNMR_HOST_DEVICE double dsqrt(double x) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(x);
#else
  return std::sqrt(x);
#endif
}

// The unit's state after this step's decision.
GNMR_HOST_DEVICE AdamWUnitState adamw_advance(const AdamWParams& h, AdamWUnitState s,
                                              std::uint32_t flags) {
  if (flags & kSkip) return s;
  if (flags & kResetMoments) s = adamw_unit_init();
  s.step += 1;
  s.beta1_pow = fm::dmul(s.beta1_pow, static_cast<double>(h.beta1));
  s.beta2_pow = fm::dmul(s.beta2_pow, static_cast<double>(h.beta2));
  return s;
}

// Everything an element update needs, computed once per unit and step.
struct AdamWCoef {
  std::uint32_t flags;
  float scale;
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
  float step_size;  // lr / (1 - beta1^t)
  float bc2_sqrt;   // sqrt(1 - beta2^t)
  float decay;      // 1 - lr * wd
};

// s is the state *after* adamw_advance; lr may come from device memory.
GNMR_HOST_DEVICE AdamWCoef adamw_coef(const AdamWParams& h, float lr, const AdamWUnitState& s,
                                      UnitDecision d) {
  AdamWCoef c;
  c.flags = d.flags;
  c.scale = d.scale;
  c.beta1 = h.beta1;
  c.beta2 = h.beta2;
  c.one_minus_beta1 = fm::sub(1.0f, h.beta1);
  c.one_minus_beta2 = fm::sub(1.0f, h.beta2);
  c.eps = h.eps;
  const double bc1 = fm::dadd(1.0, -s.beta1_pow);
  const double bc2 = fm::dadd(1.0, -s.beta2_pow);
  c.step_size = static_cast<float>(fm::ddiv(static_cast<double>(lr), bc1));
  c.bc2_sqrt = static_cast<float>(dsqrt(bc2));
  c.decay = fm::sub(1.0f, fm::mul(lr, h.weight_decay));
  return c;
}

// One element. Callers skip the call (and every memory access) for kSkip;
// the check here keeps the function safe on its own.
GNMR_HOST_DEVICE void adamw_element(const AdamWCoef& c, float& p, float g_raw, float& m, float& v) {
  if (c.flags & kSkip) return;
  const bool reset = (c.flags & kResetMoments) != 0u;
  const float g = fm::mul(g_raw, c.scale);
  const float m0 = reset ? 0.0f : m;
  const float v0 = reset ? 0.0f : v;
  m = fm::add(fm::mul(c.beta1, m0), fm::mul(c.one_minus_beta1, g));
  v = fm::add(fm::mul(c.beta2, v0), fm::mul(fm::mul(c.one_minus_beta2, g), g));
  const float denom = fm::add(fm::div(fm::sqrt(v), c.bc2_sqrt), c.eps);
  p = fm::sub(fm::mul(p, c.decay), fm::mul(c.step_size, fm::div(m, denom)));
}

// ---- The plan: tensors cut into chunks, one block each ---------------------
constexpr std::uint32_t kAdamWThreads = 256;
constexpr std::uint64_t kDefaultAdamWChunk = 32768;

struct AdamWChunk {  // 48 bytes
  float* p;
  const void* g;
  float* m;
  float* v;
  std::uint32_t numel;
  std::uint32_t unit;
  std::uint32_t dtype;
  std::uint32_t no_decay;  // 1: the tensor has weight_decay = false
};

// A chunk's coefficients: its unit's, without the decay for a no-decay tensor
// (1 - lr * 0 is exactly 1: the same bits as a plan with weight_decay 0).
GNMR_HOST_DEVICE AdamWCoef chunk_coef(AdamWCoef k, const AdamWChunk& c) {
  if (c.no_decay) k.decay = 1.0f;
  return k;
}

struct AdamWLayout {
  std::vector<AdamWChunk> chunks;
  std::vector<std::uint32_t> unit_chunks;  // chunks per unit (0 for a unit with no tensor)
  std::uint64_t elements = 0;
  std::uint64_t bytes = 0;  // minimum traffic of one step: read p,g,m,v, write p,m,v
};

inline AdamWLayout build_adamw_layout(const AdamWTensor* t, std::size_t n, std::size_t num_units,
                                      std::uint64_t chunk_elems = kDefaultAdamWChunk) {
  const std::string f = "gnmr: AdamWPlan: ";
  if (num_units == 0 || num_units > 0x7fffffffu)
    throw std::invalid_argument(f + "num_units must be in [1, 2^31-1], got " + std::to_string(num_units));
  if (chunk_elems < 8 || chunk_elems % 8 != 0 || chunk_elems > (1ull << 30))
    throw std::invalid_argument(f + "chunk_elems must be a multiple of 8 in [8, 2^30], got " +
                                std::to_string(chunk_elems));
  if (t == nullptr && n != 0) throw std::invalid_argument(f + "null tensor array");
  AdamWLayout L;
  L.unit_chunks.assign(num_units, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const AdamWTensor& x = t[i];
    const std::string at = f + "tensor " + std::to_string(i);
    if (x.numel == 0) throw std::invalid_argument(at + " is empty (numel 0)");
    if (!x.param || !x.grad || !x.exp_avg || !x.exp_avg_sq)
      throw std::invalid_argument(at + " has a null pointer");
    const std::uint32_t dt = static_cast<std::uint32_t>(x.grad_dtype);
    if (dt > kDF16) throw std::invalid_argument(at + " has an unknown grad dtype");
    if (x.unit >= num_units)
      throw std::invalid_argument(at + " has unit " + std::to_string(x.unit) + ", but num_units is " +
                                  std::to_string(num_units));
    const std::uint32_t es = dtype_size(dt);
    if (reinterpret_cast<std::uintptr_t>(x.param) % 4 || reinterpret_cast<std::uintptr_t>(x.exp_avg) % 4 ||
        reinterpret_cast<std::uintptr_t>(x.exp_avg_sq) % 4 ||
        reinterpret_cast<std::uintptr_t>(x.grad) % es)
      throw std::invalid_argument(at + " is not aligned to its element size");
    for (std::uint64_t off = 0; off < x.numel; off += chunk_elems) {
      AdamWChunk c{};
      c.p = x.param + off;
      c.g = static_cast<const unsigned char*>(x.grad) + off * es;
      c.m = x.exp_avg + off;
      c.v = x.exp_avg_sq + off;
      c.numel = static_cast<std::uint32_t>(x.numel - off < chunk_elems ? x.numel - off : chunk_elems);
      c.unit = x.unit;
      c.dtype = dt;
      c.no_decay = x.weight_decay ? 0u : 1u;
      L.chunks.push_back(c);
      L.unit_chunks[x.unit] += 1;
    }
    L.elements += x.numel;
    L.bytes += x.numel * (24u + es);
  }
  if (L.chunks.size() > 0x7fffffffu) throw std::invalid_argument(f + "too many chunks: raise chunk_elems");
  return L;
}

GNMR_HOST_DEVICE float load_grad(const void* g, std::uint32_t dtype, std::uint32_t i) {
  switch (dtype) {
    case kDF32: return static_cast<const float*>(g)[i];
    case kDBF16: return ElemOps<kDBF16>::decode(static_cast<const std::uint16_t*>(g)[i]);
    default: return ElemOps<kDF16>::decode(static_cast<const std::uint16_t*>(g)[i]);
  }
}

// Host replay of one guarded step over a layout of host pointers: what the
// kernel writes, bit for bit. decisions may be null (unguarded);
// global_skip is the summary's skip_step when the kernel is given it.
inline void emulate_adamw_step(const AdamWLayout& L, const AdamWParams& h, float lr,
                               const UnitDecision* decisions, std::vector<AdamWUnitState>& units,
                               bool global_skip = false) {
  if (global_skip) return;
  std::vector<AdamWCoef> coef(units.size());
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (L.unit_chunks[u] == 0) continue;  // no block of the kernel touches it
    const UnitDecision d = decisions ? decisions[u] : UnitDecision{1.0f, 0u};
    units[u] = adamw_advance(h, units[u], d.flags);
    coef[u] = adamw_coef(h, lr, units[u], d);
  }
  for (const AdamWChunk& c : L.chunks) {
    const AdamWCoef k = chunk_coef(coef[c.unit], c);
    if (k.flags & kSkip) continue;
    for (std::uint32_t i = 0; i < c.numel; ++i) adamw_element(k, c.p[i], load_grad(c.g, c.dtype, i), c.m[i], c.v[i]);
  }
}

}  // namespace detail
}  // namespace gnmr
