// CPU checks of the CUDA norm kernel's logic (gnmr/plan/norm_plan.hpp):
// the chunk plan, and the kernel's exact reduction order replayed on the
// host against independent double-precision references. The GPU test
// (tests/cuda) then only has to show that the device produces these bits.
#include "gnmr/plan/norm_plan.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "gnmr/core/half.hpp"
#include "gnmr/host/unit_norms.hpp"
#include "gnmr/policy/norm.hpp"
#include "../reference/unit_partials.hpp"

namespace {

using gnmr::DType;
using gnmr::Segment;
using gnmr::detail::NormLayout;

// A norm whose every element counts 1: its partial is the number of
// elements the schedule visited, exactly (per-thread counts stay < 2^24).
struct CountNorm {
  [[maybe_unused]] static constexpr const char* kName = "count";
  static constexpr gnmr::Combine kCombine = gnmr::Combine::kSum;
  static float identity() { return 0.0f; }
  static float element(float) { return 1.0f; }
  static float combine(float a, float b) { return gnmr::math::add(a, b); }
};

// 16-byte aligned host storage with a chosen element offset, so that a
// segment can start at any address modulo 16.
struct Buffer {
  std::vector<unsigned char> raw;
  void* data = nullptr;
  Buffer(std::size_t bytes, std::size_t offset_bytes) : raw(bytes + offset_bytes + 32) {
    std::uintptr_t a = reinterpret_cast<std::uintptr_t>(raw.data());
    a = (a + 15u) & ~static_cast<std::uintptr_t>(15u);
    data = reinterpret_cast<void*>(a + offset_bytes);
  }
};

struct Tensor {
  Buffer buf;
  std::vector<double> values;  // exact values of the stored elements
  DType dtype;
};

std::size_t esize(DType d) { return d == DType::kF32 ? 4 : 2; }

Tensor make_tensor(std::mt19937_64& rng, std::size_t n, DType d, std::size_t offset_elems, double scale = 1.0) {
  Tensor t{Buffer(n * esize(d), offset_elems * esize(d)), std::vector<double>(n), d};
  std::normal_distribution<float> dist(0.0f, static_cast<float>(scale));
  for (std::size_t i = 0; i < n; ++i) {
    const float x = dist(rng);
    if (d == DType::kF32) {
      static_cast<float*>(t.buf.data)[i] = x;
      t.values[i] = x;
    } else if (d == DType::kBF16) {
      const std::uint16_t h = gnmr::float_to_bf16(x);
      static_cast<std::uint16_t*>(t.buf.data)[i] = h;
      t.values[i] = gnmr::bf16_to_float(h);
    } else {
      const std::uint16_t h = gnmr::float_to_fp16(x);
      static_cast<std::uint16_t*>(t.buf.data)[i] = h;
      t.values[i] = gnmr::fp16_to_float(h);
    }
  }
  return t;
}

}  // namespace

TEST_CASE("norm plan: chunks grouped by unit, in segment order, covering every element",
          "[cuda-logic][norms]") {
  std::vector<float> a(100), b(20), c(17);
  const std::vector<Segment> segs = {{a.data(), 100, DType::kF32, 1},
                                     {b.data(), 20, DType::kF32, 0},
                                     {c.data(), 17, DType::kF32, 1}};
  const NormLayout L = gnmr::detail::build_norm_layout(segs.data(), segs.size(), 2, 16);
  // unit 0: ceil(20/16) = 2 chunks; unit 1: ceil(100/16) + ceil(17/16) = 7 + 2.
  REQUIRE(L.unit_begin == std::vector<std::uint32_t>{0, 2, 11});
  REQUIRE(L.chunks.size() == 11);
  CHECK(L.chunks[0].data == b.data());
  CHECK(L.chunks[0].numel == 16);
  CHECK(L.chunks[1].data == b.data() + 16);
  CHECK(L.chunks[1].numel == 4);
  CHECK(L.chunks[2].data == a.data());
  CHECK(L.chunks[8].data == a.data() + 96);
  CHECK(L.chunks[8].numel == 4);
  CHECK(L.chunks[9].data == c.data());
  CHECK(L.chunks[10].numel == 1);
  for (std::size_t i = 0; i < 2; ++i) CHECK(L.chunks[i].unit == 0u);
  for (std::size_t i = 2; i < 11; ++i) CHECK(L.chunks[i].unit == 1u);
  CHECK(L.elements == 137u);
  CHECK(L.bytes == 137u * 4u);
}

