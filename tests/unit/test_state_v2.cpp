// Tests of the state blob's version 2 (gnmr/io/state.hpp, gnmr/io/state_id.hpp):
// the global state (the systemic tracker) saved and restored; composite and
// state-shaping fingerprints, refused with a message that names both sides;
// genuine version-1 blobs (written by the pre-v2 headers, bytes below)
// migrated when unambiguous, refused otherwise, loaded on trust_v1; and the
// generic load_state on a controller shaped like the device one.
#include "gnmr/io/state.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "../support/trace_gen.hpp"
#include "gnmr/host/controller.hpp"
#include "gnmr/policy/mean_peers.hpp"
#include "gnmr/policy/recovery_ladder.hpp"
#include "gnmr/policy/trigger_zscore.hpp"
#include "semantics_util.hpp"
#include "../../python-jax/gnmr_jax/csrc/host_step.hpp"

namespace {

using semtest::bytes_of;

// Written by /work/main's headers at a05807f (format version 1) with
//   template <class C> blob(C c) { for t = 1..14: x = {1 + 0.1 (t % 3), 2},
//     x[1] = 40 at t = 12; c.step_norms(x, 2); return save_state(c); }
// for GnmrController<> (kV1Gnmr), <L2, EmaMean, FixedThreshold{max_norm 3},
// ClipToMean, MaxO> (kV1Fixed) and <L2, EmaMean, GnmrTrigger,
// Compose<ClipToMean, ResetMoments>, MaxO> (kV1Compose).
// 192 bytes
const std::uint8_t kV1Gnmr[] = {
    0x47, 0x4e, 0x4d, 0x52, 0x53, 0x54, 0x41, 0x54, 0x01, 0x00, 0x00, 0x00, 0x38, 0x00, 0x00, 0x00,
    0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x58, 0x71, 0x11, 0xea, 0x97, 0xa6, 0xe4, 0x0e,
    0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x88, 0xd4, 0x14, 0x3e, 0x22, 0x66, 0x5e, 0x3f,
    0x0e, 0x00, 0x00, 0x00, 0xf9, 0xac, 0x8b, 0x3f, 0xb5, 0xac, 0x8b, 0x3f, 0xa8, 0xc7, 0x66, 0x3f,
    0x09, 0x0a, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x7a, 0x9a, 0x3e, 0x22, 0x66, 0x5e, 0x3f,
    0x0e, 0x00, 0x00, 0x00, 0xcf, 0x5f, 0x5c, 0x3f, 0xfe, 0xff, 0x7f, 0x3f, 0xff, 0xff, 0x9f, 0x41,
    0x55, 0xae, 0x59, 0x3f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x0c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x97, 0x26, 0xf3, 0x01, 0xd6, 0xa6, 0xdf, 0xb2};
// 112 bytes
const std::uint8_t kV1Fixed[] = {
    0x47, 0x4e, 0x4d, 0x52, 0x53, 0x54, 0x41, 0x54, 0x01, 0x00, 0x00, 0x00, 0x38, 0x00, 0x00, 0x00,
    0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xbd, 0x50, 0xa8, 0x63, 0x3b, 0x67, 0xc2, 0x2b,
    0x18, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x30, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x88, 0xd4, 0x14, 0x3e, 0x22, 0x66, 0x5e, 0x3f,
    0x0e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0xcf, 0x8b, 0x22, 0x3f, 0x22, 0x66, 0x5e, 0x3f, 0x0e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x0c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x3e, 0x2a, 0xd3, 0x3a, 0xa2, 0x45, 0x47, 0x62};
// 192 bytes
const std::uint8_t kV1Compose[] = {
    0x47, 0x4e, 0x4d, 0x52, 0x53, 0x54, 0x41, 0x54, 0x01, 0x00, 0x00, 0x00, 0x38, 0x00, 0x00, 0x00,
    0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1b, 0x72, 0x18, 0x3d, 0x30, 0xa5, 0xfa, 0x64,
    0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x88, 0xd4, 0x14, 0x3e, 0x22, 0x66, 0x5e, 0x3f,
    0x0e, 0x00, 0x00, 0x00, 0xf9, 0xac, 0x8b, 0x3f, 0xb5, 0xac, 0x8b, 0x3f, 0xa8, 0xc7, 0x66, 0x3f,
    0x09, 0x0a, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x7a, 0x9a, 0x3e, 0x22, 0x66, 0x5e, 0x3f,
    0x0e, 0x00, 0x00, 0x00, 0xcf, 0x5f, 0x5c, 0x3f, 0xfe, 0xff, 0x7f, 0x3f, 0xff, 0xff, 0x9f, 0x41,
    0x55, 0xae, 0x59, 0x3f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x0c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x73, 0xd3, 0x41, 0x43, 0xf8, 0x9f, 0x67, 0x26};

template <class C>
C warm14(C c) {
  for (int t = 1; t <= 14; ++t) {
    float x[2] = {1.0f + 0.1f * static_cast<float>(t % 3), 2.0f};
    if (t == 12) x[1] = 40.0f;
    c.step_norms(x, 2);
  }
  return c;
}

template <std::size_t N>
std::vector<std::uint8_t> vec(const std::uint8_t (&a)[N]) {
  return std::vector<std::uint8_t>(a, a + N);
}

// a and b step on the same norms; decisions and reports must match bit for bit.
template <class A, class B>
void continue_alike(A& a, B& b, int steps, std::uint64_t seed) {
  std::vector<float> x(a.num_units());
  for (int t = 1; t <= steps; ++t) {
    tracegen::fill(seed, t, x);
    a.step_norms(x);
    b.step_norms(x);
    INFO("step " << t);
    REQUIRE(bytes_of(a.decisions()) == bytes_of(b.decisions()));
    REQUIRE(bytes_of(a.reports()) == bytes_of(b.reports()));
  }
}

using Fixed = gnmr::GnmrController<gnmr::L2Norm, gnmr::EmaMean, gnmr::FixedThreshold, gnmr::ClipToMean, gnmr::MaxO>;
using ClipReset = gnmr::Compose<gnmr::ClipToMean, gnmr::ResetMoments>;
using Comp = gnmr::GnmrController<gnmr::L2Norm, gnmr::EmaMean, gnmr::GnmrTrigger, ClipReset, gnmr::MaxO>;

Fixed fixed2() {
  gnmr::FixedThreshold ft;
  ft.max_norm = 3.0f;
  return Fixed(2, {}, {}, ft);
}

}  // namespace

