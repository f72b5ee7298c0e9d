// Tests of gnmr/io/state.hpp: a saved and reloaded controller continues
// bit-for-bit like the original; every malformed or mismatched blob is
// rejected with a clear StateError and leaves the target controller exactly
// as it was (state bytes, step count, and its future decisions).
#include "gnmr/io/state.hpp"

#include "gnmr/detail/canonical.hpp"
#include "gnmr/host/controller.hpp"
#include "gnmr/policy/mean.hpp"
#include "gnmr/policy/norm.hpp"
#include "../support/summary_eq.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

using Default = gnmr::GnmrController<>;

// The test's own FNV-1a-64 (checked against published vectors below), used
// to re-seal blobs whose header fields a test edits on purpose.
std::uint64_t fnv(const std::uint8_t* p, std::size_t n) {
  std::uint64_t h = 14695981039346656037ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
std::uint64_t rd(const std::vector<std::uint8_t>& b, std::size_t off, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(b[off + i]) << (8 * i);
  return v;
}
void wr(std::vector<std::uint8_t>& b, std::size_t off, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) b[off + i] = static_cast<std::uint8_t>(v >> (8 * i));
}
void reseal(std::vector<std::uint8_t>& b) {
  const std::size_t body = b.size() - 8;
  wr(b, body, fnv(b.data(), body), 8);
}

// Per-step partials (squared L2 norms) for n units: steady per-unit levels,
// frequent spikes and the odd NaN, so triggers, grants, denials, locks and
// releases all happen within a few dozen steps.
struct Trace {
  std::mt19937 rng;
  std::size_t n;
  Trace(std::uint32_t seed, std::size_t units) : rng(seed), n(units) {}
  std::vector<float> next() {
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::vector<float> p(n);
    for (std::size_t i = 0; i < n; ++i) {
      float norm = (1.0f + static_cast<float>(i % 5)) * (0.9f + 0.2f * u(rng));
      const float r = u(rng);
      if (r < 0.08f) norm *= 4.0f + 20.0f * u(rng);
      p[i] = r > 0.995f ? std::numeric_limits<float>::quiet_NaN() : norm * norm;
    }
    return p;
  }
};

template <class T>
std::vector<std::uint8_t> bytes_of(const std::vector<T>& v) {
  // Canonical bytes (gnmr/detail/canonical.hpp), as the blob stores them.
  std::vector<std::uint8_t> b(v.size() * sizeof(T));
  for (std::size_t i = 0; i < v.size(); ++i) gnmr::detail::canonical_copy(v[i], b.data() + i * sizeof(T));
  return b;
}

using testsupport::same_summary;  // tests/support/summary_eq.hpp

// Steps a and b with the same partials; every output must match bit for bit.
// Returns how many grants happened (so a test can show the trace is lively).
template <class C>
std::uint32_t step_both_identically(C& a, C& b, Trace& trace, int steps) {
  std::uint32_t grants = 0;
  for (int s = 0; s < steps; ++s) {
    const std::vector<float> p = trace.next();
    const gnmr::StepSummary& sa = a.step(p);
    const gnmr::StepSummary& sb = b.step(p);
    INFO("step " << sa.step);
    REQUIRE(same_summary(sa, sb));
    REQUIRE(bytes_of(a.decisions()) == bytes_of(b.decisions()));
    REQUIRE(bytes_of(a.reports()) == bytes_of(b.reports()));
    REQUIRE(bytes_of(a.unit_states()) == bytes_of(b.unit_states()));
    grants += sa.granted;
  }
  return grants;
}

}  // namespace

TEST_CASE("FNV-1a-64 matches published test vectors", "[state]") {
  CHECK(gnmr::detail::fnv1a64("", 0) == 0xcbf29ce484222325ull);
  CHECK(gnmr::detail::fnv1a64("a", 1) == 0xaf63dc4c8601ec8cull);
  CHECK(gnmr::detail::fnv1a64("foobar", 6) == 0x85944171f73967e8ull);
  CHECK(fnv(reinterpret_cast<const std::uint8_t*>("foobar"), 6) == 0x85944171f73967e8ull);
}

