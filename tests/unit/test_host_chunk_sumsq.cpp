// Host bf16/fp16 sums of squares in the CUDA kernel's order (HostOrder::kKernel)
// (gnmr/host/chunk_sumsq.hpp, issue 32): host_unit_partials against the
// kernel's host replay (tests/reference/unit_partials.hpp) bit for bit, the
// portable, AVX2 and AVX-512 builds against each other, and the error bound
// of docs/algorithm.md against a double reference on random inputs,
// subnormals, Inf/NaN and long segments.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gnmr/host/unit_norms.hpp"

#include "../reference/unit_partials.hpp"
#include "../support/sumsq16_values.hpp"

namespace {

using gnmr::DType;
using gnmr::Segment;
using gnmr::detail::ChunkIsa;

using sumsq16::dec;
using sumsq16::enc;
using sumsq16::random_values;

// HostOrder::kKernel: the order this file tests (the default, kFast, is
// tests/unit/test_host_block_sumsq.cpp's).
gnmr::HostNormOptions kernel_order() {
  gnmr::HostNormOptions o;
  o.order = gnmr::HostOrder::kKernel;
  return o;
}
const gnmr::HostNormOptions kKernelOrder = kernel_order();

}  // namespace

TEST_CASE("host bf16/fp16 partials are the CUDA kernel's, bit for bit", "[norms][chunk-order]") {
  std::mt19937_64 rng(42);
  for (bool bf : {true, false}) {
    for (int trial = 0; trial < 6; ++trial) {
      // segments of random length and address mod 16, several per unit,
      // units interleaved in the segment list
      const std::size_t units = 5;
      std::vector<std::vector<std::uint16_t>> bufs;
      std::vector<Segment> segs;
      std::uniform_int_distribution<int> len(1, trial < 3 ? 5000 : 300000);
      for (std::size_t i = 0; i < 12; ++i) {
        const std::size_t n = static_cast<std::size_t>(len(rng));
        const std::size_t shift = rng() % 8;  // 0..7 elements: every 16-byte misalignment
        bufs.push_back(random_values(rng, n + 8, bf, true));
        segs.push_back(Segment{bufs.back().data() + shift, n, bf ? DType::kBF16 : DType::kF16,
                               static_cast<std::uint32_t>(i % units)});
      }
      std::vector<float> host(units);
      gnmr::host_unit_partials<gnmr::L2Norm>(segs.data(), segs.size(), host.data(), units, kKernelOrder);
      const auto L = gnmr::detail::build_norm_layout(segs.data(), segs.size(), units);
      const std::vector<float> dev = gnmr::reference::emulate_unit_partials<gnmr::L2Norm>(L);
      for (std::size_t u = 0; u < units; ++u) {
        INFO("bf16 " << bf << " trial " << trial << " unit " << u);
        std::uint32_t a, b;
        std::memcpy(&a, &host[u], 4);
        std::memcpy(&b, &dev[u], 4);
        CHECK(a == b);
      }
    }
  }
}

TEST_CASE("every build of the chunk sum gives the same bits", "[norms][chunk-order]") {
  std::mt19937_64 rng(7);
  for (bool bf : {true, false}) {
    for (std::size_t n : {1ul, 7ul, 8ul, 9ul, 15ul, 16ul, 17ul, 2047ul, 2048ul, 2056ul, 4100ul, 65536ul}) {
      for (std::size_t shift = 0; shift < 8; ++shift) {
        auto v = random_values(rng, n + 8, bf, true);
        if (n > 100 && shift == 3) v[shift + n / 4] = bf ? 0x7f80 : 0x7c00;  // +Inf
        const std::uint16_t* p = v.data() + shift;
        const float a = gnmr::detail::chunk_sumsq16(p, n, bf, ChunkIsa::kPortable);
        const float b = gnmr::detail::chunk_sumsq16(p, n, bf, ChunkIsa::kAvx2);
        const float c = gnmr::detail::chunk_sumsq16(p, n, bf, ChunkIsa::kAvx512);
        const float d = gnmr::detail::chunk_sumsq16(p, n, bf, ChunkIsa::kSse);
        INFO("bf16 " << bf << " n " << n << " shift " << shift);
        REQUIRE(std::memcmp(&a, &b, 4) == 0);
        REQUIRE(std::memcmp(&a, &c, 4) == 0);
        REQUIRE(std::memcmp(&a, &d, 4) == 0);
      }
    }
    // NaN gives NaN on every build
    std::vector<std::uint16_t> v(5000, enc(0.5f, bf));
    v[1234] = bf ? 0x7fc0 : 0x7e00;
    for (ChunkIsa isa : {ChunkIsa::kPortable, ChunkIsa::kSse, ChunkIsa::kAvx2, ChunkIsa::kAvx512})
      CHECK(std::isnan(gnmr::detail::chunk_sumsq16(v.data(), v.size(), bf, isa)));
  }
}