TEST_CASE("state blob v2: the systemic tracker is saved, loaded and continues", "[state][systemic]") {
  gnmr::ControllerOptions o = semtest::systemic(gnmr::SystemicAction::kGlobalClip, 0.2);
  gnmr::MaxO b;
  b.max_o = 3;
  gnmr::GnmrController<> a(500, {}, {}, {}, {}, b, o);
  std::vector<float> x(500);
  std::size_t systemic = 0;
  for (int t = 1; t <= 60; ++t) {
    tracegen::fill(21, t, x);
    systemic += a.step_norms(x).systemic ? 1 : 0;
  }
  REQUIRE(systemic > 0u);
  REQUIRE(a.global_state().total.k == 60u);
  const auto blob = gnmr::save_state(a);
  gnmr::GnmrController<> c(500, {}, {}, {}, {}, b, o);
  gnmr::load_state(c, blob);
  CHECK(bytes_of(c.global_state()) == bytes_of(a.global_state()));
  CHECK(c.steps_done() == 60);
  // The same units with a fresh tracker: what a blob without it would give.
  gnmr::GnmrController<> fresh(500, {}, {}, {}, {}, b, o);
  fresh.restore(std::vector<gnmr::GnmrController<>::UnitState>(a.unit_states()), a.steps_done());
  std::size_t more = 0, differ = 0;
  for (int t = 61; t <= 120; ++t) {
    tracegen::fill(21, t, x);
    const auto sa = a.step_norms(x);
    const auto sc = c.step_norms(x);
    fresh.step_norms(x);
    INFO("step " << t);
    REQUIRE(sa.systemic == sc.systemic);
    REQUIRE(sa.total_mean == sc.total_mean);
    REQUIRE(sa.systemic_scale == sc.systemic_scale);
    REQUIRE(bytes_of(a.decisions()) == bytes_of(c.decisions()));
    more += sa.systemic ? 1 : 0;
    differ += bytes_of(fresh.decisions()) != bytes_of(a.decisions()) ? 1 : 0;
  }
  CHECK(more > 0u);
  CHECK(differ > 0u);  // the saved tracker mattered
}

