// Tests of gnmr/host/unit_norms.hpp: host_unit_partials against long-double
// references over random layouts, dtypes and distributions (exact element
// values from the independent half decoder in tests/support/half_ref.hpp),
// hand-computed values, NaN/Inf poisoning, overflow past FLT_MAX, custom
// norm policies, validation and shard coverage. The codecs themselves are
// tested in test_half.cpp.
#include "gnmr/host/unit_norms.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../support/half_ref.hpp"

using gnmr::DType;
using gnmr::Segment;
using namespace halfref;

// ---- host_unit_partials -------------------------------------------------
namespace {

// A gradient buffer of some dtype with its exactly decoded values.
struct Buf {
  DType t;
  std::vector<float> f32;
  std::vector<std::uint16_t> h16;
  std::vector<long double> val;  // what the elements decode to (reference)
  const void* data() const {
    return t == DType::kF32 ? static_cast<const void*>(f32.data()) : static_cast<const void*>(h16.data());
  }
  void set(std::size_t i, float x) {
    if (t == DType::kF32) {
      f32[i] = x;
      val[i] = x;
    } else {
      h16[i] = lib_encode(x, t);
      val[i] = ref_decode(h16[i], t);
    }
  }
};

Buf make_buf(DType t, std::size_t n, int dist, std::mt19937_64& rng) {
  Buf b;
  b.t = t;
  (t == DType::kF32 ? b.f32.resize(n) : b.h16.resize(n));
  b.val.resize(n);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  // fp16 cannot hold 1e3^2-scale spikes of large tensors comfortably: keep
  // its values in range, bf16/f32 get wider scales.
  const float big = t == DType::kF16 ? 100.0f : 1e6f;
  for (std::size_t i = 0; i < n; ++i) {
    float x = 0.0f;
    switch (dist) {
      case 0: x = normal(rng) * 1e-3f; break;                    // typical gradient
      case 1: x = uni(rng); break;                                // uniform
      case 2: x = normal(rng) / std::max(1e-3f, std::fabs(normal(rng))); break;  // heavy tail
      case 3: x = (rng() % 97 == 0) ? normal(rng) * big : 0.0f; break;  // sparse spikes
      case 4: x = normal(rng) * (t == DType::kF16 ? 1e-6f : 1e-39f); break;  // subnormals
      default: x = normal(rng) * big; break;
    }
    if (t == DType::kF16) x = std::max(-60000.0f, std::min(60000.0f, x));
    b.set(i, x);
  }
  return b;
}

struct Layout {
  std::vector<Buf> bufs;
  std::vector<Segment> segs;
  std::size_t units = 0;
};

std::size_t pick_len(std::mt19937_64& rng) {
  static const std::size_t small[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1023, 1025};
  if (rng() % 100 < 60) return small[rng() % (sizeof small / sizeof small[0])];
  return 1 + rng() % 20000;
}

// mixed: segments of random dtypes (a unit may mix them); huge: unit 0
// starts with a ~1e6-element (odd-sized) segment.
Layout make_layout(DType t, bool mixed, std::mt19937_64& rng, bool allow_huge) {
  Layout L;
  L.units = 1 + rng() % 12;
  for (std::size_t u = 0; u < L.units; ++u) {
    const std::size_t per = 1 + rng() % 5;
    for (std::size_t k = 0; k < per; ++k) {
      const DType dt = mixed ? static_cast<DType>(rng() % 3) : t;
      const std::size_t len = (allow_huge && u == 0 && k == 0) ? 1000003 : pick_len(rng);
      L.bufs.push_back(make_buf(dt, len, static_cast<int>(rng() % 6), rng));
      L.segs.push_back(Segment{nullptr, L.bufs.back().val.size(), dt, static_cast<std::uint32_t>(u)});
    }
  }
  // Interleave the units' segments; keep segs[i] <-> bufs[i].
  std::vector<std::size_t> perm(L.segs.size());
  for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  Layout S;
  S.units = L.units;
  for (std::size_t i : perm) {
    S.bufs.push_back(std::move(L.bufs[i]));
    S.segs.push_back(L.segs[i]);
  }
  for (std::size_t i = 0; i < S.segs.size(); ++i) S.segs[i].data = S.bufs[i].data();
  return S;
}

enum class Kind { kSumSq, kMaxAbs };

std::vector<long double> reference(const Layout& L, Kind k) {
  std::vector<long double> r(L.units, 0.0L);
  for (std::size_t i = 0; i < L.segs.size(); ++i) {
    long double& a = r[L.segs[i].unit];
    for (long double v : L.bufs[i].val) {
      if (k == Kind::kSumSq) a += v * v;
      else if (std::isnan(v) || std::isnan(a)) a = std::numeric_limits<long double>::quiet_NaN();
      else a = std::max(a, std::fabs(v));
    }
  }
  return r;
}

// got is within one float ulp of the exact (long double) value.
bool close_to(float got, long double want) {
  if (std::isnan(want)) return std::isnan(got);
  if (want > FLT_MAX) return got == FLT_MAX || (std::isinf(got) && got > 0);
  const float w = static_cast<float>(want);
  return got == w || got == std::nextafter(w, 0.0f) || got == std::nextafter(w, FLT_MAX);
}

template <class Norm>
std::vector<float> run(const Layout& L) {
  std::vector<float> out(L.units, std::numeric_limits<float>::quiet_NaN());  // poison
  gnmr::host_unit_partials<Norm>(L.segs.data(), L.segs.size(), out.data(), out.size());
  return out;
}

// A unit with bf16/fp16 segments: within the fast order's bound
// (docs/algorithm.md, "Norms on the host": gamma_64 and the double folds,
// about 64 u, relative), plus each square's underflow (< 2^-149 a term: a
// bf16 subnormal's square is below every float).
bool within_fast_bound(float got, long double want, std::uint64_t count) {
  if (std::isnan(want)) return std::isnan(got);
  if (want > FLT_MAX) return got == FLT_MAX || (std::isinf(got) && got > 0);
  const long double u = std::ldexp(1.0L, -24);
  const long double rel = 64 * u / (1 - 64 * u) + u / 2 + std::ldexp(1.0L, -40);
  return std::fabs(static_cast<long double>(got) - want) <= rel * want + count * std::ldexp(1.0L, -149);
}

void check_layout(const Layout& L) {
  const std::vector<long double> ss = reference(L, Kind::kSumSq);
  const std::vector<long double> mx = reference(L, Kind::kMaxAbs);
  const std::vector<float> l2 = run<gnmr::L2Norm>(L);
  const std::vector<float> rms = run<gnmr::RmsNorm>(L);
  const std::vector<float> linf = run<gnmr::LinfNorm>(L);
  std::vector<std::uint64_t> count16(L.units, 0);
  for (const Segment& s : L.segs)
    if (s.dtype != DType::kF32) count16[s.unit] += s.numel;
  for (std::size_t u = 0; u < L.units; ++u) {
    INFO("unit " << u << " of " << L.units << ", " << L.segs.size() << " segments");
    // fp32 alone is summed in double: one float ulp. bf16/fp16 in fp32
    // lanes (HostOrder::kFast, the default): the derived bound.
    if (count16[u] == 0)
      CHECK(close_to(l2[u], ss[u]));
    else
      CHECK(within_fast_bound(l2[u], ss[u], count16[u]));
    CHECK(f_bits(rms[u]) == f_bits(l2[u]));  // RMS's partial is the sum of squares too
    CHECK(static_cast<long double>(linf[u]) == mx[u]);  // a max is exact
    CHECK(std::isfinite(l2[u]));  // poison overwritten (all test data is finite)
  }
}

}  // namespace

