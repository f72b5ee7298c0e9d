// tests/demo/test_quant.cpp — gnmr-demo's emulated number formats against
// an independent double-precision reference (CTest gnmr_demo_tests, label
// demo).
//
// The reference enumerates every non-negative value of each format (E4M3
// without its NaN code, E5M2 without infinity, E2M1), sorts them, and takes
// the nearest (ties to the even code, i.e. the even index), saturating
// beyond the largest. Both implementations of demo/quant.hpp — the CPU
// loops (formats.hpp) and the torch-op path that runs on CUDA tensors,
// exercised here on CPU tensors — must give its bits on random inputs, on
// exact ties, on subnormals, beyond the range, and through the per-tensor,
// delayed and NVFP4 block scalings. Then the quantized linear layer's three
// GEMMs against hand-written formulas, also under --format nvfp4-recipe
// (its pieces: test_nvfp4_recipe.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <torch/torch.h>

#include "nvfp4_recipe.hpp"
#include "qlinear.hpp"

// c10 defines a CHECK macro of its own: Catch's go by their prefixed names.
#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

using demo::Fmt;

namespace {

std::vector<double> grid(Fmt f) {
  const demo::FmtInfo i = demo::fmt_info(f);
  std::vector<double> g;
  const int levels = 1 << i.mant;
  for (int k = 0; k < levels; ++k) g.push_back(std::ldexp(static_cast<double>(k), i.emin - i.mant));
  for (int e = i.emin;; ++e) {
    bool done = false;
    for (int m = 0; m < levels; ++m) {
      const double v = std::ldexp(1.0 + static_cast<double>(m) / levels, e);
      if (v > i.max) {
        done = true;
        break;
      }
      g.push_back(v);
    }
    if (done) break;
  }
  return g;
}

// The reference: nearest grid value, ties to the even code, saturating.
float ref_round(float t, Fmt f) {
  if (!std::isfinite(t)) return t;
  static std::vector<double> g[4];
  auto& gr = g[static_cast<int>(f)];
  if (gr.empty()) gr = grid(f);
  const double a = std::fabs(static_cast<double>(t));
  if (a >= gr.back()) return std::copysign(static_cast<float>(gr.back()), t);
  const auto hi = std::upper_bound(gr.begin(), gr.end(), a);  // a < *hi
  const auto lo = hi - 1;
  const double dl = a - *lo, dh = *hi - a;
  const bool take_hi = dh < dl || (dh == dl && (hi - gr.begin()) % 2 == 0);
  return std::copysign(static_cast<float>(take_hi ? *hi : *lo), t);
}

bool same_bits(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// Random values over the format's whole range: subnormals to beyond max,
// plus exact ties (midpoints of neighbours), zeros and non-finite values.
std::vector<float> inputs(Fmt f, std::uint64_t seed, std::size_t n) {
  const auto g = grid(f);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> lg(std::log2(g[1]) - 3, std::log2(g.back()) + 2);
  std::uniform_int_distribution<std::size_t> pick(0, g.size() - 2);
  std::vector<float> v;
  for (std::size_t i = 0; i < n; ++i) {
    const double s = (rng() & 1) ? -1.0 : 1.0;
    if (i % 4 == 0) {
      const std::size_t k = pick(rng);
      v.push_back(static_cast<float>(s * 0.5 * (g[k] + g[k + 1])));  // an exact tie
    } else {
      v.push_back(static_cast<float>(s * std::exp2(lg(rng))));
    }
  }
  v.insert(v.end(), {0.0f, -0.0f, NAN, INFINITY, -INFINITY, 1e-42f, static_cast<float>(g.back()) * 1.0001f});
  return v;
}

torch::Tensor tensor_of(const std::vector<float>& v) {
  return torch::from_blob(const_cast<float*>(v.data()), {static_cast<std::int64_t>(v.size())}).clone();
}

}  // namespace

CATCH_TEST_CASE("hand-computed roundings", "[demo][quant]") {
  const demo::FmtInfo e2m1 = demo::fmt_info(Fmt::kE2M1), e4m3 = demo::fmt_info(Fmt::kE4M3);
  // E2M1 grid 0, 0.5, 1, 1.5, 2, 3, 4, 6: ties go to the even code.
  CATCH_CHECK(demo::round_to_grid(0.25f, e2m1) == 0.0f);
  CATCH_CHECK(demo::round_to_grid(0.75f, e2m1) == 1.0f);
  CATCH_CHECK(demo::round_to_grid(1.25f, e2m1) == 1.0f);
  CATCH_CHECK(demo::round_to_grid(2.5f, e2m1) == 2.0f);
  CATCH_CHECK(demo::round_to_grid(3.5f, e2m1) == 4.0f);
  CATCH_CHECK(demo::round_to_grid(5.0f, e2m1) == 4.0f);
  CATCH_CHECK(demo::round_to_grid(5.01f, e2m1) == 6.0f);
  CATCH_CHECK(demo::round_to_grid(-100.0f, e2m1) == -6.0f);
  // E4M3: 448 is the largest value; 464 is the tie between 448 and the
  // non-existent 480, and everything from there on saturates.
  CATCH_CHECK(demo::round_to_grid(460.0f, e4m3) == 448.0f);
  CATCH_CHECK(demo::round_to_grid(1e6f, e4m3) == 448.0f);
  // Subnormals: spacing 2^-9 below 2^-6; half of the smallest rounds to 0.
  CATCH_CHECK(demo::round_to_grid(std::ldexp(1.0f, -10), e4m3) == 0.0f);
  CATCH_CHECK(demo::round_to_grid(std::ldexp(3.0f, -10), e4m3) == std::ldexp(1.0f, -8));
  CATCH_CHECK(std::isnan(demo::round_to_grid(NAN, e4m3)));
  CATCH_CHECK(demo::round_to_grid(-INFINITY, e2m1) == -INFINITY);
}

CATCH_TEST_CASE("both implementations round like the reference", "[demo][quant]") {
  for (Fmt f : {Fmt::kE4M3, Fmt::kE5M2, Fmt::kE2M1}) {
    CATCH_INFO("format " << demo::fmt_name(f));
    const auto x = inputs(f, 7 + static_cast<int>(f), 20000);
    const demo::FmtInfo fi = demo::fmt_info(f);
    const auto t = demo::round_to_grid_t(tensor_of(x), fi);
    const float* tp = t.data_ptr<float>();
    std::size_t bad_cpu = 0, bad_t = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float want = ref_round(x[i], f);
      bad_cpu += !same_bits(demo::round_to_grid(x[i], fi), want);
      bad_t += !same_bits(tp[i], want);
    }
    CATCH_CHECK(bad_cpu == 0);
    CATCH_CHECK(bad_t == 0);
  }
}