TEST_CASE("norm plan: bad layouts are rejected with a clear error", "[cuda-logic][norms]") {
  std::vector<float> a(64);
  std::vector<std::uint16_t> h(64);
  using gnmr::detail::build_norm_layout;
  const Segment ok{a.data(), 64, DType::kF32, 0};
  CHECK_NOTHROW(build_norm_layout(&ok, 1, 1));
  const Segment empty{a.data(), 0, DType::kF32, 0};
  CHECK_THROWS_AS(build_norm_layout(&empty, 1, 1), std::invalid_argument);
  const Segment null{nullptr, 4, DType::kF32, 0};
  CHECK_THROWS_AS(build_norm_layout(&null, 1, 1), std::invalid_argument);
  const Segment far{a.data(), 4, DType::kF32, 3};
  CHECK_THROWS_AS(build_norm_layout(&far, 1, 2), std::invalid_argument);
  CHECK_THROWS_AS(build_norm_layout(&ok, 1, 2), std::invalid_argument);  // unit 1 uncovered
  CHECK_THROWS_AS(build_norm_layout(&ok, 1, 0), std::invalid_argument);
  const Segment mis{reinterpret_cast<const unsigned char*>(a.data()) + 2, 4, DType::kF32, 0};
  CHECK_THROWS_AS(build_norm_layout(&mis, 1, 1), std::invalid_argument);
  const Segment mis16{reinterpret_cast<const unsigned char*>(h.data()) + 1, 4, DType::kBF16, 0};
  CHECK_THROWS_AS(build_norm_layout(&mis16, 1, 1), std::invalid_argument);
  CHECK_THROWS_AS(build_norm_layout(&ok, 1, 1, 12), std::invalid_argument);  // not a multiple of 8
  CHECK_THROWS_AS(build_norm_layout(&ok, 1, 1, 0), std::invalid_argument);
  const Segment bad_dtype{a.data(), 4, static_cast<DType>(7), 0};
  CHECK_THROWS_AS(build_norm_layout(&bad_dtype, 1, 1), std::invalid_argument);
}

TEST_CASE("norm kernel schedule visits every element exactly once", "[cuda-logic][norms]") {
  // Sizes around the vector width, the block width and the unroll depth,
  // at every start address modulo 16.
  const std::vector<std::size_t> sizes = {1, 3, 7, 8, 9, 255, 256, 1024, 4095, 4096, 4097,
                                          8191, 16384, 16385, 65536, 65543, 100003};
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    const std::size_t max_off = 16 / esize(d);
    for (std::size_t n : sizes) {
      for (std::size_t off = 0; off < max_off; ++off) {
        Buffer buf(n * esize(d), off * esize(d));
        std::memset(buf.data, 0, n * esize(d));
        const Segment s{buf.data, n, d, 0};
        for (std::uint64_t chunk : {std::uint64_t{8}, std::uint64_t{4096}, std::uint64_t{65536}}) {
          if (n / chunk > 64) continue;  // keep the emulation cheap
          const NormLayout L = gnmr::detail::build_norm_layout(&s, 1, 1, chunk);
          const std::vector<float> p = gnmr::reference::emulate_unit_partials<CountNorm>(L);
          INFO("dtype " << gnmr::dtype_name(d) << " n " << n << " offset " << off << " chunk " << chunk);
          REQUIRE(p[0] == static_cast<float>(n));
        }
      }
    }
  }
}