TEST_CASE("host_unit_partials matches long-double references", "[norms]") {
  std::mt19937_64 rng(2026);
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int rep = 0; rep < 12; ++rep) {
      INFO(gnmr::dtype_name(t) << " layout " << rep);
      check_layout(make_layout(t, false, rng, rep < 2));
    }
  }
  for (int rep = 0; rep < 6; ++rep) {
    INFO("mixed dtypes, layout " << rep);
    check_layout(make_layout(DType::kF32, true, rng, false));
  }
}

TEST_CASE("host_unit_partials: hand-computed values", "[norms]") {
  const float a[3] = {3.0f, -4.0f, 0.5f};
  const std::uint16_t b[2] = {gnmr::float_to_bf16(-12.0f), gnmr::float_to_bf16(1.0f)};
  const std::uint16_t h[1] = {0x0001};  // 2^-24
  const std::vector<Segment> segs = {{a, 3, DType::kF32, 1}, {b, 2, DType::kBF16, 0},
                                     {a, 2, DType::kF32, 0}, {h, 1, DType::kF16, 2}};
  std::vector<float> p(3);
  gnmr::host_unit_partials(segs, p);
  CHECK(p[0] == 144.0f + 1.0f + 9.0f + 16.0f);
  CHECK(p[1] == 25.25f);
  CHECK(p[2] == std::ldexp(1.0f, -48));
  gnmr::host_unit_partials<gnmr::LinfNorm>(segs, p);
  CHECK(p[0] == 12.0f);
  CHECK(p[1] == 4.0f);
  CHECK(p[2] == std::ldexp(1.0f, -24));
  CHECK(gnmr::host_unit_partials<gnmr::RmsNorm>(segs, 3) == std::vector<float>{170.0f, 25.25f, std::ldexp(1.0f, -48)});
  CHECK(gnmr::unit_numel(segs, 3) == std::vector<std::uint64_t>{4, 3, 1});
  CHECK(gnmr::unit_numel<gnmr::RmsNorm>(segs.data(), segs.size(), 3) == std::vector<std::uint64_t>{4, 3, 1});
}

