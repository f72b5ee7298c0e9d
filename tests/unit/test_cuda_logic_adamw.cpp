// CPU checks of the guarded fused AdamW's arithmetic (gnmr/plan/adamw_plan.hpp),
// which the CUDA kernel runs unchanged: against an independent
// double-precision AdamW (torch.optim.AdamW's formulas), and the decision
// semantics — skip (nothing written, NaN contained), reset (moments zeroed,
// bias correction restarted), scale.
#include "gnmr/host/adamw.hpp"
#include "gnmr/plan/adamw_plan.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "gnmr/core/half.hpp"

namespace {

using gnmr::AdamWParams;
using gnmr::UnitDecision;
using gnmr::AdamWUnitState;

// torch.optim.AdamW (decoupled weight decay), in double.
struct RefAdamW {
  double p, m = 0.0, v = 0.0;
  long step = 0;
  void update(const AdamWParams& h, double g) {
    step += 1;
    p *= 1.0 - static_cast<double>(h.lr) * h.weight_decay;
    m = h.beta1 * m + (1.0 - h.beta1) * g;
    v = h.beta2 * v + (1.0 - h.beta2) * g * g;
    const double bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), step);
    const double bc2 = 1.0 - std::pow(static_cast<double>(h.beta2), step);
    p -= h.lr / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + h.eps);
  }
};

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

AdamWParams hyper() {
  AdamWParams h;
  h.lr = 1e-2f;
  h.beta1 = 0.9f;
  h.beta2 = 0.95f;
  h.eps = 1e-8f;
  h.weight_decay = 0.1f;
  return h;
}

// One unit, one element, `steps` updates with random gradients.
void run_vs_reference(const AdamWParams& h, std::uint64_t seed, int steps, float scale, double tol) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int e = 0; e < 200; ++e) {
    float p = d(rng), m = 0.0f, v = 0.0f;
    RefAdamW ref{static_cast<double>(p)};
    AdamWUnitState s = gnmr::detail::adamw_unit_init();
    for (int t = 0; t < steps; ++t) {
      const float g = d(rng) * (e % 3 == 0 ? 1e-3f : 1.0f);
      s = gnmr::detail::adamw_advance(h, s, 0u);
      const auto k = gnmr::detail::adamw_coef(h, h.lr, s, UnitDecision{scale, 0u});
      gnmr::detail::adamw_element(k, p, g, m, v);
      ref.update(h, static_cast<double>(g) * scale);
    }
    INFO("element " << e);
    REQUIRE(s.step == steps);
    CHECK(std::fabs(p - ref.p) <= tol * std::max(1.0, std::fabs(ref.p)));
    CHECK(std::fabs(m - ref.m) <= tol * std::max(1e-3, std::fabs(ref.m)));
    CHECK(std::fabs(v - ref.v) <= tol * std::max(1e-6, std::fabs(ref.v)));
  }
}

}  // namespace

TEST_CASE("AdamW element update matches a double-precision AdamW", "[cuda-logic][adamw]") {
  run_vs_reference(hyper(), 1, 1, 1.0f, 1e-5);
  run_vs_reference(hyper(), 2, 50, 1.0f, 1e-4);
  AdamWParams h = hyper();
  h.weight_decay = 0.0f;
  h.beta2 = 0.999f;
  run_vs_reference(h, 3, 20, 1.0f, 1e-4);
  run_vs_reference(hyper(), 4, 10, 0.25f, 1e-4);  // scale multiplies the gradient
}

TEST_CASE("AdamW first step is lr * sign(g) plus decay", "[cuda-logic][adamw]") {
  // Hand value: with m0 = v0 = 0 the bias-corrected step is g/|g| (+eps).
  const AdamWParams h = hyper();
  auto s = gnmr::detail::adamw_advance(h, gnmr::detail::adamw_unit_init(), 0u);
  const auto k = gnmr::detail::adamw_coef(h, h.lr, s, UnitDecision{1.0f, 0u});
  float p = 2.0f, m = 0.0f, v = 0.0f;
  gnmr::detail::adamw_element(k, p, -3.0f, m, v);
  CHECK(p == Approx(2.0 * (1.0 - 1e-3) + 1e-2).epsilon(1e-6));
  CHECK(m == Approx(-0.3).epsilon(1e-6));
  CHECK(v == Approx(0.05 * 9.0).epsilon(1e-6));
}

