// The host's fast order for bf16/fp16 sums of squares (HostOrder::kFast,
// the default; gnmr/host/block_sumsq.hpp, issue 32 part 1): the portable,
// AVX2 and AVX-512 builds give the same bits, whatever the address; they
// equal a reference written here from the documented order (64 fp32 lanes
// over blocks of 4,096, square then add, the double halving tree, double
// across blocks); host_unit_partials' default is that order; and the error
// stays within the bound docs/algorithm.md derives, against an exact
// (compensated double) reference on random values, subnormals, Inf/NaN and
// long segments.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gnmr/host/unit_norms.hpp"

#include "../support/sumsq16_values.hpp"

namespace {

using gnmr::DType;
using gnmr::Segment;
using gnmr::detail::BlockIsa;

using sumsq16::dec;
using sumsq16::enc;
// Values over many binades, with subnormals.
std::vector<std::uint16_t> random_values(std::mt19937_64& rng, std::size_t n, bool bf) {
  return sumsq16::random_values(rng, n, bf, true);
}

// The order as docs/algorithm.md states it, written out independently.
double reference_order(const std::uint16_t* p, std::uint64_t n, bool bf) {
  double total = 0.0;
  for (std::uint64_t b = 0; b < n; b += 4096) {
    const std::uint64_t len = n - b < 4096 ? n - b : 4096;
    float lane[64] = {};
    for (std::uint64_t j = 0; j < len; ++j) {
      const float x = dec(p[b + j], bf);
      const float sq = x * x;  // rounded square (the build has no FP contraction)
      lane[j % 64] = lane[j % 64] + sq;
    }
    double d[64];
    for (int l = 0; l < 64; ++l) d[l] = lane[l];
    for (int w = 32; w >= 1; w /= 2)
      for (int l = 0; l < w; ++l) d[l] = d[l] + d[l + w];
    total = total + d[0];
  }
  return total;
}

bool same(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0 || (a != a && b != b); }

}  // namespace

TEST_CASE("fast order: every build, every address, the documented order, bit for bit", "[norms][fast-order]") {
  std::mt19937_64 rng(11);
  for (bool bf : {true, false}) {
    for (std::size_t n : {1ul, 7ul, 63ul, 64ul, 65ul, 127ul, 4095ul, 4096ul, 4097ul, 8191ul, 70001ul}) {
      const auto v = random_values(rng, n, bf);
      const double want = reference_order(v.data(), n, bf);
      for (std::size_t shift = 0; shift < 8; ++shift) {
        std::vector<std::uint16_t> buf(n + 8, 0xffff);  // the values at another address
        std::memcpy(buf.data() + shift, v.data(), n * sizeof(std::uint16_t));
        const std::uint16_t* p = buf.data() + shift;
        INFO("bf16 " << bf << " n " << n << " shift " << shift);
        for (BlockIsa isa : {BlockIsa::kPortable, BlockIsa::kAvx2, BlockIsa::kAvx512})
          CHECK(same(gnmr::detail::sumsq16_fast(p, n, bf, isa), want));
      }
    }
    // Inf and NaN on every build.
    std::vector<std::uint16_t> v(9000, enc(0.5f, bf));
    v[4500] = bf ? 0x7f80 : 0x7c00;
    for (BlockIsa isa : {BlockIsa::kPortable, BlockIsa::kAvx2, BlockIsa::kAvx512})
      CHECK(std::isinf(gnmr::detail::sumsq16_fast(v.data(), v.size(), bf, isa)));
    v[17] = bf ? 0x7fc0 : 0x7e00;
    for (BlockIsa isa : {BlockIsa::kPortable, BlockIsa::kAvx2, BlockIsa::kAvx512})
      CHECK(std::isnan(gnmr::detail::sumsq16_fast(v.data(), v.size(), bf, isa)));
  }
}

TEST_CASE("fast order: host_unit_partials' default, units summed in double in segment order", "[norms][fast-order]") {
  std::mt19937_64 rng(12);
  const auto a = random_values(rng, 100000, true);
  const auto b = random_values(rng, 5000, false);
  std::vector<float> f(3000, 0.125f);
  const std::vector<Segment> segs = {{a.data(), a.size(), DType::kBF16, 0}, {f.data(), f.size(), DType::kF32, 1},
                                     {b.data(), b.size(), DType::kF16, 0}, {a.data() + 3, 999, DType::kBF16, 1}};
  std::vector<float> p(2), k(2);
  gnmr::host_unit_partials(segs, p);
  const double u0 = reference_order(a.data(), a.size(), true) + reference_order(b.data(), b.size(), false);
  const double u1 = gnmr::detail::sumsq_f32(f.data(), f.size()) + reference_order(a.data() + 3, 999, true);
  CHECK(p[0] == gnmr::detail::to_float_rn(u0));
  CHECK(p[1] == gnmr::detail::to_float_rn(u1));
  gnmr::HostNormOptions o;
  o.order = gnmr::HostOrder::kFast;
  gnmr::host_unit_partials(segs, k, o);
  CHECK(std::memcmp(p.data(), k.data(), sizeof(float) * 2) == 0);
  o.order = gnmr::HostOrder::kKernel;  // the other order: close, not (in general) the same bits
  gnmr::host_unit_partials(segs, k, o);
  CHECK(std::fabs(k[0] - p[0]) <= 1e-5f * p[0]);
}

TEST_CASE("fast order: within the derived bound of the exact sum", "[norms][fast-order]") {
  // docs/algorithm.md, "Norms on the host": relative error at most
  // gamma_64 + (6 + b) 2^-53 (b blocks) before the final rounding (u / 2).
  const double u = std::ldexp(1.0, -24);
  std::mt19937_64 rng(13);
  for (bool bf : {true, false}) {
    for (std::size_t n : {100ul, 70000ul, 1000000ul, 5000000ul}) {
      const auto v = random_values(rng, n, bf);
      const double exact = sumsq16::exact_sumsq(v, bf);
      const double blocks = std::ceil(static_cast<double>(n) / 4096.0);
      const double e = std::ldexp(1.0, -53);
      const double bound = 64 * u / (1 - 64 * u) + (6 + blocks) * e / (1 - (6 + blocks) * e);
      const double got = gnmr::detail::sumsq16_fast(v.data(), n, bf);
      INFO("bf16 " << bf << " n " << n << " rel err " << std::fabs(got - exact) / exact << " bound " << bound);
      // + each square's underflow (a bf16 subnormal squares to 0 in fp32): < 2^-149 a term
      CHECK(std::fabs(got - exact) <= bound * exact + static_cast<double>(n) * std::ldexp(1.0, -149));
      Segment s{v.data(), n, bf ? DType::kBF16 : DType::kF16, 0};
      float unit = 0;
      gnmr::host_unit_partials<gnmr::L2Norm>(&s, 1, &unit, 1);
      CHECK(std::fabs(static_cast<double>(unit) - exact) <=
            (bound + u / 2 + bound * u) * exact + static_cast<double>(n) * std::ldexp(1.0, -149));
    }
  }
  // All-subnormal bf16: every square underflows to 0.
  std::vector<std::uint16_t> sub(5000, 0x0001);
  CHECK(gnmr::detail::sumsq16_fast(sub.data(), sub.size(), true) == 0.0);
}