TEST_CASE("host_unit_partials: NaN/Inf poison only their unit", "[norms]") {
  std::mt19937_64 rng(7);
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    Layout L = make_layout(t, false, rng, false);
    const std::vector<float> clean_l2 = run<gnmr::L2Norm>(L);
    const std::vector<float> clean_inf = run<gnmr::LinfNorm>(L);
    for (int what = 0; what < 4; ++what) {  // NaN, +Inf, -Inf, NaN and Inf together
      Layout P = L;
      for (std::size_t i = 0; i < P.segs.size(); ++i) P.segs[i].data = P.bufs[i].data();
      const std::size_t s = rng() % P.segs.size();
      Buf& b = P.bufs[s];
      const std::size_t pos = rng() % b.val.size();
      b.set(pos, what == 0 ? qnan : (what == 2 ? -inf : inf));
      if (what == 3) b.set((pos + b.val.size() / 2) % b.val.size(), qnan);  // may hit pos: still NaN
      const std::uint32_t bad_unit = P.segs[s].unit;
      const std::vector<float> l2 = run<gnmr::L2Norm>(P);
      const std::vector<float> linf = run<gnmr::LinfNorm>(P);
      const bool has_nan = what == 0 || what == 3;
      INFO(gnmr::dtype_name(t) << " case " << what);
      for (std::size_t u = 0; u < P.units; ++u) {
        if (u == bad_unit) {
          CHECK_FALSE(std::isfinite(l2[u]));
          CHECK_FALSE(std::isfinite(linf[u]));
          CHECK(std::isnan(l2[u]) == has_nan);
          CHECK(std::isnan(linf[u]) == has_nan);
          if (!has_nan) CHECK((l2[u] > 0 && linf[u] > 0));
        } else {
          CHECK(f_bits(l2[u]) == f_bits(clean_l2[u]));
          CHECK(f_bits(linf[u]) == f_bits(clean_inf[u]));
        }
      }
    }
  }
}

TEST_CASE("host_unit_partials: a sum of squares past FLT_MAX is +Inf", "[norms]") {
  const std::vector<float> big(4, 1e20f);  // each square is finite in double, sum 4e40
  const float ok[1] = {1e19f};             // 1e38 fits in fp32
  const std::vector<Segment> segs = {{big.data(), 4, DType::kF32, 0}, {ok, 1, DType::kF32, 1}};
  const std::vector<float> p = gnmr::host_unit_partials(segs, 2);
  CHECK(std::isinf(p[0]));
  CHECK(p[0] > 0);
  CHECK(close_to(p[1], 1e38L * (static_cast<long double>(1e19f) / 1e19L) *
                           (static_cast<long double>(1e19f) / 1e19L)));
}

namespace {
// Custom policies exercise the generic (element/combine) paths.
struct AbsSumNorm {
  static constexpr const char* kName = "l1";
  static constexpr gnmr::Combine kCombine = gnmr::Combine::kSum;
  static float identity() { return 0.0f; }
  static float element(float x) { return std::fabs(x); }
  static float combine(float a, float b) { return a + b; }
  static float finish(float p, double) { return p; }
};
struct MaxSquareNorm {
  static constexpr const char* kName = "maxsq";
  static constexpr gnmr::Combine kCombine = gnmr::Combine::kMax;
  static float identity() { return 0.0f; }
  static float element(float x) { return x * x; }
  static float combine(float a, float b) { return gnmr::math::max_nan(a, b); }
  static float finish(float p, double) { return p; }
};
}  // namespace