TEST_CASE("state blob v2: a Compose's parts are in its fingerprint", "[state]") {
  using SkipPromote = gnmr::Compose<gnmr::SkipUnit, gnmr::PromotePrecision>;
  using Other = gnmr::GnmrController<gnmr::L2Norm, gnmr::EmaMean, gnmr::GnmrTrigger, SkipPromote, gnmr::MaxO>;
  // Same state size: version 1 could not tell them apart.
  REQUIRE(sizeof(Other::UnitState) == sizeof(Comp::UnitState));
  REQUIRE(gnmr::policy_fingerprint_v1<Other::Policies>() == gnmr::policy_fingerprint_v1<Comp::Policies>());
  Comp a = warm14(Comp(2));
  Other b(2);
  const auto before = bytes_of(b.unit_states());
  CHECK_THROWS_WITH(gnmr::load_state(b, gnmr::save_state(a)),
                    Catch::Contains("saved by l2/ema/gnmr<8>(window=4)/compose(clip_to_mean,reset_moments)/maxo; "
                                    "this controller is l2/ema/gnmr<8>(window=4)/compose(skip_unit,promote)/maxo"));
  CHECK(bytes_of(b.unit_states()) == before);
  // Order matters, and so does a third part.
  using Rev = gnmr::Compose<gnmr::ResetMoments, gnmr::ClipToMean>;
  using Three = gnmr::Compose<gnmr::ClipToMean, gnmr::ResetMoments, gnmr::PromotePrecision>;
  CHECK(gnmr::policy_id(Rev{}) == "compose(reset_moments,clip_to_mean)");
  CHECK(gnmr::policy_id(Three{}) == "compose(clip_to_mean,reset_moments,promote)");
  CHECK(gnmr::policy_fingerprint(Comp(1).policies()) !=
        gnmr::policy_fingerprint(gnmr::GnmrController<gnmr::L2Norm, gnmr::EmaMean, gnmr::GnmrTrigger, Rev, gnmr::MaxO>(1).policies()));
  // The same Compose loads.
  Comp c(2);
  gnmr::load_state(c, gnmr::save_state(a));
  continue_alike(a, c, 20, 3);
}

TEST_CASE("state blob v2: state-shaping hyperparameters are refused, others may change", "[state]") {
  SECTION("WindowMean's window") {
    using W = gnmr::GnmrController<gnmr::L2Norm, gnmr::WindowMean<16>>;
    gnmr::WindowMean<16> w16, w8;
    w16.window = 16;
    w8.window = 8;
    W a(3, {}, w16);
    std::vector<float> x(3);
    for (int t = 1; t <= 21; ++t) {  // head = 21 % 16 = 5: read as 8, another ring
      tracegen::fill(4, t, x);
      a.step_norms(x);
    }
    W b(3, {}, w8);
    const auto before = bytes_of(b.unit_states());
    CHECK_THROWS_WITH(gnmr::load_state(b, gnmr::save_state(a)),
                      Catch::Contains("saved by l2/window<16>(window=16)/") &&
                          Catch::Contains("this controller is l2/window<16>(window=8)/"));
    CHECK(bytes_of(b.unit_states()) == before);
    W c(3, {}, w16);
    CHECK_NOTHROW(gnmr::load_state(c, gnmr::save_state(a)));
  }
  SECTION("GNMR's Delta-GNMR window") {
    gnmr::GnmrTrigger t8;
    t8.window = 8;
    gnmr::GnmrController<> a = warm14(gnmr::GnmrController<>(2));
    gnmr::GnmrController<> b(2, {}, {}, t8);
    CHECK_THROWS_WITH(gnmr::load_state(b, gnmr::save_state(a)),
                      Catch::Contains("gnmr<8>(window=4)") && Catch::Contains("gnmr<8>(window=8)"));
  }
  SECTION("the seeds of EmaMeanVar and MinSeededEma") {
    using Z = gnmr::GnmrController<gnmr::L2Norm, gnmr::EmaMeanVar, gnmr::ZScoreTrigger>;
    using A = gnmr::GnmrController<gnmr::L2Norm, gnmr::MinSeededEma>;
    Z z(2);
    CHECK_THROWS_WITH(gnmr::load_state(z, gnmr::save_state(Z(2, {}, gnmr::EmaMeanVar{0.97f, 10}))),
                      Catch::Contains("ema_mean_var(seed=10)") && Catch::Contains("ema_mean_var(seed=25)"));
    A m(2);
    CHECK_THROWS_WITH(gnmr::load_state(m, gnmr::save_state(A(2, {}, gnmr::MinSeededEma{0.99f, 7}))),
                      Catch::Contains("min_seeded_ema(seed=7)"));
  }
  SECTION("tau, maxO, lock, kappa, beta, the ladder and the systemic rule may change") {
    using L = gnmr::GnmrController<gnmr::L2Norm, gnmr::EmaMean, gnmr::GnmrTrigger, gnmr::Ladder, gnmr::MaxO>;
    L a = warm14(L(2));
    gnmr::GnmrTrigger t;
    t.tau = 5.0f;
    gnmr::MaxO b;
    b.max_o = 1;
    b.lock = 2;
    gnmr::Ladder lad;
    lad.top = 1;
    lad.horizon = 4;
    L c(2, {}, gnmr::EmaMean{0.9f}, t, lad, b, semtest::systemic(gnmr::SystemicAction::kSkip, 0.1));
    CHECK_NOTHROW(gnmr::load_state(c, gnmr::save_state(a)));
    CHECK(c.steps_done() == 14);
  }
}