TEST_CASE("state blob: layout of the header", "[state]") {
  Default c(3);
  Trace tr(1, 3);
  for (int s = 0; s < 7; ++s) c.step(tr.next());
  const std::vector<std::uint8_t> b = gnmr::save_state(c);
  const std::string id = "l2/ema/gnmr<8>(window=4)/clip_to_mean/maxo";
  const std::size_t payload = 3 * sizeof(Default::UnitState);
  const std::size_t g_at = 64 + id.size(), u_at = g_at + sizeof(gnmr::GlobalState);
  REQUIRE(b.size() == u_at + payload + 8);
  CHECK(std::string(b.begin(), b.begin() + 8) == "GNMRSTAT");
  CHECK(rd(b, 8, 4) == 2);
  CHECK(rd(b, 12, 4) == 64);
  CHECK(rd(b, 16, 8) == 3);
  CHECK(rd(b, 24, 8) == gnmr::policy_fingerprint(c.policies()));
  CHECK(rd(b, 32, 8) == sizeof(Default::UnitState));
  CHECK(rd(b, 40, 8) == 7);
  CHECK(rd(b, 48, 8) == payload);
  CHECK(rd(b, 56, 4) == id.size());
  CHECK(rd(b, 60, 4) == sizeof(gnmr::GlobalState));
  CHECK(std::string(b.begin() + 64, b.begin() + 64 + static_cast<std::ptrdiff_t>(id.size())) == id);
  CHECK(std::vector<std::uint8_t>(b.begin() + static_cast<std::ptrdiff_t>(g_at), b.begin() + static_cast<std::ptrdiff_t>(u_at)) ==
        bytes_of(std::vector<gnmr::GlobalState>{c.global_state()}));
  CHECK(std::vector<std::uint8_t>(b.begin() + static_cast<std::ptrdiff_t>(u_at),
                                  b.begin() + static_cast<std::ptrdiff_t>(u_at + payload)) == bytes_of(c.unit_states()));
  CHECK(rd(b, u_at + payload, 8) == fnv(b.data(), u_at + payload));
  const gnmr::StateInfo info = gnmr::read_state_info(b.data(), b.size());
  CHECK(info.version == 2u);
  CHECK(info.num_units == 3);
  CHECK(info.steps_done == 7);
  CHECK(info.identity == id);
  CHECK(info.payload_offset == u_at);
  CHECK(gnmr::policy_identity(c.policies()) == id);
  CHECK(gnmr::policy_names<Default::Policies>() == "l2/ema/gnmr/clip_to_mean/maxo");
}

TEST_CASE("state blob: save, load into a fresh controller, continue bit for bit", "[state]") {
  const std::size_t n = 16;
  Default a(n);
  Trace tr(42, n);
  for (int s = 0; s < 50; ++s) a.step(tr.next());
  const std::vector<std::uint8_t> blob = gnmr::save_state(a);

  Default b(n);
  b.step(Trace(7, n).next());  // some unrelated history, to be overwritten
  gnmr::load_state(b, blob);
  CHECK(b.steps_done() == 50);
  CHECK(bytes_of(b.unit_states()) == bytes_of(a.unit_states()));

  const std::uint32_t grants = step_both_identically(a, b, tr, 30);
  CHECK(grants > 0);  // the continuation exercised the budget
  CHECK(a.steps_done() == 80);
  CHECK(gnmr::save_state(a) == gnmr::save_state(b));
}

