// Tests of gnmr/core/half.hpp: the bf16/fp16 decoders and encoders against
// an independent ldexp-based decoder and a nearest-candidate encoder
// (tests/support/half_ref.hpp): reference values, all 65536 patterns,
// midpoints and neighbours, random floats and round trips, and subnormals
// under FTZ/DAZ.
#include "gnmr/core/half.hpp"

#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "../support/half_ref.hpp"

#if defined(__SSE2__) && (defined(__x86_64__) || defined(_M_X64))
#include <xmmintrin.h>
#define GNMR_TEST_HAVE_MXCSR 1
#endif

using gnmr::DType;
using namespace halfref;

TEST_CASE("half decoders: reference values", "[norms][half]") {
  CHECK(gnmr::bf16_to_float(0x3f80) == 1.0f);
  CHECK(gnmr::bf16_to_float(0xbf80) == -1.0f);
  CHECK(gnmr::bf16_to_float(0x4049) == 3.140625f);
  CHECK(gnmr::bf16_to_float(0x7f7f) == 3.38953139e38f);
  CHECK(gnmr::bf16_to_float(0x0080) == FLT_MIN);
  CHECK(gnmr::bf16_to_float(0x0001) == std::ldexp(1.0f, -133));  // bf16 subnormal
  CHECK(std::isinf(gnmr::bf16_to_float(0x7f80)));
  CHECK(gnmr::bf16_to_float(0xff80) < 0.0f);
  CHECK(std::isnan(gnmr::bf16_to_float(0x7fc0)));
  CHECK(std::signbit(gnmr::bf16_to_float(0x8000)));

  CHECK(gnmr::fp16_to_float(0x3c00) == 1.0f);
  CHECK(gnmr::fp16_to_float(0xc000) == -2.0f);
  CHECK(gnmr::fp16_to_float(0x3555) == 0.333251953125f);
  CHECK(gnmr::fp16_to_float(0x7bff) == 65504.0f);
  CHECK(gnmr::fp16_to_float(0x0400) == std::ldexp(1.0f, -14));   // smallest normal
  CHECK(gnmr::fp16_to_float(0x0001) == std::ldexp(1.0f, -24));   // smallest subnormal
  CHECK(gnmr::fp16_to_float(0x03ff) == 1023.0f * std::ldexp(1.0f, -24));
  CHECK(gnmr::fp16_to_float(0x8001) == -std::ldexp(1.0f, -24));
  CHECK(std::isinf(gnmr::fp16_to_float(0x7c00)));
  CHECK(gnmr::fp16_to_float(0xfc00) < 0.0f);
  CHECK(std::isnan(gnmr::fp16_to_float(0x7e00)));
  CHECK(std::isnan(gnmr::fp16_to_float(0x7c01)));  // signalling pattern is still NaN
  CHECK(std::signbit(gnmr::fp16_to_float(0x8000)));
}

TEST_CASE("half decoders: all 65536 patterns match the reference", "[norms][half]") {
  for (DType t : {DType::kBF16, DType::kF16}) {
    std::uint32_t bad = 0;
    for (std::uint32_t h = 0; h < 0x10000u; ++h) {
      const std::uint16_t hh = static_cast<std::uint16_t>(h);
      if (!same_value(lib_decode(hh, t), ref_decode(hh, t))) {
        if (bad++ < 5) FAIL_CHECK(gnmr::dtype_name(t) << " pattern 0x" << std::hex << h);
      }
    }
    CHECK(bad == 0);
  }
}

#ifdef GNMR_TEST_HAVE_MXCSR
TEST_CASE("fp16 decode of subnormals survives FTZ/DAZ", "[norms][half]") {
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);  // FTZ | DAZ, as -ffast-math's crtfastmath sets
  const float sub1 = gnmr::fp16_to_float(0x0001);
  const float sub3ff = gnmr::fp16_to_float(0x83ff);
  _mm_setcsr(saved);
  CHECK(f_bits(sub1) == 0x33800000u);   // 2^-24
  CHECK(f_bits(sub3ff) == 0xb87fc000u);  // -1023 * 2^-24
}
#endif