CATCH_TEST_CASE("per-tensor current and delayed scaling", "[demo][quant]") {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(64 * 48);
  for (auto& v : x) v = nd(rng) * 0.01f;
  x[17] = 0.9f;  // the amax
  const auto xt = tensor_of(x).view({64, 48});
  for (Fmt f : {Fmt::kE4M3, Fmt::kE2M1}) {
    const demo::FmtInfo fi = demo::fmt_info(f);
    const float scale = fi.max / 0.9f;
    // current scaling, CPU path, through operand()
    const auto y = demo::operand(xt, f, demo::Scaling::kCurrent, nullptr, {});
    const auto yt = demo::qdq_scaled_t(xt, demo::scale_for_t(demo::finite_amax_t(xt), fi.max), fi);
    std::size_t bad = 0, bad_t = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float want = ref_round(x[i] * scale, f) / scale;
      bad += !same_bits(y.data_ptr<float>()[i], want);
      bad_t += !same_bits(yt.data_ptr<float>()[i], want);
    }
    CATCH_CHECK(bad == 0);
    CATCH_CHECK(bad_t == 0);
  }
  // Delayed: step 1 uses its own amax (empty history); step 2 the history's
  // max (0.9) even though its own amax is 10x smaller; a promoted step is
  // returned unquantized and still feeds the history.
  demo::AmaxHistory h;
  h.init(4, torch::kCPU);
  const demo::FmtInfo e2 = demo::fmt_info(Fmt::kE2M1);
  demo::operand(xt, Fmt::kE2M1, demo::Scaling::kDelayed, &h, {});
  CATCH_CHECK(h.count == 1);
  CATCH_CHECK(h.max_host() == 0.9f);
  const auto small = xt * 0.1f;
  const auto y2 = demo::operand(small, Fmt::kE2M1, demo::Scaling::kDelayed, &h, {});
  const float stale = e2.max / 0.9f;
  std::size_t bad = 0;
  for (std::int64_t i = 0; i < small.numel(); ++i) {
    const float v = small.data_ptr<float>()[i];
    bad += !same_bits(y2.data_ptr<float>()[i], ref_round(v * stale, Fmt::kE2M1) / stale);
  }
  CATCH_CHECK(bad == 0);
  demo::Promoted pro;
  pro.host = true;
  const auto y3 = demo::operand(xt * 5.0f, Fmt::kE2M1, demo::Scaling::kDelayed, &h, pro);
  CATCH_CHECK(torch::equal(y3, xt * 5.0f));
  CATCH_CHECK(h.count == 3);
  CATCH_CHECK(h.max_host() == 4.5f);
}