TEST_CASE("state blob: other policy sets round-trip; fingerprints tell them apart", "[state]") {
  using Cum = gnmr::GnmrController<gnmr::L2Norm, gnmr::CumulativeMean, gnmr::GnmrTrigger,
                                   gnmr::ClipToMean, gnmr::Unlimited>;
  using Rms = gnmr::GnmrController<gnmr::RmsNorm>;
  using Win = gnmr::GnmrController<gnmr::L2Norm, gnmr::WindowMean<8>>;
  using Win16 = gnmr::GnmrController<gnmr::L2Norm, gnmr::WindowMean<16>>;
  const std::uint64_t f[5] = {gnmr::policy_fingerprint(Default(1).policies()),
                              gnmr::policy_fingerprint(Cum(1).policies()),
                              gnmr::policy_fingerprint(Rms(1).policies()),
                              gnmr::policy_fingerprint(Win(1).policies()),
                              gnmr::policy_fingerprint(Win16(1).policies())};
  for (int i = 0; i < 5; ++i)
    for (int j = i + 1; j < 5; ++j) CHECK(f[i] != f[j]);

  Cum a(9), b(9);
  Trace tr(3, 9);
  for (int s = 0; s < 40; ++s) a.step(tr.next());
  gnmr::load_state(b, gnmr::save_state(a));
  step_both_identically(a, b, tr, 20);
  CHECK(gnmr::save_state(a) == gnmr::save_state(b));
}

TEST_CASE("state blob: hyperparameters may change on resume", "[state]") {
  Default a(4);
  Trace tr(5, 4);
  for (int s = 0; s < 20; ++s) a.step(tr.next());
  gnmr::GnmrTrigger trig;
  trig.tau = 5.0f;
  gnmr::MaxO budget;
  budget.max_o = 1;
  Default b(4, {}, {}, trig, {}, budget);
  REQUIRE_NOTHROW(gnmr::load_state(b, gnmr::save_state(a)));
  CHECK(bytes_of(b.unit_states()) == bytes_of(a.unit_states()));
  CHECK(b.steps_done() == 20);
}

namespace {

// load_state(target, bad) must throw StateError mentioning `what`, leave the
// target's bytes and step count alone, and the target must then step exactly
// like an untouched copy.
void expect_rejected(const Default& target0, const std::vector<std::uint8_t>& bad,
                     const std::string& what, const void* data_override = nullptr,
                     bool use_override = false) {
  Default t = target0;
  const void* data = use_override ? data_override : static_cast<const void*>(bad.data());
  INFO("expecting: " << what);
  CHECK_THROWS_AS(gnmr::load_state(t, data, bad.size()), gnmr::StateError);
  CHECK_THROWS_WITH(gnmr::load_state(t, data, bad.size()), Catch::Contains(what));
  CHECK(bytes_of(t.unit_states()) == bytes_of(target0.unit_states()));
  CHECK(t.steps_done() == target0.steps_done());
  Default ref = target0;
  Trace tr(99, t.num_units());
  step_both_identically(t, ref, tr, 5);
}

}  // namespace