TEST_CASE("host_unit_partials: custom norm policies use element/combine", "[norms]") {
  std::mt19937_64 rng(99);
  CHECK(std::string(AbsSumNorm::kName) != MaxSquareNorm::kName);  // (policies need a name)
  for (int rep = 0; rep < 4; ++rep) {
    const Layout L = make_layout(static_cast<DType>(rep % 3), rep == 3, rng, false);
    const std::vector<float> l1 = run<AbsSumNorm>(L);
    const std::vector<float> msq = run<MaxSquareNorm>(L);
    for (std::size_t u = 0; u < L.units; ++u) {
      long double s = 0.0L;
      float m = 0.0f;
      for (std::size_t i = 0; i < L.segs.size(); ++i) {
        if (L.segs[i].unit != u) continue;
        for (long double v : L.bufs[i].val) {
          s += std::fabs(v);
          const float fv = static_cast<float>(v);
          m = std::max(m, static_cast<float>(static_cast<double>(fv) * fv));
        }
      }
      CHECK(close_to(l1[u], s));
      CHECK(f_bits(msq[u]) == f_bits(m));
    }
  }
}

TEST_CASE("host_unit_partials and unit_numel: validation", "[norms]") {
  const float x[4] = {1, 2, 3, 4};
  std::vector<float> out(3);
  const float poison = std::numeric_limits<float>::quiet_NaN();
  auto expect = [&](std::vector<Segment> segs, std::size_t units, const std::string& what,
                    bool numel_too = true) {
    std::fill(out.begin(), out.end(), poison);
    float* dst = out.data();  // units <= 3 below
    CHECK_THROWS_WITH(gnmr::host_unit_partials(segs.data(), segs.size(), dst, units),
                      Catch::Contains(what));
    CHECK_THROWS_AS(gnmr::host_unit_partials(segs.data(), segs.size(), dst, units),
                    std::invalid_argument);
    for (float v : out) CHECK(std::isnan(v));  // untouched
    if (numel_too) {
      CHECK_THROWS_WITH(gnmr::unit_numel(segs.data(), segs.size(), units), Catch::Contains(what));
    }
  };
  const Segment ok0{x, 4, DType::kF32, 0}, ok1{x, 2, DType::kBF16, 1};
  expect({ok0, ok1, Segment{x, 0, DType::kF32, 1}}, 2, "segment 2 is empty");
  expect({ok0, Segment{x, 3, DType::kF32, 5}, ok1}, 2, "segment 1 has unit 5, but num_units is 2");
  expect({ok0, ok1}, 3, "unit 2 has no segment");
  expect({ok1}, 2, "unit 0 has no segment");
  expect({}, 1, "unit 0 has no segment");
  expect({ok0}, 0, "num_units must be >= 1");
  expect({ok0, ok1, Segment{x, 1, static_cast<DType>(7), 0}}, 2, "segment 2 has an unknown dtype");
  // Null data: an error for the partials, fine for the sizes.
  expect({ok0, Segment{nullptr, 3, DType::kF16, 1}}, 2, "segment 1 has null data", false);
  CHECK(gnmr::unit_numel({ok0, Segment{nullptr, 3, DType::kF16, 1}}, 2) ==
        std::vector<std::uint64_t>{4, 3});
  CHECK_THROWS_WITH(gnmr::host_unit_partials(&ok0, 1, nullptr, 1), Catch::Contains("null partials"));
  CHECK_THROWS_WITH(gnmr::host_unit_partials(nullptr, 2, out.data(), 1),
                    Catch::Contains("null segment array"));
}

TEST_CASE("host_unit_partials: Coverage::kShard gives uncovered units the identity", "[norms]") {
  // A rank's shard holds units 0 and 2 of 4: units 1 and 3 contribute 0
  // (the identity of sum-of-squares and of max |x|) instead of an error.
  const float a[3] = {1.0f, -2.0f, 2.0f};
  const float b[2] = {-3.0f, 0.5f};
  const std::vector<Segment> segs = {{a, 3, DType::kF32, 0}, {b, 2, DType::kF32, 2}};
  std::vector<float> out(4, std::numeric_limits<float>::quiet_NaN());
  gnmr::host_unit_partials(segs, out, gnmr::Coverage::kShard);
  CHECK(out == std::vector<float>{9.0f, 0.0f, 9.25f, 0.0f});
  std::fill(out.begin(), out.end(), std::numeric_limits<float>::quiet_NaN());
  gnmr::host_unit_partials<gnmr::LinfNorm>(segs, out, gnmr::Coverage::kShard);
  CHECK(out == std::vector<float>{2.0f, 0.0f, 3.0f, 0.0f});
  // The default still insists on a segment per unit.
  CHECK_THROWS_WITH(gnmr::host_unit_partials(segs, out), Catch::Contains("unit 1 has no segment"));
}