TEST_CASE("emulated norm kernel matches a double reference for every dtype", "[cuda-logic][norms]") {
  std::mt19937_64 rng(20261122);
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    // Three units: several segments with odd sizes and start addresses, one
    // large segment split into many chunks, one tiny segment.
    std::vector<Tensor> ts;
    ts.push_back(make_tensor(rng, 70001, d, 1, 0.5));
    ts.push_back(make_tensor(rng, 333, d, 3));
    ts.push_back(make_tensor(rng, 300000, d, 0, 2.0));
    ts.push_back(make_tensor(rng, 5, d, 2));
    ts.push_back(make_tensor(rng, 65536, d, 0, 0.01));
    const std::vector<std::uint32_t> unit = {0, 0, 1, 2, 0};
    std::vector<Segment> segs;
    for (std::size_t i = 0; i < ts.size(); ++i) segs.push_back({ts[i].buf.data, ts[i].values.size(), d, unit[i]});
    std::vector<double> ref2(3, 0.0), refmax(3, 0.0);
    for (std::size_t i = 0; i < ts.size(); ++i)
      for (double x : ts[i].values) {
        ref2[unit[i]] += x * x;
        refmax[unit[i]] = std::max(refmax[unit[i]], std::fabs(x));
      }
    for (std::uint64_t chunk : {std::uint64_t{8192}, std::uint64_t{65536}}) {
      const NormLayout L = gnmr::detail::build_norm_layout(segs.data(), segs.size(), 3, chunk);
      const std::vector<float> l2 = gnmr::reference::emulate_unit_partials<gnmr::L2Norm>(L);
      const std::vector<float> inf = gnmr::reference::emulate_unit_partials<gnmr::LinfNorm>(L);
      const std::vector<float> host = gnmr::host_unit_partials<gnmr::L2Norm>(segs, 3);
      for (std::size_t u = 0; u < 3; ++u) {
        INFO("dtype " << gnmr::dtype_name(d) << " chunk " << chunk << " unit " << u);
        CHECK(std::fabs(l2[u] - ref2[u]) <= 1e-5 * ref2[u]);  // < 80 sequential fp32 adds per path
        CHECK(std::fabs(l2[u] - host[u]) <= 1e-5 * ref2[u]);
        CHECK(static_cast<double>(inf[u]) == refmax[u]);  // max is exact
      }
    }
  }
}

TEST_CASE("emulated norm kernel propagates NaN and Inf to the unit's partial", "[cuda-logic][norms]") {
  std::mt19937_64 rng(7);
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    Tensor a = make_tensor(rng, 200000, d, 0);
    Tensor b = make_tensor(rng, 200000, d, 1);
    Tensor c = make_tensor(rng, 1000, d, 0);
    const auto poke = [d](Tensor& t, std::size_t i, float x) {
      if (d == DType::kF32)
        static_cast<float*>(t.buf.data)[i] = x;
      else if (d == DType::kBF16)
        static_cast<std::uint16_t*>(t.buf.data)[i] = gnmr::float_to_bf16(x);
      else
        static_cast<std::uint16_t*>(t.buf.data)[i] = gnmr::float_to_fp16(x);
    };
    poke(a, 123457, gnmr::nan_f());   // in the body of a middle chunk
    poke(b, 199999, -gnmr::inf_f());  // last element: the tail
    const std::vector<Segment> segs = {{a.buf.data, 200000, d, 0}, {b.buf.data, 200000, d, 1},
                                       {c.buf.data, 1000, d, 2}};
    const NormLayout L = gnmr::detail::build_norm_layout(segs.data(), segs.size(), 3);
    const std::vector<float> l2 = gnmr::reference::emulate_unit_partials<gnmr::L2Norm>(L);
    const std::vector<float> inf = gnmr::reference::emulate_unit_partials<gnmr::LinfNorm>(L);
    INFO("dtype " << gnmr::dtype_name(d));
    CHECK(gnmr::is_nan(l2[0]));
    CHECK(gnmr::is_nan(inf[0]));
    CHECK(l2[1] == gnmr::inf_f());
    CHECK(inf[1] == gnmr::inf_f());
    CHECK(gnmr::is_finite(l2[2]));
    CHECK(gnmr::is_finite(inf[2]));
  }
}

TEST_CASE("the unit fold rounds an overflowing double sum to +Inf", "[cuda-logic][norms]") {
  using F = gnmr::detail::UnitFold<gnmr::L2Norm>;
  double a = F::identity();
  a = F::add(a, 3.0e38f);
  a = F::add(a, 3.0e38f);
  CHECK(F::finish(a) == gnmr::inf_f());
  CHECK(F::finish(1.5) == 1.5f);
}
