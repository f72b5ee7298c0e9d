// gnmr's host loops on a caller's executor (gnmr/core/parallel.hpp):
// host_unit_partials and HostAdamW::step give the same bits with any
// executor as with the serial default: real threads, ranges of one item,
// ranges run in reverse order; on random fp32/bf16/fp16 data with NaN, Inf,
// subnormals and odd lengths. The vectorisable AdamW loop equals the plain
// element-by-element one (adamw_element over load_grad, what the kernel
// does), and a plan whose buffers overlap is refused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "gnmr/core/half.hpp"
#include "gnmr/core/parallel.hpp"
#include "gnmr/host/adamw.hpp"
#include "gnmr/host/unit_norms.hpp"

namespace {

// Runs the ranges [i, i+1) from the last to the first, each on its own
// std::thread, `width` at a time.
struct ThreadsFor {
  std::size_t width = 3;
  template <class F>
  void operator()(std::size_t n, F&& fn) const {
    std::size_t i = n;
    while (i > 0) {
      std::vector<std::thread> pool;
      for (std::size_t k = 0; k < width && i > 0; ++k) {
        --i;
        pool.emplace_back([&fn, i] { fn(i, i + 1); });
      }
      for (auto& t : pool) t.join();
    }
  }
};

// Calls fn on two uneven halves, the second half first.
struct SplitFor {
  template <class F>
  void operator()(std::size_t n, F&& fn) const {
    const std::size_t mid = n / 3;
    fn(mid, n);
    fn(std::size_t{0}, mid);
  }
};

float special(std::mt19937& rng, float x) {
  switch (rng() % 97) {
    case 0: return std::numeric_limits<float>::quiet_NaN();
    case 1: return std::numeric_limits<float>::infinity();
    case 2: return 1e-40f;  // subnormal
    default: return x;
  }
}

struct Grads {
  std::vector<std::vector<float>> f32;
  std::vector<std::vector<std::uint16_t>> h16;  // bf16 or fp16 bits
  std::vector<gnmr::Segment> segs;
};

Grads make_grads(unsigned seed, bool with_specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  Grads G;
  const std::size_t n_segs = 23;
  G.f32.resize(n_segs);
  G.h16.resize(n_segs);
  for (std::size_t i = 0; i < n_segs; ++i) {
    const std::size_t n = 1 + rng() % 5000;  // odd lengths, tails of every size
    const std::uint32_t unit = static_cast<std::uint32_t>(rng() % 6);
    const int kind = static_cast<int>(i % 3);
    for (std::size_t j = 0; j < n; ++j) {
      float x = d(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 20) - 10);
      if (with_specials) x = special(rng, x);
      if (kind == 0) G.f32[i].push_back(x);
      else if (kind == 1) G.h16[i].push_back(gnmr::float_to_bf16(x));
      else G.h16[i].push_back(gnmr::float_to_fp16(x));
    }
    if (kind == 0) G.segs.push_back({G.f32[i].data(), n, gnmr::DType::kF32, unit});
    else G.segs.push_back({G.h16[i].data(), n, kind == 1 ? gnmr::DType::kBF16 : gnmr::DType::kF16, unit});
  }
  return G;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEMPLATE_TEST_CASE("host_unit_partials: the same bits on any executor", "[norms][host][parallel]",
                   gnmr::L2Norm, gnmr::LinfNorm) {
  for (unsigned seed : {1u, 2u, 3u}) {
    for (bool specials : {false, true}) {
      const Grads G = make_grads(seed, specials);
      std::vector<float> serial(6), threads(6), split(6);
      gnmr::host_unit_partials<TestType>(G.segs.data(), G.segs.size(), serial.data(), 6,
                                         gnmr::Coverage::kShard);
      gnmr::host_unit_partials<TestType>(G.segs.data(), G.segs.size(), threads.data(), 6,
                                         gnmr::Coverage::kShard, ThreadsFor{});
      gnmr::host_unit_partials<TestType>(G.segs.data(), G.segs.size(), split.data(), 6,
                                         gnmr::Coverage::kShard, SplitFor{});
      CHECK(same_bits(serial, threads));
      CHECK(same_bits(serial, split));
      // Against a double reference, without specials: within an fp32 rounding.
      if (!specials && std::is_same<TestType, gnmr::L2Norm>::value) {
        std::vector<double> ref(6, 0.0);
        for (const auto& s : G.segs)
          for (std::uint64_t j = 0; j < s.numel; ++j) {
            const double x = gnmr::detail::load_element(s, j);
            ref[s.unit] += x * x;
          }
        for (std::size_t u = 0; u < 6; ++u)
          CHECK(std::fabs(serial[u] - ref[u]) <= 1e-6 * ref[u] + 1e-30);
      }
      if (specials) {  // a NaN or Inf still reaches its unit's partial
        bool any_nonfinite = false;
        for (float x : serial) any_nonfinite |= !std::isfinite(x);
        CHECK(any_nonfinite);
      }
    }
  }
}

namespace {

struct Opt {
  std::vector<std::vector<float>> p, m, v, g32;
  std::vector<std::vector<std::uint16_t>> g16;
  std::vector<gnmr::AdamWTensor> t;
  explicit Opt(unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    const std::size_t n[5] = {70001, 33, 40000, 1, 9000};
    const gnmr::DType dt[5] = {gnmr::DType::kF32, gnmr::DType::kBF16, gnmr::DType::kF16,
                               gnmr::DType::kF32, gnmr::DType::kBF16};
    p.resize(5), m.resize(5), v.resize(5), g32.resize(5), g16.resize(5);
    for (int k = 0; k < 5; ++k) {
      for (std::size_t i = 0; i < n[k]; ++i) {
        p[k].push_back(d(rng));
        m[k].push_back(0.1f * d(rng));
        v[k].push_back(std::fabs(0.01f * d(rng)));
        const float g = d(rng);
        if (dt[k] == gnmr::DType::kF32) g32[k].push_back(g);
        else if (dt[k] == gnmr::DType::kBF16) g16[k].push_back(gnmr::float_to_bf16(g));
        else g16[k].push_back(gnmr::float_to_fp16(g));
      }
      const void* g = dt[k] == gnmr::DType::kF32 ? static_cast<const void*>(g32[k].data())
                                                 : static_cast<const void*>(g16[k].data());
      t.push_back({p[k].data(), g, m[k].data(), v[k].data(), n[k], dt[k],
                   static_cast<std::uint32_t>(k % 3), k != 4});
    }
  }
  bool same(const Opt& o) const { return p == o.p && m == o.m && v == o.v; }
};

gnmr::AdamWParams hyper() {
  gnmr::AdamWParams h;
  h.lr = 3e-3f;
  h.weight_decay = 0.1f;
  return h;
}

}  // namespace

TEST_CASE("HostAdamW::step: the same bits on any executor, and as element by element",
          "[adamw][host][parallel]") {
  Opt serial(5), threads(5), split(5), plain(5);
  gnmr::HostAdamW a(3), b(3), c(3);
  a.set_tensors(serial.t.data(), serial.t.size(), 4096);
  b.set_tensors(threads.t.data(), threads.t.size(), 4096);
  c.set_tensors(split.t.data(), split.t.size(), 4096);
  const auto L = gnmr::detail::build_adamw_layout(plain.t.data(), plain.t.size(), 3, 4096);
  std::vector<gnmr::AdamWUnitState> st(3, gnmr::detail::adamw_unit_init());
  std::vector<gnmr::detail::AdamWCoef> coef(3);
  const std::vector<std::vector<gnmr::UnitDecision>> steps = {
      {{1.0f, 0u}, {1.0f, 0u}, {1.0f, 0u}},
      {{0.25f, gnmr::kInRecovery}, {1.0f, gnmr::kSkip}, {1.0f, 0u}},
      {{1.0f, gnmr::kResetMoments}, {1.0f, 0u}, {0.5f, gnmr::kInRecovery}},
      {{1.0f, 0u}, {1.0f, 0u}, {1.0f, 0u}}};
  for (const auto& d : steps) {
    a.step(hyper(), hyper().lr, d.data());
    b.step(hyper(), hyper().lr, d.data(), false, ThreadsFor{});
    c.step(hyper(), hyper().lr, d.data(), false, SplitFor{});
    // The plain loop: adamw_element over load_grad, element by element, as
    // the CUDA kernel runs it.
    gnmr::detail::adamw_units_host(L, hyper(), hyper().lr, d.data(), st.data(), 3, coef.data());
    for (const auto& ch : L.chunks) {
      const auto k = gnmr::detail::chunk_coef(coef[ch.unit], ch);
      for (std::uint32_t j = 0; j < ch.numel; ++j)
        gnmr::detail::adamw_element(k, ch.p[j], gnmr::detail::load_grad(ch.g, ch.dtype, j), ch.m[j], ch.v[j]);
    }
    REQUIRE(serial.same(threads));
    REQUIRE(serial.same(split));
    REQUIRE(serial.same(plain));
  }
  CHECK(a.unit_states()[1].step == b.unit_states()[1].step);
}

TEST_CASE("HostAdamW: the AVX2 build of the loop gives the scalar build's bits", "[adamw][host][simd]") {
  if (!gnmr::detail::host_has_avx2()) {
    WARN("no AVX2 on this CPU: only the portable loop ran");
    return;
  }
  Opt a(9), b(9);
  const auto La = gnmr::detail::build_adamw_layout(a.t.data(), a.t.size(), 3, 4096);
  const auto Lb = gnmr::detail::build_adamw_layout(b.t.data(), b.t.size(), 3, 4096);
  std::vector<gnmr::AdamWUnitState> sa(3, gnmr::detail::adamw_unit_init()), sb = sa;
  std::vector<gnmr::detail::AdamWCoef> ca(3), cb(3);
  const std::vector<gnmr::UnitDecision> d = {{0.5f, gnmr::kInRecovery}, {1.0f, 0u}, {1.0f, gnmr::kResetMoments}};
  for (int step = 0; step < 3; ++step) {
    gnmr::detail::adamw_units_host(La, hyper(), hyper().lr, d.data(), sa.data(), 3, ca.data());
    gnmr::detail::adamw_units_host(Lb, hyper(), hyper().lr, d.data(), sb.data(), 3, cb.data());
    gnmr::detail::adamw_chunks_host(La, ca.data(), 0, La.chunks.size(), /*avx2=*/false);
    gnmr::detail::adamw_chunks_host(Lb, cb.data(), 0, Lb.chunks.size(), /*avx2=*/true);
    REQUIRE(a.same(b));
  }
}

TEST_CASE("AdamW plans refuse a tensor whose buffers overlap", "[adamw][host][validation]") {
  std::vector<float> buf(300, 1.0f), g(100, 0.5f), v(100, 0.0f);
  gnmr::AdamWTensor t{buf.data(), g.data(), buf.data() + 50, v.data(), 100, gnmr::DType::kF32, 0, true};
  gnmr::HostAdamW opt(1);
  CHECK_THROWS_WITH(opt.set_tensors(&t, 1), Catch::Contains("param and exp_avg overlap"));
  t.exp_avg = buf.data() + 100;  // adjacent, not overlapping
  CHECK_NOTHROW(opt.set_tensors(&t, 1));
  t.grad = buf.data() + 199;
  CHECK_THROWS_WITH(opt.set_tensors(&t, 1), Catch::Contains("grad and exp_avg overlap"));
}
