// CPU checks of the no-extra-pass norms (gnmr/cuda/fused_partials.cuh): a
// framework's own pass over the gradients (here the example's AMP
// unscale-and-check, examples/unscale_check.hpp) deposits the chunk
// partials with the same functors the device runs, replayed on the host
// thread by thread (tests/reference/unit_partials.hpp). The per-unit
// partials must be NormPlan's over the transformed gradients bit for bit,
// the transformed gradients the correctly rounded x * inv_scale, and both
// within rounding of a double reference; every output slot is poisoned
// first.
#include "gnmr/plan/norm_plan.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "../../examples/unscale_check.hpp"
#include "../reference/unit_partials.hpp"
#include "gnmr/core/half.hpp"
#include "gnmr/policy/norm.hpp"

namespace {

using gnmr::DType;
using gnmr::Segment;
using gnmr::detail::NormLayout;

// 16-byte aligned host storage starting `offset` floats past the boundary.
struct Floats {
  std::vector<unsigned char> raw;
  float* data;
  Floats(std::size_t n, std::size_t offset) : raw((n + offset) * 4 + 32) {
    std::uintptr_t a = reinterpret_cast<std::uintptr_t>(raw.data());
    a = (a + 15u) & ~static_cast<std::uintptr_t>(15u);
    data = reinterpret_cast<float*>(a) + offset;
  }
};

std::uint32_t bits(float x) { return gnmr::detail::float_to_bits(x); }

struct Case {
  std::vector<std::size_t> sizes, offsets;
  std::vector<std::uint32_t> units;
  std::size_t num_units;
  std::uint64_t chunk;
};

// Runs one case: the fused pass on one copy, unscale then NormPlan's
// emulation on another; returns the fused partials.
std::vector<float> run_case(const Case& k, std::uint64_t seed, float inv, bool poison_input,
                            unsigned int& found) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<Floats> a, b;
  std::vector<Segment> sa, sb;
  std::vector<std::vector<double>> exact;
  for (std::size_t i = 0; i < k.sizes.size(); ++i) {
    a.emplace_back(k.sizes[i], k.offsets[i]);
    b.emplace_back(k.sizes[i], k.offsets[i]);
  }
  for (std::size_t i = 0; i < k.sizes.size(); ++i) {
    exact.emplace_back();
    for (std::size_t j = 0; j < k.sizes[i]; ++j) {
      const float x = nd(rng) * 512.0f;
      a[i].data[j] = b[i].data[j] = x;
      exact.back().push_back(static_cast<double>(x) * inv);
    }
    if (poison_input && i == 1) a[i].data[k.sizes[i] / 2] = b[i].data[k.sizes[i] / 2] = gnmr::inf_f();
    sa.push_back({a[i].data, k.sizes[i], DType::kF32, k.units[i]});
    sb.push_back({b[i].data, k.sizes[i], DType::kF32, k.units[i]});
  }
  const NormLayout La = gnmr::detail::build_norm_layout(sa.data(), sa.size(), k.num_units, k.chunk);
  const NormLayout Lb = gnmr::detail::build_norm_layout(sb.data(), sb.size(), k.num_units, k.chunk);
  // The framework's pass with the deposit, into a poisoned chunk table.
  found = 0;
  const example::UnscaleCheck xf{inv, &found};
  std::vector<float> cp(La.chunks.size(), gnmr::nan_f());
  for (std::size_t c = 0; c < La.chunks.size(); ++c)
    cp[c] = gnmr::reference::emulate_deposit_chunk_partial<gnmr::L2Norm>(La.chunks[c], xf);
  std::vector<float> fused = gnmr::reference::emulate_fold<gnmr::L2Norm>(La, cp);
  // Today's path: the unscale pass, then NormPlan reads the result again.
  unsigned int found_b = 0;
  for (std::size_t i = 0; i < sb.size(); ++i)
    for (std::size_t j = 0; j < k.sizes[i]; ++j) b[i].data[j] = example::UnscaleCheck{inv, &found_b}.one(b[i].data[j]);
  const std::vector<float> twice = gnmr::reference::emulate_unit_partials<gnmr::L2Norm>(Lb);
  // The gradients the fused pass left are today's, bit for bit.
  for (std::size_t i = 0; i < sa.size(); ++i)
    for (std::size_t j = 0; j < k.sizes[i]; ++j) {
      INFO("segment " << i << " element " << j);
      REQUIRE(bits(a[i].data[j]) == bits(b[i].data[j]));
    }
  REQUIRE(found == found_b);
  REQUIRE(fused.size() == twice.size());
  for (std::size_t u = 0; u < fused.size(); ++u) {
    INFO("unit " << u);
    REQUIRE(bits(fused[u]) == bits(twice[u]));
  }
  // Against a double reference (finite inputs): within fp32 accumulation error.
  if (!poison_input) {
    std::vector<double> ref(k.num_units, 0.0);
    for (std::size_t i = 0; i < sa.size(); ++i)
      for (double x : exact[i]) {
        const double r = static_cast<double>(static_cast<float>(x));  // the stored, rounded value
        ref[k.units[i]] += r * r;
      }
    for (std::size_t u = 0; u < fused.size(); ++u) {
      INFO("unit " << u << " fused " << fused[u] << " ref " << ref[u]);
      REQUIRE(std::fabs(fused[u] - ref[u]) <= 1e-5 * ref[u]);
    }
  }
  return fused;
}

}  // namespace

TEST_CASE("fused norms: a framework's unscale pass deposits NormPlan's partials, bit for bit",
          "[cuda-logic][fused]") {
  // Odd lengths, every start address modulo 16, several units per tensor
  // and tensors per unit, chunk sizes that cut tensors mid-way.
  const std::vector<Case> cases = {
      {{1}, {0}, {0}, 1, 65536},
      {{7, 8, 9}, {1, 2, 3}, {0, 1, 0}, 2, 8},
      {{4097, 255, 100003}, {3, 0, 1}, {1, 0, 1}, 2, 4096},
      {{65543, 16385, 3, 8191}, {2, 1, 3, 0}, {0, 2, 1, 2}, 3, 65536},
      {{300000}, {1}, {0}, 1, 1024},
  };
  for (std::size_t i = 0; i < cases.size(); ++i)
    for (float inv : {1.0f / 65536.0f, 1.0f / 3.0f, 0.7f}) {
      INFO("case " << i << " inv_scale " << inv);
      unsigned int found = 9;
      run_case(cases[i], 100 + i, inv, false, found);
      CHECK(found == 0u);
    }
}

TEST_CASE("fused norms: a non-finite gradient is found and poisons only its unit",
          "[cuda-logic][fused]") {
  const Case k{{4097, 1000, 33}, {1, 2, 0}, {0, 1, 2}, 3, 1024};
  unsigned int found = 0;
  const std::vector<float> p = run_case(k, 7, 1.0f / 1024.0f, true, found);
  CHECK(found == 1u);
  CHECK(std::isinf(p[1]));  // segment 1 (unit 1) holds the Inf
  CHECK(std::isfinite(p[0]));
  CHECK(std::isfinite(p[2]));
}