TEST_CASE("AdamW skip writes nothing and keeps NaN out", "[cuda-logic][adamw]") {
  const AdamWParams h = hyper();
  AdamWUnitState s{5, 0.5, 0.7};
  const UnitDecision skip{0.0f, gnmr::kSkip | gnmr::kNonFinite};
  const AdamWUnitState s2 = gnmr::detail::adamw_advance(h, s, skip.flags);
  CHECK(s2.step == 5);
  CHECK(s2.beta1_pow == 0.5);
  const auto k = gnmr::detail::adamw_coef(h, h.lr, s2, skip);
  float p = 1.25f, m = 0.5f, v = 0.25f;
  for (float g : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), 3.0f}) {
    gnmr::detail::adamw_element(k, p, g, m, v);
    CHECK(same_bits(p, 1.25f));
    CHECK(same_bits(m, 0.5f));
    CHECK(same_bits(v, 0.25f));
  }
}

TEST_CASE("AdamW reset zeroes the moments and restarts the bias correction", "[cuda-logic][adamw]") {
  const AdamWParams h = hyper();
  // A unit 30 steps in, with poisoned moments: reset must clear them by
  // select (0 * NaN would stay NaN).
  AdamWUnitState s = gnmr::detail::adamw_unit_init();
  for (int i = 0; i < 30; ++i) s = gnmr::detail::adamw_advance(h, s, 0u);
  const UnitDecision reset{1.0f, gnmr::kResetMoments | gnmr::kInRecovery | gnmr::kGranted};
  s = gnmr::detail::adamw_advance(h, s, reset.flags);
  CHECK(s.step == 1);
  const auto k = gnmr::detail::adamw_coef(h, h.lr, s, reset);
  float p = 1.0f, m = std::numeric_limits<float>::quiet_NaN(), v = std::numeric_limits<float>::infinity();
  gnmr::detail::adamw_element(k, p, 0.5f, m, v);
  RefAdamW ref{1.0};
  ref.update(h, 0.5);  // a fresh optimizer's first step
  CHECK(std::fabs(p - ref.p) <= 1e-6);
  CHECK(std::fabs(m - ref.m) <= 1e-7);
  CHECK(std::fabs(v - ref.v) <= 1e-8);
}

TEST_CASE("AdamW non-finite gradient in an updated unit is not hidden", "[cuda-logic][adamw]") {
  // Without the guard a NaN does reach the weight: the guard's job is to
  // flag the unit kSkip (the controller does for a non-finite norm).
  const AdamWParams h = hyper();
  auto s = gnmr::detail::adamw_advance(h, gnmr::detail::adamw_unit_init(), 0u);
  const auto k = gnmr::detail::adamw_coef(h, h.lr, s, UnitDecision{1.0f, 0u});
  float p = 1.0f, m = 0.0f, v = 0.0f;
  gnmr::detail::adamw_element(k, p, std::numeric_limits<float>::quiet_NaN(), m, v);
  CHECK(std::isnan(p));
}