TEST_CASE("state blob: every malformed or mismatched blob is rejected", "[state]") {
  const std::size_t n = 16;
  Default target(n);
  Trace tr(11, n);
  for (int s = 0; s < 20; ++s) target.step(tr.next());

  Default src(n);
  Trace tr2(12, n);
  for (int s = 0; s < 33; ++s) src.step(tr2.next());
  const std::vector<std::uint8_t> good = gnmr::save_state(src);
  const std::size_t payload = n * sizeof(Default::UnitState);
  const std::size_t u_at = gnmr::read_state_info(good.data(), good.size()).payload_offset;

  SECTION("null and too small") {
    expect_rejected(target, good, "null blob", nullptr, true);
    for (std::size_t sz : {0u, 1u, 8u, 63u})
      expect_rejected(target, std::vector<std::uint8_t>(good.begin(), good.begin() + sz), "too small");
  }
  SECTION("bad magic") {
    std::vector<std::uint8_t> b = good;
    b[3] = 'X';
    reseal(b);
    expect_rejected(target, b, "bad magic");
  }
  SECTION("unsupported version") {
    std::vector<std::uint8_t> b = good;
    wr(b, 8, 3, 4);
    reseal(b);
    expect_rejected(target, b, "unsupported format version 3");
  }
  SECTION("header size mismatch") {
    std::vector<std::uint8_t> b = good;
    wr(b, 12, 72, 4);
    reseal(b);
    expect_rejected(target, b, "header size mismatch");
  }
  SECTION("unit count mismatch") {
    Default other(n - 1);
    expect_rejected(target, gnmr::save_state(other), "unit count mismatch (the blob has 15 units, the controller 16)");
  }
  SECTION("fingerprint mismatch: other mean tracker, other norm") {
    gnmr::GnmrController<gnmr::L2Norm, gnmr::CumulativeMean> cum(n);
    expect_rejected(target, gnmr::save_state(cum), "policy mismatch");
    expect_rejected(target, gnmr::save_state(cum),
                    "saved by l2/cumulative/gnmr<8>(window=4)/clip_to_mean/maxo; this controller is "
                    "l2/ema/gnmr<8>(window=4)/clip_to_mean/maxo");
    gnmr::GnmrController<gnmr::RmsNorm> rms(n);  // same state layout, other meaning
    REQUIRE(sizeof(decltype(rms)::UnitState) == sizeof(Default::UnitState));
    expect_rejected(target, gnmr::save_state(rms), "policy mismatch: the blob was saved by rms/");
  }
  SECTION("state size mismatch") {
    // A consistent, sealed blob whose units are 8 bytes larger.
    const std::uint64_t ss = sizeof(Default::UnitState) + 8;
    std::vector<std::uint8_t> b(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(u_at));
    b.resize(u_at + n * ss + 8, 0);
    wr(b, 32, ss, 8);
    wr(b, 48, n * ss, 8);
    reseal(b);
    expect_rejected(target, b, "state size mismatch");
  }
  SECTION("payload size mismatch") {
    std::vector<std::uint8_t> b(good.begin(), good.end() - 8);
    b.insert(b.end(), 16, 0);
    b.resize(b.size() + 8);
    wr(b, 48, payload + 16, 8);
    reseal(b);
    expect_rejected(target, b, "payload size mismatch");
  }
  SECTION("truncated") {
    expect_rejected(target, std::vector<std::uint8_t>(good.begin(), good.end() - 1), "truncated");
    expect_rejected(target, std::vector<std::uint8_t>(good.begin(), good.begin() + good.size() / 2),
                    "truncated");
    expect_rejected(target, std::vector<std::uint8_t>(good.begin(), good.begin() + 64), "truncated");
  }
  SECTION("trailing bytes") {
    std::vector<std::uint8_t> b = good;
    b.push_back(0);
    expect_rejected(target, b, "1 trailing bytes");
  }
  SECTION("checksum mismatch") {
    std::vector<std::uint8_t> b = good;
    b[u_at + payload / 2] ^= 0x10;
    expect_rejected(target, b, "checksum mismatch");
    b = good;
    b.back() ^= 0x01;
    expect_rejected(target, b, "checksum mismatch");
  }
  SECTION("negative step count") {
    std::vector<std::uint8_t> b = good;
    wr(b, 40, static_cast<std::uint64_t>(-5), 8);
    reseal(b);
    expect_rejected(target, b, "invalid step count -5");
  }
  SECTION("the good blob itself loads") {
    Default t = target;
    gnmr::load_state(t, good);
    CHECK(bytes_of(t.unit_states()) == bytes_of(src.unit_states()));
    CHECK(t.steps_done() == 33);
  }
}

TEST_CASE("state blob: every single-byte corruption is rejected", "[state]") {
  Default src(2), target(2);
  Trace tr(21, 2);
  for (int s = 0; s < 15; ++s) src.step(tr.next());
  for (int s = 0; s < 4; ++s) target.step(tr.next());
  const std::vector<std::uint8_t> good = gnmr::save_state(src);
  const std::vector<std::uint8_t> before = bytes_of(target.unit_states());
  std::size_t rejected = 0, tried = 0;
  for (std::size_t pos = 0; pos < good.size(); ++pos) {
    for (std::uint8_t mask : {std::uint8_t{0x01}, std::uint8_t{0x80}, std::uint8_t{0xff}}) {
      std::vector<std::uint8_t> b = good;
      b[pos] ^= mask;
      ++tried;
      try {
        gnmr::load_state(target, b);
      } catch (const gnmr::StateError&) {
        ++rejected;
      }
    }
  }
  CHECK(rejected == tried);
  CHECK(bytes_of(target.unit_states()) == before);
  CHECK(target.steps_done() == 4);
}
