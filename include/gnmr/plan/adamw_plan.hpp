// gnmr/plan/adamw_plan.hpp — the chunk plan of the guarded fused AdamW
// (gnmr/cuda/adamw.cuh, gnmr/host/adamw.hpp): every tensor cut into chunks
// of at most chunk_elems elements, one block each, built once on the host.
// The arithmetic per element is gnmr/optim/adamw.hpp's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "gnmr/core/dtype.hpp"
#include "gnmr/optim/adamw.hpp"
#include "gnmr/plan/norm_plan.hpp"

namespace gnmr {
namespace detail {

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
  check_chunk_elems(f, chunk_elems);
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
    // The weights, the gradient and the two moments are four distinct
    // buffers (the host loop is compiled with restrict pointers on that
    // promise, and an update in place of its own input is a caller's bug).
    {
      const auto lo = [](const void* q) { return reinterpret_cast<std::uintptr_t>(q); };
      const std::uintptr_t b[4] = {lo(x.param), lo(x.grad), lo(x.exp_avg), lo(x.exp_avg_sq)};
      const std::uintptr_t len[4] = {x.numel * 4u, x.numel * es, x.numel * 4u, x.numel * 4u};
      const char* name[4] = {"param", "grad", "exp_avg", "exp_avg_sq"};
      for (int a = 0; a < 4; ++a)
        for (int c = a + 1; c < 4; ++c)
          if (b[a] < b[c] + len[c] && b[c] < b[a] + len[a])
            throw std::invalid_argument(at + ": its " + name[a] + " and " + name[c] + " overlap");
    }
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

}  // namespace detail
}  // namespace gnmr