TEST_CASE("half encoders: reference values and special cases", "[norms][half]") {
  CHECK(gnmr::float_to_bf16(1.0f) == 0x3f80);
  CHECK(gnmr::float_to_fp16(1.0f) == 0x3c00);
  CHECK(gnmr::float_to_fp16(-2.0f) == 0xc000);
  CHECK(gnmr::float_to_fp16(65504.0f) == 0x7bff);
  CHECK(gnmr::float_to_fp16(65519.99f) == 0x7bff);
  CHECK(gnmr::float_to_fp16(65520.0f) == 0x7c00);  // tie with odd max -> Inf
  CHECK(gnmr::float_to_fp16(-1e10f) == 0xfc00);
  CHECK(gnmr::float_to_fp16(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(gnmr::float_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);  // tie -> even (0)
  CHECK(gnmr::float_to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
  CHECK(gnmr::float_to_fp16(3.0f * std::ldexp(1.0f, -25)) == 0x0002);  // 1.5 ulp tie -> 2
  CHECK(gnmr::float_to_fp16(-std::ldexp(1.0f, -30)) == 0x8000);
  CHECK(gnmr::float_to_fp16(FLT_TRUE_MIN) == 0x0000);
  CHECK(gnmr::float_to_fp16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // tie, even below
  CHECK(gnmr::float_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // tie, even above
  CHECK(gnmr::float_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);
  CHECK(gnmr::float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);
  CHECK(gnmr::float_to_bf16(FLT_MAX) == 0x7f80);  // beyond bf16 max + half ulp
  CHECK(gnmr::float_to_bf16(-FLT_MAX) == 0xff80);
  CHECK(gnmr::float_to_bf16(FLT_TRUE_MIN) == 0x0000);
  CHECK(gnmr::float_to_bf16(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(gnmr::float_to_fp16(-std::numeric_limits<float>::infinity()) == 0xfc00);
  // NaN stays NaN (never becomes Inf), sign kept.
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  const float nan_low_payload = bits_f(0x7f800001u);  // payload only in the low bits
  for (DType t : {DType::kBF16, DType::kF16}) {
    CHECK(std::isnan(lib_decode(lib_encode(qnan, t), t)));
    CHECK(std::isnan(lib_decode(lib_encode(nan_low_payload, t), t)));
    CHECK(std::signbit(lib_decode(lib_encode(-qnan, t), t)));
  }
}

TEST_CASE("half encoders: exact values, midpoints and neighbours", "[norms][half]") {
  // For every finite half h: h itself, the midpoint to the next value (a tie)
  // and one float ulp either side of that midpoint.
  for (DType t : {DType::kBF16, DType::kF16}) {
    const std::uint32_t inf = t == DType::kBF16 ? 0x7f80u : 0x7c00u;
    std::uint32_t bad = 0;
    for (std::uint32_t s : {0u, 0x8000u}) {
      for (std::uint32_t h = 0; h < inf; ++h) {
        const long double v = ref_decode(static_cast<std::uint16_t>(h), t);
        const long double vn = h + 1 == inf ? (t == DType::kBF16 ? std::ldexp(1.0L, 128) : 65536.0L)
                                            : ref_decode(static_cast<std::uint16_t>(h + 1), t);
        const long double mid = (v + vn) / 2;
        if (mid > FLT_MAX) continue;  // bf16's last midpoint is beyond fp32
        const float fm = static_cast<float>(mid);
        REQUIRE(static_cast<long double>(fm) == mid);  // midpoints are exact in fp32
        const float probes[4] = {static_cast<float>(v), fm, std::nextafter(fm, 0.0f),
                                 std::nextafter(fm, FLT_MAX)};
        for (float p : probes) {
          const float ps = s ? -p : p;
          if (lib_encode(ps, t) != ref_encode(ps, t)) {
            if (bad++ < 5)
              FAIL_CHECK(gnmr::dtype_name(t) << " encode " << ps << " got 0x" << std::hex
                                             << lib_encode(ps, t) << " want 0x" << ref_encode(ps, t));
          }
        }
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("half encoders: random floats and round trips", "[norms][half]") {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (DType t : {DType::kBF16, DType::kF16}) {
    std::uint32_t bad = 0;
    for (int i = 0; i < 200000; ++i) {
      float f = bits_f(bits(rng));
      if (t == DType::kF16 && i % 2)  // half of the probes inside fp16's range
        f = std::ldexp(1.0f + static_cast<float>(rng() & 0x7fffffu) / 8388608.0f,
                       static_cast<int>(rng() % 48) - 30) * ((rng() & 1u) ? -1.0f : 1.0f);
      if (!std::isfinite(f)) continue;
      if (lib_encode(f, t) != ref_encode(f, t) && bad++ < 5)
        FAIL_CHECK(gnmr::dtype_name(t) << " encode " << f);
    }
    CHECK(bad == 0);
    // Every non-NaN pattern survives half -> float -> half.
    std::uint32_t rt_bad = 0;
    for (std::uint32_t h = 0; h < 0x10000u; ++h) {
      const float f = lib_decode(static_cast<std::uint16_t>(h), t);
      if (std::isnan(f)) continue;
      rt_bad += lib_encode(f, t) != h;
    }
    CHECK(rt_bad == 0);
  }
}
