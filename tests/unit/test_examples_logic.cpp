// What the examples' kernels compute, checked on the CPU (the CUDA examples
// compare the device with these same functions, and this machine may have
// no GPU): FP8 E4M3 / FP4 E2M1 quantization against a brute-force nearest
// code search over every code of the format, the fake-quantized linear
// layer, the SGD-with-momentum element rule against hand-computed values,
// and the expectations the two CUDA examples rely on (which steps are
// promoted, which paths differ, which decisions the SGD run produces).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "../../examples/fake_quant_case.hpp"
#include "../../examples/sgd_case.hpp"

namespace {

// Every non-negative finite value of a format, from its fields (E4M3FN: the
// all-ones code is NaN, so the largest is exponent 15, mantissa 6).
std::vector<double> codes(int ebits, int mbits, int bias, bool fn) {
  std::vector<double> v;
  for (int e = 0; e < (1 << ebits); ++e)
    for (int m = 0; m < (1 << mbits); ++m) {
      if (fn && e == (1 << ebits) - 1 && m == (1 << mbits) - 1) continue;
      v.push_back(e == 0 ? std::ldexp(m, 1 - bias - mbits) : std::ldexp((1 << mbits) + m, e - bias - mbits));
    }
  return v;  // ascending; index parity = mantissa parity
}

// Nearest code, ties to the even code, saturating at the largest.
double nearest(const std::vector<double>& c, double x) {
  const double a = std::fabs(x);
  if (a >= c.back()) return std::copysign(c.back(), x);
  std::size_t i = 0;
  while (c[i + 1] <= a) ++i;  // c[i] <= a < c[i+1]
  const double dl = a - c[i], dh = c[i + 1] - a;
  const double r = dl < dh ? c[i] : dh < dl ? c[i + 1] : (i % 2 == 0 ? c[i] : c[i + 1]);
  return std::copysign(r, x);
}

void check_format(const fq::Format& f, const std::vector<double>& c) {
  REQUIRE(c.back() == static_cast<double>(f.max));
  // Every code and every midpoint (a tie) and its neighbours.
  for (std::size_t i = 0; i < c.size(); ++i) {
    for (double s : {1.0, -1.0}) {
      const float x = static_cast<float>(s * c[i]);
      REQUIRE(fq::quantize(x, f) == x);
      if (i + 1 < c.size()) {
        const float mid = static_cast<float>(s * (c[i] + c[i + 1]) / 2);
        for (float y : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 2.0f * mid)}) {
          INFO("x = " << y);
          REQUIRE(fq::quantize(y, f) == static_cast<float>(nearest(c, y)));
        }
      }
    }
  }
  // Random magnitudes across the range and beyond it.
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> lg(-14.0, 12.0);
  for (int k = 0; k < 200000; ++k) {
    const float x = static_cast<float>((k % 2 ? -1.0 : 1.0) * std::exp2(lg(rng)));
    INFO("x = " << x);
    REQUIRE(fq::quantize(x, f) == static_cast<float>(nearest(c, x)));
  }
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(fq::quantize(inf, f) == f.max);  // no infinities: saturate
  CHECK(fq::quantize(-inf, f) == -f.max);
  CHECK(std::isnan(fq::quantize(std::numeric_limits<float>::quiet_NaN(), f)));
  CHECK(fq::quantize(1e-30f, f) == 0.0f);
}

}  // namespace

TEST_CASE("FP8 E4M3 quantization: nearest code, ties to even, saturating at 448", "[examples][fake-quant]") {
  const std::vector<double> c = codes(4, 3, 7, true);
  CHECK(c.size() == 127u);
  CHECK(c[1] == std::ldexp(1.0, -9));  // smallest subnormal
  CHECK(c[8] == std::ldexp(1.0, -6));  // smallest normal
  check_format(fq::e4m3(), c);
  // Hand-picked: 17 lies between 16 and 18 (spacing 2): a tie to 16 (even);
  // 19 is a tie between 18 (odd mantissa) and 20 -> 20; 460 -> 448.
  CHECK(fq::quantize(17.0f, fq::e4m3()) == 16.0f);
  CHECK(fq::quantize(19.0f, fq::e4m3()) == 20.0f);
  CHECK(fq::quantize(460.0f, fq::e4m3()) == 448.0f);
}

TEST_CASE("FP4 E2M1 quantization: the grid 0 .. 6, ties to even", "[examples][fake-quant]") {
  const std::vector<double> c = codes(2, 1, 1, false);
  CHECK(c == std::vector<double>{0, 0.5, 1, 1.5, 2, 3, 4, 6});
  check_format(fq::e2m1(), c);
  const fq::Format f = fq::e2m1();
  const float in[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 7.0f, -2.5f, -0.2f};
  const float out[] = {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f, 6.0f, -2.0f, -0.0f};
  for (int k = 0; k < 10; ++k) CHECK(fq::quantize(in[k], f) == out[k]);
}