TEST_CASE("AdamW step replay over a multi-tensor layout", "[cuda-logic][adamw]") {
  std::mt19937_64 rng(9);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const std::size_t n0 = 1000, n1 = 77, n2 = 40000;
  std::vector<float> p0(n0), m0(n0, 0.f), v0(n0, 0.f), g0(n0);
  std::vector<float> p1(n1), m1(n1, 0.f), v1(n1, 0.f);
  std::vector<std::uint16_t> g1(n1);
  std::vector<float> p2(n2), m2(n2, 0.f), v2(n2, 0.f);
  std::vector<std::uint16_t> g2(n2);
  for (auto& x : p0) x = d(rng);
  for (auto& x : p1) x = d(rng);
  for (auto& x : p2) x = d(rng);
  for (auto& x : g0) x = d(rng);
  for (auto& x : g1) x = gnmr::float_to_bf16(d(rng));
  for (auto& x : g2) x = gnmr::float_to_fp16(d(rng));
  g2[123] = gnmr::float_to_fp16(std::numeric_limits<float>::quiet_NaN());  // unit 2 is skipped
  const std::vector<float> p0_before = p0, p1_before = p1, p2_before = p2;
  const std::vector<gnmr::AdamWTensor> ts = {
      {p0.data(), g0.data(), m0.data(), v0.data(), n0, gnmr::DType::kF32, 0},
      {p1.data(), g1.data(), m1.data(), v1.data(), n1, gnmr::DType::kBF16, 0},
      {p2.data(), g2.data(), m2.data(), v2.data(), n2, gnmr::DType::kF16, 2}};
  const auto L = gnmr::detail::build_adamw_layout(ts.data(), ts.size(), 4, 512);
  CHECK(L.unit_chunks == std::vector<std::uint32_t>{2 + 1, 0, 79, 0});
  CHECK(L.elements == n0 + n1 + n2);
  CHECK(L.bytes == n0 * 28 + n1 * 26 + n2 * 26);
  std::vector<AdamWUnitState> st(4, gnmr::detail::adamw_unit_init());
  const std::vector<UnitDecision> dec = {{0.5f, gnmr::kInRecovery}, {1.0f, 0u}, {0.0f, gnmr::kSkip}, {1.0f, 0u}};
  const AdamWParams h = hyper();
  gnmr::adamw_step_host(L, h, h.lr, dec.data(), st);
  CHECK(st[0].step == 1);
  CHECK(st[1].step == 0);  // no tensor: untouched
  CHECK(st[2].step == 0);  // skipped
  CHECK(p2 == p2_before);  // NaN gradient contained
  for (float x : m2) REQUIRE(x == 0.0f);
  // Unit 0 (both dtypes): scale 0.5 applied, against the double reference.
  for (std::size_t i = 0; i < n0; ++i) {
    RefAdamW r{static_cast<double>(p0_before[i])};
    r.update(h, 0.5 * static_cast<double>(g0[i]));
    REQUIRE(std::fabs(p0[i] - r.p) <= 1e-6 * std::max(1.0, std::fabs(r.p)));
  }
  for (std::size_t i = 0; i < n1; ++i) {
    RefAdamW r{static_cast<double>(p1_before[i])};
    r.update(h, 0.5 * static_cast<double>(gnmr::bf16_to_float(g1[i])));
    REQUIRE(std::fabs(p1[i] - r.p) <= 1e-6 * std::max(1.0, std::fabs(r.p)));
    REQUIRE(std::fabs(m1[i] - r.m) <= 1e-6 * std::max(1e-3, std::fabs(r.m)));
  }
}

TEST_CASE("AdamW step replay honours a suggested global skip", "[cuda-logic][adamw]") {
  std::mt19937_64 rng(99);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const std::size_t n = 3000;
  std::vector<float> p(n), m(n), v(n), g(n);
  for (std::size_t i = 0; i < n; ++i) {
    p[i] = d(rng);
    m[i] = 0.1f * d(rng);
    v[i] = 0.01f * std::fabs(d(rng));
    g[i] = d(rng);
  }
  g[7] = std::numeric_limits<float>::quiet_NaN();  // would poison an update
  const std::vector<float> p0 = p, m0 = m, v0 = v;
  const gnmr::AdamWTensor t{p.data(), g.data(), m.data(), v.data(), n, gnmr::DType::kF32, 0};
  const auto L = gnmr::detail::build_adamw_layout(&t, 1, 1, 1024);
  std::vector<AdamWUnitState> st(1, gnmr::detail::adamw_unit_init());
  const UnitDecision dec{1.0f, 0u};  // the unit itself is not skipped
  gnmr::adamw_step_host(L, hyper(), hyper().lr, &dec, st, /*global_skip=*/true);
  CHECK(st[0].step == 0);
  CHECK(p == p0);
  CHECK(m == m0);
  CHECK(v == v0);
  gnmr::adamw_step_host(L, hyper(), hyper().lr, &dec, st, false);
  CHECK(st[0].step == 1);
  CHECK(std::isnan(p[7]));  // without the skip the NaN is not hidden
}