CATCH_TEST_CASE("NVFP4 block scaling", "[demo][quant]") {
  std::mt19937_64 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const std::size_t rows = 9, cols = 50;  // the last block of a row has 2 elements
  std::vector<float> x(rows * cols);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = nd(rng) * std::exp2(static_cast<float>(i % 7) - 3.0f);
  for (std::size_t c = 16; c < 32; ++c) x[2 * cols + c] = 1e-12f;  // a block whose scale rounds to 0
  x[5] = NAN;
  // The reference, step by step in the same float operations.
  std::vector<float> want(x.size());
  float amax = 0;
  for (float v : x)
    if (std::isfinite(v)) amax = std::max(amax, std::fabs(v));
  const float g = amax / (6.0f * 448.0f);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c0 = 0; c0 < cols; c0 += 16) {
      const std::size_t len = std::min<std::size_t>(16, cols - c0);
      float bm = 0;
      for (std::size_t i = 0; i < len; ++i)
        if (std::isfinite(x[r * cols + c0 + i])) bm = std::max(bm, std::fabs(x[r * cols + c0 + i]));
      const float sc = ref_round(bm / 6.0f / g, Fmt::kE4M3) * g;
      for (std::size_t i = 0; i < len; ++i) {
        const float v = x[r * cols + c0 + i];
        want[r * cols + c0 + i] = !std::isfinite(v) ? v : sc > 0 ? ref_round(v / sc, Fmt::kE2M1) * sc : 0.0f;
      }
    }
  std::vector<float> y(x.size());
  demo::qdq_nvfp4(x.data(), y.data(), rows, cols);
  const auto yt = demo::qdq_nvfp4_t(tensor_of(x).view({static_cast<std::int64_t>(rows), static_cast<std::int64_t>(cols)})).contiguous();
  std::size_t bad = 0, bad_t = 0, zeros = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    bad += !same_bits(y[i], want[i]);
    bad_t += !same_bits(yt.data_ptr<float>()[i], want[i]);
  }
  for (std::size_t c = 16; c < 32; ++c) zeros += y[2 * cols + c] == 0.0f;
  CATCH_CHECK(bad == 0);
  CATCH_CHECK(bad_t == 0);
  CATCH_CHECK(zeros == 16);
  CATCH_CHECK(std::isnan(y[5]));
}