TEST_CASE("fake quantization with a per-tensor scale, and the linear layer's two paths",
          "[examples][fake-quant]") {
  const fq::Format f = fq::e2m1();
  // amax maps onto 6: a tensor with an outlier of 30 has scale 5, so every
  // value below 1.25 (half the smallest step of 2.5) rounds to 0.
  const std::vector<float> x = {30.0f, 1.0f, -1.3f, 0.5f, 7.4f};
  const float s = fq::tensor_scale(fq::amax(x.data(), 5), f);
  CHECK(s == 5.0f);
  CHECK(fq::fake_quant(30.0f, s, f) == 30.0f);
  CHECK(fq::fake_quant(1.0f, s, f) == 0.0f);
  CHECK(fq::fake_quant(-1.3f, s, f) == -2.5f);
  CHECK(fq::fake_quant(7.4f, s, f) == 7.5f);
  CHECK(fq::tensor_scale(0.0f, f) == 1.0f);
  CHECK(fq::tensor_scale(std::numeric_limits<float>::infinity(), f) == 1.0f);

  // y = W x + b; promoted: exact operands; low: quantized operands, bias as is.
  const std::vector<float> w = {0.5f, -1.0f, 2.0f, 0.25f, 3.0f};
  const float ws = fq::tensor_scale(fq::amax(w.data(), 5), f);  // 0.5
  CHECK(fq::linear_out(w.data(), x.data(), 5, 0.1f, true, f, ws, s) ==
        ((((0.5f * 30.0f + -1.0f * 1.0f) + 2.0f * -1.3f) + 0.25f * 0.5f) + 3.0f * 7.4f) + 0.1f);
  // Quantized W (scale 0.5): 0.5 -> 0.5, -1 -> -1, 2 -> 2, 0.25 -> 0.25 (0.5 * 0.5), 3 -> 3.
  // Quantized x (scale 5): 30, 0, -2.5, 0, 7.5.
  CHECK(fq::linear_out(w.data(), x.data(), 5, 0.1f, false, f, ws, s) ==
        ((((0.5f * 30.0f + -1.0f * 0.0f) + 2.0f * -2.5f) + 0.25f * 0.0f) + 3.0f * 7.5f) + 0.1f);
}

TEST_CASE("the CUDA fake-quant example's premises hold on the CPU", "[examples][promotion]") {
  const fq_case::Case c = fq_case::make_case();
  const fq_case::Replay r = fq_case::replay(c);
  REQUIRE(r.promoted.size() == static_cast<std::size_t>(fq_case::kSteps));
  for (int s = 1; s <= fq_case::kSteps; ++s) {
    INFO("step " << s);
    CHECK_FALSE(r.promoted[s - 1][0]);
    CHECK(r.promoted[s - 1][1] == (s >= fq_case::kSpikeStep + 1 && s <= fq_case::kSpikeStep + fq_case::kLock));
    // The two paths differ on every step, so the device's bits say which it took.
    for (std::uint32_t u = 0; u < fq_case::kUnits; ++u) {
      const std::vector<float> other = fq_case::forward(c, u, s, !r.promoted[s - 1][u]);
      CHECK(std::memcmp(other.data(), r.y[s - 1][u].data(), other.size() * sizeof(float)) != 0);
    }
  }
}

TEST_CASE("SGD with momentum applies a decision: hand values, reset, skip as a select", "[examples][sgd]") {
  const sgdm::Hyper h{0.1f, 0.9f, 0.0f};
  SECTION("plain step and a clipped one") {
    float p = 1.0f, buf = 0.5f;
    sgdm::update(h, gnmr::UnitDecision{1.0f, 0u}, p, buf, 2.0f);
    CHECK(buf == 0.9f * 0.5f + 2.0f);  // 2.45
    CHECK(p == 1.0f - 0.1f * (0.9f * 0.5f + 2.0f));
    float q = 1.0f, b2 = 0.5f;
    sgdm::update(h, gnmr::UnitDecision{0.25f, gnmr::kInRecovery}, q, b2, 2.0f);
    CHECK(b2 == 0.9f * 0.5f + 0.5f);  // the gradient scaled to 0.5
  }
  SECTION("weight decay is added to the scaled gradient") {
    const sgdm::Hyper hw{0.1f, 0.0f, 0.5f};
    float p = 2.0f, buf = 0.0f;
    sgdm::update(hw, gnmr::UnitDecision{0.5f, gnmr::kInRecovery}, p, buf, 4.0f);
    CHECK(buf == 0.5f * 4.0f + 0.5f * 2.0f);  // 3
    CHECK(p == 2.0f - 0.1f * 3.0f);
  }
  SECTION("reset zeroes the buffer before the update") {
    float p = 1.0f, buf = 100.0f;
    sgdm::update(h, gnmr::UnitDecision{1.0f, gnmr::kResetMoments | gnmr::kGranted}, p, buf, 2.0f);
    CHECK(buf == 2.0f);
    CHECK(p == 1.0f - 0.2f);
  }
  SECTION("a skipped unit keeps p and buf bit for bit, whatever the gradient") {
    for (float g : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), 3.0f}) {
      float p = 0.75f, buf = -0.125f;
      sgdm::update(h, gnmr::UnitDecision{0.0f, gnmr::kSkip | gnmr::kNonFinite}, p, buf, g);
      CHECK(p == 0.75f);
      CHECK(buf == -0.125f);
    }
  }
  SECTION("a NaN gradient in a unit that is not skipped is not hidden") {
    float p = 0.75f, buf = 0.0f;
    sgdm::update(h, gnmr::UnitDecision{1.0f, 0u}, p, buf, std::numeric_limits<float>::quiet_NaN());
    CHECK(std::isnan(p));
  }
}