TEST_CASE("host bf16/fp16 partials stay within the derived bound of the exact sum", "[norms][chunk-order]") {
  // docs/algorithm.md, "Norms on the host": a chunk of n elements is within
  // gamma_{m+12} of its exact sum (m = ceil(n / 2048) + 1 additions into one
  // accumulator, 3 in a thread's fold, 8 in the block tree, 1 for the
  // square); the unit's double fold and final rounding add u/2 + 2^-50.
  const double u = std::ldexp(1.0, -24);
  std::mt19937_64 rng(3);
  for (bool bf : {true, false}) {
    for (std::size_t n : {100ul, 70000ul, 1000000ul, 5000000ul}) {
      const auto v = random_values(rng, n, bf);
      const double exact = sumsq16::exact_sumsq(v, bf);
      Segment s{v.data(), n, bf ? DType::kBF16 : DType::kF16, 0};
      float got = 0;
      gnmr::host_unit_partials<gnmr::L2Norm>(&s, 1, &got, 1, kKernelOrder);
      const double m = std::ceil(static_cast<double>(std::min<std::size_t>(n, 65536)) / 2048.0) + 1;
      const double k = m + 12;
      const double bound = k * u / (1 - k * u) + u / 2 + std::ldexp(1.0, -50);
      INFO("bf16 " << bf << " n " << n << " rel err " << std::fabs(got - exact) / exact << " bound " << bound);
      CHECK(std::fabs(static_cast<double>(got) - exact) <= bound * exact);
    }
  }
  // Inf in, Inf out; NaN in, NaN out; all-subnormal bf16 squares underflow to 0
  std::vector<std::uint16_t> inf(3000, gnmr::float_to_bf16(1.0f));
  inf[2999] = 0x7f80;
  Segment si{inf.data(), inf.size(), DType::kBF16, 0};
  float got = 0;
  gnmr::host_unit_partials<gnmr::L2Norm>(&si, 1, &got, 1, kKernelOrder);
  CHECK(std::isinf(got));
  inf[5] = 0x7fc1;
  gnmr::host_unit_partials<gnmr::L2Norm>(&si, 1, &got, 1, kKernelOrder);
  CHECK(std::isnan(got));
  std::vector<std::uint16_t> sub(4096, 0x0001);  // 2^-133: its square is below every float
  Segment ss{sub.data(), sub.size(), DType::kBF16, 0};
  gnmr::host_unit_partials<gnmr::L2Norm>(&ss, 1, &got, 1, kKernelOrder);
  CHECK(got == 0.0f);
}

TEST_CASE("a unit mixing fp32 and bf16 segments folds them in double, in segment order", "[norms][chunk-order]") {
  std::mt19937_64 rng(5);
  auto h = random_values(rng, 200000, true);
  std::vector<float> f(1000, 0.25f);
  std::vector<Segment> segs = {{h.data(), h.size(), DType::kBF16, 0}, {f.data(), f.size(), DType::kF32, 0},
                               {h.data() + 1, 1000, DType::kBF16, 1}};
  std::vector<float> p(2);
  gnmr::host_unit_partials<gnmr::L2Norm>(segs.data(), segs.size(), p.data(), 2, kKernelOrder);
  double want = 0;
  for (std::uint64_t off = 0; off < h.size(); off += 65536)
    want += gnmr::detail::chunk_sumsq16(h.data() + off, std::min<std::uint64_t>(65536, h.size() - off), true);
  want += gnmr::detail::sumsq_f32(f.data(), f.size());
  CHECK(p[0] == gnmr::detail::to_float_rn(want));
  CHECK(p[1] == gnmr::detail::chunk_sumsq16(h.data() + 1, 1000, true));  // one chunk: the fold is exact
}