TEST_CASE("state blob v1: migrated when unambiguous, refused otherwise, never misread", "[state]") {
  SECTION("unambiguous: migrated, the tracker fresh") {
    Fixed ref = warm14(fixed2());
    Fixed c = fixed2();
    REQUIRE(gnmr::read_state_info(kV1Fixed, sizeof kV1Fixed).version == 1u);
    gnmr::load_state(c, kV1Fixed, sizeof kV1Fixed);
    CHECK(c.steps_done() == 14);
    CHECK(c.global_state().total.k == 0u);
    for (std::size_t i = 0; i < 2; ++i) {
      CHECK(c.unit_states()[i].mean.m == ref.unit_states()[i].mean.m);
      CHECK(c.unit_states()[i].mean.k == ref.unit_states()[i].mean.k);
      CHECK(c.unit_states()[i].budget.granted_at == ref.unit_states()[i].budget.granted_at);
    }
    CHECK(ref.unit_states()[1].budget.granted_at == 12);  // the spike was granted: a lively state
    continue_alike(ref, c, 30, 8);
    // It saves as version 2, which loads back.
    const auto v2 = gnmr::save_state(c);
    CHECK(gnmr::read_state_info(v2.data(), v2.size()).version == 2u);
    Fixed d = fixed2();
    gnmr::load_state(d, v2);
    CHECK(bytes_of(d.unit_states()) == bytes_of(c.unit_states()));
  }
  SECTION("GNMR's Delta window is not in a v1 blob: refused, loaded on trust") {
    gnmr::GnmrController<> c(2);
    const auto before = bytes_of(c.unit_states());
    CHECK_THROWS_WITH(gnmr::load_state(c, kV1Gnmr, sizeof kV1Gnmr),
                      Catch::Contains("version-1 blob") && Catch::Contains("does not record") &&
                          Catch::Contains("trust_v1"));
    CHECK(bytes_of(c.unit_states()) == before);
    CHECK(c.steps_done() == 0);
    gnmr::StateLoadOptions trust;
    trust.trust_v1 = true;
    gnmr::load_state(c, kV1Gnmr, sizeof kV1Gnmr, trust);
    gnmr::GnmrController<> ref = warm14(gnmr::GnmrController<>(2));
    continue_alike(ref, c, 30, 9);
  }
  SECTION("a Compose in a v1 blob: refused, loaded on trust") {
    Comp c(2);
    CHECK_THROWS_WITH(gnmr::load_state(c, kV1Compose, sizeof kV1Compose), Catch::Contains("Compose"));
    gnmr::StateLoadOptions trust;
    trust.trust_v1 = true;
    gnmr::load_state(c, vec(kV1Compose), trust);
    Comp ref = warm14(Comp(2));
    continue_alike(ref, c, 30, 10);
  }
  SECTION("other policies: refused even on trust") {
    gnmr::StateLoadOptions trust;
    trust.trust_v1 = true;
    gnmr::GnmrController<> c(2);
    CHECK_THROWS_WITH(gnmr::load_state(c, kV1Fixed, sizeof kV1Fixed, trust),
                      Catch::Contains("version-1 blob") && Catch::Contains("other policies"));
    Fixed f = fixed2();
    CHECK_THROWS_WITH(gnmr::load_state(f, kV1Gnmr, sizeof kV1Gnmr, trust), Catch::Contains("other policies"));
  }
  SECTION("a corrupted v1 blob") {
    auto b = vec(kV1Fixed);
    b[60] ^= 1;
    Fixed f = fixed2();
    CHECK_THROWS_WITH(gnmr::load_state(f, b), Catch::Contains("checksum mismatch"));
  }
}