TEST_CASE("the CUDA SGD example's run decides what its header says", "[examples][sgd]") {
  // sgd_case.hpp's replay: the recommended controller (gnmr::make_default)
  // on the partials the device computes, which sgd_momentum_cuda.cu then
  // compares with gnmr::cuda::make_default's decisions bit for bit.
  const sgd_case::Replay r = sgd_case::replay();
  CHECK(r.aligned);
  const auto dec = [&r](int t, std::uint32_t u) { return r.decisions[(t - 1) * sgd_case::kUnits + u]; };
  const auto applied = [&r, &dec](int t, std::uint32_t u) {  // the norm the update receives: scale x norm
    return dec(t, u).scale * std::sqrt(r.partials[(t - 1) * sgd_case::kUnits + u]);
  };
  REQUIRE(r.decisions.size() == static_cast<std::size_t>(sgd_case::kSteps) * sgd_case::kUnits);
  REQUIRE(r.partials.size() == r.decisions.size());
  int grants = 0, nonfinite = 0, skips = 0, triggers = 0, resets = 0;
  for (int t = 1; t <= sgd_case::kSteps; ++t)
    for (std::uint32_t u = 0; u < sgd_case::kUnits; ++u) {
      const std::uint32_t f = dec(t, u).flags;
      grants += (f & gnmr::kGranted) != 0u;
      nonfinite += (f & gnmr::kNonFinite) != 0u;
      skips += (f & gnmr::kSkip) != 0u;
      triggers += (f & gnmr::kTriggered) != 0u;
      resets += (f & gnmr::kResetMoments) != 0u;
      // A grant at step g promotes steps g+1 .. g+kLock: kPromote on the
      // decisions of steps g .. g+kLock-1, on the granted unit only.
      const bool lock1 = u == 1 && t >= sgd_case::kSpikeStep && t < sgd_case::kSpikeStep + sgd_case::kLock;
      const bool lock0 = u == 0 && t >= sgd_case::kSecondSpikeStep && t < sgd_case::kSecondSpikeStep + sgd_case::kLock;
      INFO("step " << t << " unit " << u);
      CHECK(((f & gnmr::kPromote) != 0u) == (lock0 || lock1));
      // The stabilizer scales every unit on every step: a scale of 1 is not
      // "nothing happened", the flags are.
      if (!(f & gnmr::kSkip)) CHECK(dec(t, u).scale != 1.0f);
    }
  CHECK(grants == 2);
  CHECK(triggers == 2);  // the two spikes and nothing else
  CHECK(nonfinite == 1);
  CHECK(skips == 1);
  CHECK(resets == 0);  // the default's recovery is clip and promote
  const std::uint32_t grant = gnmr::kTriggered | gnmr::kGranted | gnmr::kInRecovery | gnmr::kPromote;
  CHECK(dec(sgd_case::kSpikeStep, 1).flags == grant);
  CHECK(dec(sgd_case::kSecondSpikeStep, 0).flags == grant);
  // GNMR's clip on top of the stabilizer: the spiking unit's update is a
  // small fraction of its calm one (the stabilizer alone would let it grow).
  CHECK(applied(sgd_case::kSpikeStep, 1) < 0.1f * applied(sgd_case::kSpikeStep - 1, 1));
  CHECK(applied(sgd_case::kSecondSpikeStep, 0) < 0.1f * applied(sgd_case::kSecondSpikeStep - 1, 0));
  CHECK(dec(sgd_case::kNanStep, 2).flags == (gnmr::kNonFinite | gnmr::kSkip));
  CHECK(dec(sgd_case::kNanStep, 2).scale == 0.0f);
  for (const auto& p : r.p)
    for (float x : p) REQUIRE(std::isfinite(x));  // the NaN never reached the weights
}