TEST_CASE("AdamW no-decay tensors: one plan equals two parameter groups", "[cuda-logic][adamw]") {
  // A tensor with weight_decay = false in a plan with weight decay must end
  // bit for bit where a separate plan with weight_decay 0 takes it.
  std::mt19937_64 rng(123);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const std::size_t n0 = 700, n1 = 130;
  std::vector<float> p0(n0), g0(n0), p1(n1), g1(n1);
  for (auto* v : {&p0, &g0, &p1, &g1})
    for (auto& x : *v) x = d(rng);
  std::vector<float> a_p0 = p0, a_p1 = p1, b_p0 = p0, b_p1 = p1;
  std::vector<float> a_m0(n0, 0.f), a_v0(n0, 0.f), a_m1(n1, 0.f), a_v1(n1, 0.f);
  std::vector<float> b_m0 = a_m0, b_v0 = a_v0, b_m1 = a_m1, b_v1 = a_v1;
  gnmr::AdamWTensor nd1{a_p1.data(), g1.data(), a_m1.data(), a_v1.data(), n1, gnmr::DType::kF32, 0};
  nd1.weight_decay = false;
  const std::vector<gnmr::AdamWTensor> one = {
      {a_p0.data(), g0.data(), a_m0.data(), a_v0.data(), n0, gnmr::DType::kF32, 0}, nd1};
  const gnmr::AdamWTensor b0{b_p0.data(), g0.data(), b_m0.data(), b_v0.data(), n0, gnmr::DType::kF32, 0};
  const gnmr::AdamWTensor b1{b_p1.data(), g1.data(), b_m1.data(), b_v1.data(), n1, gnmr::DType::kF32, 0};
  const auto L = gnmr::detail::build_adamw_layout(one.data(), one.size(), 1, 256);
  const auto L0 = gnmr::detail::build_adamw_layout(&b0, 1, 1, 256);
  const auto L1 = gnmr::detail::build_adamw_layout(&b1, 1, 1, 256);
  AdamWParams h = hyper();
  h.weight_decay = 0.1f;
  AdamWParams h_nd = h;
  h_nd.weight_decay = 0.0f;
  std::vector<AdamWUnitState> s(1, gnmr::detail::adamw_unit_init()), s0 = s, s1 = s;
  const UnitDecision dec{0.5f, gnmr::kInRecovery};
  for (int step = 0; step < 3; ++step) {
    gnmr::adamw_step_host(L, h, h.lr, &dec, s);
    gnmr::adamw_step_host(L0, h, h.lr, &dec, s0);
    gnmr::adamw_step_host(L1, h_nd, h.lr, &dec, s1);
  }
  CHECK(std::memcmp(a_p0.data(), b_p0.data(), n0 * 4) == 0);
  CHECK(std::memcmp(a_p1.data(), b_p1.data(), n1 * 4) == 0);
  CHECK(std::memcmp(a_m1.data(), b_m1.data(), n1 * 4) == 0);
  CHECK(std::memcmp(a_v1.data(), b_v1.data(), n1 * 4) == 0);
  CHECK(a_p1 != p1);  // it was updated, only not decayed
  // ... and with decay it would have ended elsewhere (the flag is not inert).
  std::vector<float> c_p1 = p1, c_m1(n1, 0.f), c_v1(n1, 0.f);
  const gnmr::AdamWTensor c1{c_p1.data(), g1.data(), c_m1.data(), c_v1.data(), n1, gnmr::DType::kF32, 0};
  const auto Lc = gnmr::detail::build_adamw_layout(&c1, 1, 1, 256);
  std::vector<AdamWUnitState> sc(1, gnmr::detail::adamw_unit_init());
  for (int step = 0; step < 3; ++step) gnmr::adamw_step_host(Lc, h, h.lr, &dec, sc);
  CHECK(c_p1 != a_p1);
}

TEST_CASE("AdamW layout and hyperparameters are validated", "[cuda-logic][adamw]") {
  std::vector<float> a(16), b(16), c(16), d(16);
  using gnmr::detail::build_adamw_layout;
  const gnmr::AdamWTensor ok{a.data(), b.data(), c.data(), d.data(), 16, gnmr::DType::kF32, 0};
  CHECK_NOTHROW(build_adamw_layout(&ok, 1, 1));
  gnmr::AdamWTensor t = ok;
  t.numel = 0;
  CHECK_THROWS_AS(build_adamw_layout(&t, 1, 1), std::invalid_argument);
  t = ok;
  t.exp_avg = nullptr;
  CHECK_THROWS_AS(build_adamw_layout(&t, 1, 1), std::invalid_argument);
  t = ok;
  t.unit = 1;
  CHECK_THROWS_AS(build_adamw_layout(&t, 1, 1), std::invalid_argument);
  t = ok;
  t.exp_avg_sq = a.data() + 8;  // overlaps the weights
  CHECK_THROWS_AS(build_adamw_layout(&t, 1, 1), std::invalid_argument);
  CHECK_THROWS_AS(build_adamw_layout(&ok, 1, 0), std::invalid_argument);
  CHECK_THROWS_AS(build_adamw_layout(&ok, 1, 1, 10), std::invalid_argument);
  AdamWParams h;
  CHECK(h.check().empty());
  h.beta1 = 1.0f;
  CHECK_FALSE(h.check().empty());
  h = AdamWParams{};
  h.eps = 0.0f;
  CHECK_FALSE(h.check().empty());
  h = AdamWParams{};
  h.lr = -1.0f;
  CHECK_FALSE(h.check().empty());
}