CATCH_TEST_CASE("the quantized linear layer's three GEMMs", "[demo][quant]") {
  torch::manual_seed(5);
  demo::OpState op;
  demo::QuantContext qc;
  qc.cfg.fwd_x = qc.cfg.fwd_w = Fmt::kE4M3;
  qc.cfg.bwd = Fmt::kE5M2;
  qc.cfg.scaling = demo::Scaling::kCurrent;
  qc.promoted = {0};
  demo::QLinear lin(48, 32, &op, &qc);
  torch::nn::init::normal_(lin->weight, 0.0, 0.1);
  torch::nn::init::normal_(lin->bias, 0.0, 0.1);
  const auto x = torch::randn({3, 5, 48}).requires_grad_(true);
  const auto dy = torch::randn({3, 5, 32});
  const auto q = [](const torch::Tensor& t, Fmt f) {
    return demo::operand(t.contiguous(), f, demo::Scaling::kCurrent, nullptr, {});
  };
  for (bool wgrad : {false, true}) {
    for (bool promoted : {false, true}) {
      CATCH_INFO("wgrad " << wgrad << ", promoted " << promoted);
      qc.cfg.wgrad = wgrad;
      qc.promoted = {static_cast<std::uint8_t>(promoted)};
      x.mutable_grad() = torch::Tensor();
      lin->weight.mutable_grad() = torch::Tensor();
      lin->bias.mutable_grad() = torch::Tensor();
      const auto y = lin->forward(x);
      y.backward(dy);
      torch::NoGradGuard ng;
      const auto x2 = x.detach().reshape({15, 48}), dy2 = dy.reshape({15, 32});
      const auto w = lin->weight.detach();
      const auto qx = promoted ? x2 : q(x2, Fmt::kE4M3), qw = promoted ? w : q(w, Fmt::kE4M3);
      const auto qdy = promoted ? dy2 : q(dy2, Fmt::kE5M2);
      CATCH_CHECK(torch::equal(y.detach().reshape({15, 32}), torch::addmm(lin->bias.detach(), qx, qw.t())));
      CATCH_CHECK(torch::equal(x.grad().reshape({15, 48}), qdy.mm(qw)));
      CATCH_CHECK(torch::equal(lin->weight.grad(), wgrad ? qdy.t().mm(qx) : dy2.t().mm(x2)));
      CATCH_CHECK(torch::equal(lin->bias.grad(), dy2.sum(0)));
      if (!promoted) CATCH_CHECK(!torch::equal(qx, x2));  // the test would be vacuous otherwise
    }
  }
}