namespace {

// The shape of gnmr::cuda::DeviceController as load_state sees it: its
// restore() takes the states by const reference (it uploads them).
template <class C>
struct DeviceShaped {
  using UnitState = typename C::UnitState;
  using Policies = typename C::Policies;
  C host;
  int restores = 0;
  explicit DeviceShaped(C c) : host(std::move(c)) {}
  const Policies& policies() const { return host.policies(); }
  std::size_t num_units() const { return host.num_units(); }
  void restore(const std::vector<UnitState>& st, std::int64_t step, const gnmr::GlobalState& g) {
    ++restores;
    host.restore(std::vector<UnitState>(st), step, g);
  }
};

}  // namespace

TEST_CASE("state blob: the device path's pieces, without a device", "[state]") {
  // save_state(DeviceController) writes write_state_blob() from one copy of
  // the unit and global states: from host copies it is the host's blob.
  gnmr::ControllerOptions o = semtest::systemic(gnmr::SystemicAction::kGlobalClip, 0.3);
  gnmr::GnmrController<> a(300, {}, {}, {}, {}, {}, o);
  std::vector<float> x(300);
  for (int t = 1; t <= 40; ++t) {
    tracegen::fill(31, t, x);
    a.step_norms(x);
  }
  const std::vector<gnmr::GnmrController<>::UnitState> copy = a.unit_states();
  const gnmr::GlobalState g = a.global_state();
  CHECK(gnmr::detail::write_state_blob(a.policies(), copy.data(), copy.size(), a.steps_done(), g) ==
        gnmr::save_state(a));
  // load_state on a controller shaped like the device one.
  DeviceShaped<gnmr::GnmrController<>> d(gnmr::GnmrController<>(300, {}, {}, {}, {}, {}, o));
  gnmr::load_state(d, gnmr::save_state(a));
  CHECK(d.restores == 1);
  CHECK(gnmr::save_state(d.host) == gnmr::save_state(a));
  // ... and a refused blob leaves it alone (restore never called).
  DeviceShaped<Comp> e(Comp(300));
  CHECK_THROWS_AS(gnmr::load_state(e, gnmr::save_state(a)), gnmr::StateError);
  CHECK(e.restores == 0);
}

TEST_CASE("state blob v2: an identity that disagrees with the fingerprint is refused", "[state]") {
  // A crafted or corrupted blob whose checksum was recomputed: the
  // fingerprint matches, the identity text does not. Saving it back would
  // not give the same blob, so it is not this controller's.
  gnmr::GnmrController<> a = warm14(gnmr::GnmrController<>(2));
  std::vector<std::uint8_t> b = gnmr::save_state(a);
  b[64 + 3] ^= 0x01;  // "l2/ema..." -> "l2/dma..."
  const std::size_t body = b.size() - 8;
  const std::uint64_t h = gnmr::detail::fnv1a64(b.data(), body);
  for (int i = 0; i < 8; ++i) b[body + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(h >> (8 * i));
  gnmr::GnmrController<> c(2);
  CHECK_THROWS_WITH(gnmr::load_state(c, b), Catch::Contains("saved by l2/dma/"));
  CHECK(c.steps_done() == 0);
}

// gnmr_jax's CPU step keeps the state in an array of the controller's blob
// size: a version-1 blob loads (migrates) but its state would not fit, so
// the step refuses it and the controller goes back to the state it had.
TEST_CASE("gnmr_jax's host step refuses a version-1 blob and keeps its state", "[state][jax]") {
  gnmr_jax::HostSlot slot(gnmr::make_dyn(warm14(fixed2())));
  const std::vector<std::uint8_t> before = slot.last;
  std::vector<std::uint8_t> v1(kV1Fixed, kV1Fixed + sizeof kV1Fixed);
  REQUIRE(v1.size() != before.size());
  const std::vector<float> p = {1.0f, 1.0f};
  std::vector<float> scale(2);
  std::vector<std::uint32_t> flags(2);
  std::int32_t counts[gnmr_jax::kCounts];
  float values[gnmr_jax::kValues];
  CHECK_THROWS_WITH(gnmr_jax::host_step(slot, p.data(), 2, v1.data(), v1.data(), v1.size(), scale.data(),
                                        flags.data(), counts, values),
                    Catch::Contains("older format"));
  CHECK(slot.last == before);
  CHECK(slot.ctl->save() == before);
}
