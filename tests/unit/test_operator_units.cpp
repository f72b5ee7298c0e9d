// One operator = one unit (docs/algorithm.md, Precision promotion): a linear
// layer's weight and bias, or the q/k/v/o GEMM weights of an attention
// layer, are several Segments with the same unit index, so the unit's norm
// is that of all its parameters together and one decision (one promotion)
// covers the operator. Checked against a long-double reference of the
// decoded elements, for the host partials and for the CUDA kernel's exact
// order (emulated on the CPU), with mixed dtypes, segments of different units
// interleaved, poisoned outputs and a NaN that must poison its operator only.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gnmr/host/controller.hpp"
#include "gnmr/host/unit_norms.hpp"
#include "gnmr/plan/norm_plan.hpp"
#include "../reference/unit_partials.hpp"

namespace {

using gnmr::DType;
using gnmr::Segment;

// A tensor in one of the gradient dtypes, with the exact value of each
// element as the reference sees it (decoded independently of gnmr: bf16 is
// the top half of a float, fp16 by its fields).
struct Tensor {
  DType dtype;
  std::vector<float> f32;
  std::vector<std::uint16_t> h16;
  std::vector<long double> exact;

  Tensor(DType d, std::size_t n, double sd, std::mt19937_64& rng) : dtype(d) {
    std::normal_distribution<float> nd(0.0f, static_cast<float>(sd));
    for (std::size_t i = 0; i < n; ++i) {
      const float x = nd(rng);
      if (d == DType::kF32) {
        f32.push_back(x);
        exact.push_back(x);
      } else {
        const std::uint16_t b = d == DType::kBF16 ? gnmr::float_to_bf16(x) : gnmr::float_to_fp16(x);
        h16.push_back(b);
        exact.push_back(decode(b, d));
      }
    }
  }
  static long double decode(std::uint16_t b, DType d) {
    if (d == DType::kBF16) {
      const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
    const int e = (b >> 10) & 0x1f, m = b & 0x3ff;
    const long double v = e == 0 ? std::ldexp(static_cast<long double>(m), -24)
                                 : std::ldexp(static_cast<long double>(1024 + m), e - 25);
    return (b & 0x8000u) ? -v : v;
  }
  const void* data() const { return dtype == DType::kF32 ? static_cast<const void*>(f32.data()) : h16.data(); }
  std::size_t size() const { return exact.size(); }
  Segment seg(std::uint32_t unit) const { return Segment{data(), size(), dtype, unit}; }
  void poison(std::size_t i) {
    if (dtype == DType::kF32) f32[i] = std::numeric_limits<float>::quiet_NaN();
    else h16[i] = dtype == DType::kBF16 ? 0x7fc0u : 0x7e00u;  // quiet NaN
    exact[i] = std::numeric_limits<long double>::quiet_NaN();
  }
};

long double sumsq(const std::vector<const Tensor*>& ts) {
  long double s = 0.0L;
  for (const Tensor* t : ts)
    for (long double x : t->exact) s += x * x;
  return s;
}

bool close(float got, long double want, double rel) {
  if (std::isnan(static_cast<double>(want))) return std::isnan(got);
  return std::fabs(static_cast<long double>(got) - want) <= rel * want;
}

}  // namespace

TEST_CASE("an operator's weight and bias are one unit: partials of the segments together",
          "[norms][promotion]") {
  std::mt19937_64 rng(77);
  // unit 0: linear 64 -> 96, fp32 weight and bias
  // unit 1: linear 96 -> 40, bf16 weight, fp32 bias (a mixed-precision layer)
  // unit 2: attention projections q, k, v, o (fp16, 48 x 48 each) and no bias
  // unit 3: a LayerNorm's gain and bias (bf16), a unit of its own
  Tensor w0(DType::kF32, 64 * 96, 0.05, rng), b0(DType::kF32, 96, 0.5, rng);
  Tensor w1(DType::kBF16, 96 * 40, 0.02, rng), b1(DType::kF32, 40, 0.3, rng);
  Tensor q(DType::kF16, 48 * 48, 0.01, rng), k(DType::kF16, 48 * 48, 0.02, rng), v(DType::kF16, 48 * 48, 0.03, rng),
      o(DType::kF16, 48 * 48, 0.04, rng);
  Tensor g3(DType::kBF16, 48, 1.0, rng), b3(DType::kBF16, 48, 0.1, rng);
  // Segments in the order a framework lists its parameters: the units interleave.
  std::vector<Segment> segs = {w0.seg(0), w1.seg(1), q.seg(2), b0.seg(0), k.seg(2), g3.seg(3),
                               v.seg(2),  b1.seg(1), o.seg(2), b3.seg(3)};
  const std::vector<std::vector<const Tensor*>> units = {{&w0, &b0}, {&w1, &b1}, {&q, &k, &v, &o}, {&g3, &b3}};

  SECTION("host partials, and the norm the controller judges") {
    std::vector<float> partials(4, std::numeric_limits<float>::quiet_NaN());  // poisoned
    gnmr::host_unit_partials(segs, partials);
    for (std::size_t u = 0; u < 4; ++u) {
      INFO("unit " << u);
      const long double want = sumsq(units[u]);
      CHECK(close(partials[u], want, 1e-7));  // one rounding of a double sum
      // Not the weight's alone: the bias (or the other projections) count.
      CHECK_FALSE(close(partials[u], sumsq({units[u][0]}), 1e-4));
    }
    gnmr::GnmrController<> c(4);
    c.step(partials);
    for (std::size_t u = 0; u < 4; ++u)
      CHECK(close(c.reports()[u].norm, std::sqrt(sumsq(units[u])), 1e-6));
    // RmsNorm divides by every element of the operator.
    const std::vector<std::uint64_t> numel = gnmr::unit_numel(segs, 4);
    CHECK(numel == std::vector<std::uint64_t>{64 * 96 + 96, 96 * 40 + 40, 4 * 48 * 48, 96});
  }

  SECTION("the CUDA kernel's order (emulated), chunks cutting through the weights") {
    for (std::uint64_t chunk : {std::uint64_t{64}, std::uint64_t{1024}, std::uint64_t{65536}}) {
      INFO("chunk " << chunk);
      const auto L = gnmr::detail::build_norm_layout(segs.data(), segs.size(), 4, chunk);
      // Chunks are grouped by unit: every chunk of unit u lies in one of its segments.
      for (std::size_t u = 0; u < 4; ++u)
        for (std::uint32_t c = L.unit_begin[u]; c < L.unit_begin[u + 1]; ++c) REQUIRE(L.chunks[c].unit == u);
      const std::vector<float> p = gnmr::reference::emulate_unit_partials<gnmr::L2Norm>(L);
      for (std::size_t u = 0; u < 4; ++u) {
        INFO("unit " << u);
        CHECK(close(p[u], sumsq(units[u]), 1e-5));  // fp32 inside a chunk, double across
      }
    }
  }

  SECTION("a NaN in a bias poisons its operator, and only that one") {
    b1.poison(7);
    segs[7] = b1.seg(1);
    std::vector<float> partials(4, 0.0f);
    gnmr::host_unit_partials(segs, partials);
    CHECK(std::isnan(partials[1]));
    const auto L = gnmr::detail::build_norm_layout(segs.data(), segs.size(), 4, 64);
    const std::vector<float> p = gnmr::reference::emulate_unit_partials<gnmr::L2Norm>(L);
    CHECK(std::isnan(p[1]));
    for (std::size_t u : {0, 2, 3}) {
      CHECK(close(partials[u], sumsq(units[u]), 1e-7));
      CHECK(close(p[u], sumsq(units[u]), 1e-5));
    }
    // The controller then skips the whole layer: weight and bias alike.
    gnmr::GnmrController<> c(4);
    c.step(partials);
    CHECK((c.decisions()[1].flags & gnmr::kSkip) != 0u);
    CHECK((c.decisions()[0].flags & gnmr::kSkip) == 0u);
  }
}