CATCH_TEST_CASE("the linear layer's three GEMMs under --format nvfp4-recipe", "[demo][nvfp4]") {
  torch::manual_seed(8);
  demo::OpState op;
  op.index = 3;
  demo::QuantContext qc;
  qc.cfg.fwd_x = qc.cfg.fwd_w = qc.cfg.bwd = demo::Fmt::kE2M1;
  qc.cfg.scaling = demo::Scaling::kNvfp4Recipe;
  qc.cfg.wgrad = true;
  qc.cfg.check();
  qc.seed = 21;
  qc.step = 4;
  demo::rht_signs(qc.seed, qc.rht);
  demo::QLinear lin(48, 32, &op, &qc);
  torch::nn::init::normal_(lin->weight, 0.0, 0.1);
  const auto x = torch::randn({2, 16, 48}).requires_grad_(true);
  const auto dy = torch::randn({2, 16, 32});
  const auto q = [](const torch::Tensor& t, auto fn) {
    auto c = t.contiguous();
    auto o = torch::empty_like(c);
    fn(c.data_ptr<float>(), o.data_ptr<float>(), static_cast<std::size_t>(c.size(0)), static_cast<std::size_t>(c.size(1)));
    return o;
  };
  qc.want_noise = true;  // the noise-floor trigger's aux: E||e||^2 of dW
  for (bool promoted : {false, true}) {
    CATCH_INFO("promoted " << promoted);
    qc.promoted = {0, 0, 0, static_cast<std::uint8_t>(promoted)};
    op.noise = 0.0;
    x.mutable_grad() = torch::Tensor();
    lin->weight.mutable_grad() = torch::Tensor();
    const auto y = lin->forward(x);
    y.backward(dy);
    torch::NoGradGuard ng;
    const auto x2 = x.detach().reshape({32, 48}).contiguous(), dy2 = dy.reshape({32, 32}).contiguous();
    const auto w = lin->weight.detach().contiguous();
    if (promoted) {
      CATCH_CHECK(torch::equal(x.grad().reshape({32, 48}), dy2.mm(w)));
      CATCH_CHECK(torch::equal(lin->weight.grad(), dy2.t().mm(x2)));
      CATCH_CHECK(op.noise == 0.0);  // nothing rounded stochastically
      continue;
    }
    const auto qx = q(x2, demo::qdq_nvfp4);
    const auto qw = q(w, demo::qdq_nvfp4_2d);
    const std::uint64_t k0 = demo::sr_key(21, 4, 3, 0), k1 = demo::sr_key(21, 4, 3, 1);
    const auto qdy = q(dy2, [k0](const float* a, float* b, std::size_t r, std::size_t c) { demo::qdq_nvfp4_sr(a, b, r, c, k0); });
    auto dyt = dy2.t().contiguous(), xt = x2.t().contiguous();
    demo::rht16_rows(dyt.data_ptr<float>(), 32, 32, qc.rht);
    demo::rht16_rows(xt.data_ptr<float>(), 48, 32, qc.rht);
    const auto qdyt = q(dyt, [k1](const float* a, float* b, std::size_t r, std::size_t c) { demo::qdq_nvfp4_sr(a, b, r, c, k1); });
    const auto qxt = q(xt, demo::qdq_nvfp4);
    CATCH_CHECK(torch::equal(y.detach().reshape({32, 32}), torch::addmm(lin->bias.detach(), qx, qw.t())));
    CATCH_CHECK(torch::equal(x.grad().reshape({32, 48}), qdy.mm(qw)));
    CATCH_CHECK(torch::equal(lin->weight.grad(), qdyt.mm(qxt.t())));
    // The noise: the variances of dy^T's rounding (the same draws) against
    // q(x^T)'s squares, summed directly in double precision.
    auto var = torch::empty_like(dyt), again = torch::empty_like(dyt);
    demo::qdq_nvfp4_sr(dyt.data_ptr<float>(), again.data_ptr<float>(), 32, 32, k1, var.data_ptr<float>());
    CATCH_CHECK(torch::equal(again, qdyt));
    double noise = 0.0;
    const float *v = var.data_ptr<float>(), *bx = qxt.data_ptr<float>();
    for (int n = 0; n < 32; ++n)
      for (int kk = 0; kk < 48; ++kk)
        for (int t = 0; t < 32; ++t) noise += static_cast<double>(v[n * 32 + t]) * bx[kk * 32 + t] * bx[kk * 32 + t];
    CATCH_CHECK(noise > 0.0);
    CATCH_CHECK(std::fabs(op.noise - noise) <= 1e-9 * noise);
    CATCH_CHECK(!torch::equal(qw, q(w, demo::qdq_nvfp4)));  // 2-D blocks differ from 1-D ones
    // The quantized weight gradient estimates the exact one.
    const auto exact = dy2.t().mm(x2);
    const double rel = (lin->weight.grad() - exact).norm().item<double>() / exact.norm().item<double>();
    CATCH_CHECK(rel > 0.0);
    CATCH_CHECK(rel < 0.6);
  }
  // A pinned operator (the recipe's head) is a plain linear: its forward and
  // gradients are F.linear's, bit for bit, whatever the promotion mask says.
  {
    demo::OpState head;
    head.index = 0;
    head.pinned = true;
    qc.promoted = {0};
    demo::QLinear h(48, 32, &head, &qc);
    torch::nn::init::normal_(h->weight, 0.0, 0.1);
    const auto xh = torch::randn({2, 16, 48}).requires_grad_(true);
    const auto yh = h->forward(xh);
    yh.backward(dy);
    torch::NoGradGuard ng;
    const auto x2 = xh.detach().reshape({32, 48}), dy2 = dy.reshape({32, 32});
    CATCH_CHECK(torch::equal(yh.detach().reshape({32, 32}), torch::addmm(h->bias.detach(), x2, h->weight.detach().t())));
    CATCH_CHECK(torch::equal(xh.grad().reshape({32, 48}), dy2.mm(h->weight.detach())));
    CATCH_CHECK(torch::equal(h->weight.grad(), dy2.t().mm(x2)));
    CATCH_CHECK(head.noise == 0.0);
  }
  // A bad configuration is refused by name.
  demo::QuantConfig bad = qc.cfg;
  bad.wgrad = false;
  CATCH_CHECK_THROWS_WITH(bad.check(), Catch::Contains("nvfp4-recipe"));
}
