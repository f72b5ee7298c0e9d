// Tests of gnmr/policy/interface.hpp and of docs/policies.md's example.
//
// 1. Every shipped policy meets its kind's interface, and the detection
//    traits the static_asserts rest on really detect: each is shown a policy
//    that lacks (or mis-declares) its member. These are compile-time checks:
//    a trait that always said yes would fail this file's compilation. (That
//    a controller then stops with the trait's message as its first error is
//    tested by tests/compile_fail.)
// 2. The doc's own policy, MinNormTrigger, plugged into GnmrController:
//    decisions against values computed by hand, and a state blob round trip
//    (its kName is in the fingerprint).
#include "gnmr/policy/interface.hpp"

#include "gnmr/host/controller.hpp"
#include "gnmr/io/state.hpp"
#include "gnmr/policy/mean_peers.hpp"
#include "gnmr/policy/recovery_ladder.hpp"
#include "gnmr/policy/recovery_norm_replace.hpp"
#include "gnmr/policy/trigger_zscore.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace {

namespace iface = gnmr::detail::iface;
using gnmr::detail::CheckPolicies;

// --- 1. the shipped policies -------------------------------------------------
static_assert(CheckPolicies<gnmr::L2Norm, gnmr::EmaMean, gnmr::GnmrTrigger, gnmr::ClipToMean,
                            gnmr::MaxO>::value,
              "defaults");
static_assert(CheckPolicies<gnmr::RmsNorm, gnmr::CumulativeMean, gnmr::FixedThreshold,
                            gnmr::ClipToTarget, gnmr::Unlimited>::value,
              "");
static_assert(CheckPolicies<gnmr::LinfNorm, gnmr::WindowMean<8>, gnmr::ZScoreTrigger,
                            gnmr::Compose<gnmr::SkipUnit, gnmr::PromotePrecision>,
                            gnmr::MaxO>::value,
              "");
static_assert(CheckPolicies<gnmr::L2Norm, gnmr::EmaMeanVar, gnmr::AlwaysTrigger, gnmr::NormReplace,
                            gnmr::Unlimited>::value,
              "");
static_assert(CheckPolicies<gnmr::L2Norm, gnmr::MinSeededEma, gnmr::GnmrTriggerT<4>, gnmr::Ladder,
                            gnmr::MaxO>::value,
              "");
static_assert(CheckPolicies<gnmr::L2Norm, gnmr::EmaSquareMean, gnmr::GnmrTrigger,
                            gnmr::Compose<gnmr::ResetMoments, gnmr::GlobalSkip>,
                            gnmr::MaxO>::value,
              "");
static_assert(iface::has_kname<gnmr::NoMean>::value && iface::has_count<gnmr::NoMean>::value,
              "NoMean");

// --- the traits detect what is missing ----------------------------------------
// (Declarations only, never defined or called: clang warns about unused
// internal ones, so they live in a named namespace.)
}  // namespace
namespace iface_probe {
struct Empty {};
struct NameIsString {
  static const std::string kName;
};
struct CheckReturnsInt {
  int check() const { return 0; }
};
struct CheckNotConst {
  std::string check() { return {}; }
};
struct CountMember {  // count() must be static
  struct State {
    std::uint32_t k;
  };
  std::uint32_t count(const State& s) const { return s.k; }
  float mean(const State&) { return 0.0f; }  // not const
  void push(State&, float) const {}
};
struct InitWrongType {
  struct State {};
  static int init() { return 0; }
};
struct EvaluateNotConst {  // the step calls it on const configuration
  struct State {};
  void evaluate(const State&, gnmr::UnitView&) {}
  float feed(const gnmr::UnitView&) const { return 0.0f; }
};
struct BudgetNoGrant {
  struct State {
    std::int32_t step;  // not granted_at
  };
  std::uint32_t slots() const { return 1u; }
};
struct NormStaticFinishWrongArity {
  static constexpr gnmr::Combine kCombine = gnmr::Combine::kSum;
  static float finish(float p) { return p; }
  float element(float x) const { return x; }  // must be static
};

static_assert(!iface::has_kname<Empty>::value && !iface::has_kname<NameIsString>::value, "");
static_assert(!iface::has_check<Empty>::value && !iface::has_check<CheckReturnsInt>::value &&
                  !iface::has_check<CheckNotConst>::value,
              "");
static_assert(!iface::has_state<Empty>::value && iface::has_state<CountMember>::value, "");
static_assert(!iface::has_count<CountMember>::value && !iface::has_mean<CountMember>::value &&
                  iface::has_push<CountMember>::value,
              "");
static_assert(!iface::has_init<InitWrongType>::value && !iface::has_init<CountMember>::value, "");
static_assert(!iface::has_evaluate<EvaluateNotConst>::value &&
                  iface::has_feed<EvaluateNotConst>::value && !iface::has_update<Empty>::value,
              "");
static_assert(!iface::has_apply<Empty>::value && iface::has_apply<gnmr::Ladder>::value, "");
static_assert(!iface::has_granted_at<BudgetNoGrant>::value && iface::has_slots<BudgetNoGrant>::value &&
                  !iface::has_in_recovery<BudgetNoGrant>::value,
              "");
static_assert(iface::has_kcombine<NormStaticFinishWrongArity>::value &&
                  !iface::has_finish<NormStaticFinishWrongArity>::value &&
                  !iface::has_element<NormStaticFinishWrongArity>::value &&
                  !iface::has_identity<NormStaticFinishWrongArity>::value,
              "");

}  // namespace iface_probe
namespace {

// --- 2. docs/policies.md's example, verbatim ----------------------------------
// GNMR's ratio test, but a unit whose norm is below `min_norm` never
// triggers (tiny tensors such as biases spike in ratio without mattering).
struct MinNormTrigger {
  static constexpr const char* kName = "min_norm";
  float tau = 3.0f;
  float min_norm = 1e-3f;
  std::uint32_t warmup = 10;

  struct State {};  // no history of its own
  GNMR_HOST_DEVICE static State init() { return State{}; }

  GNMR_HOST_DEVICE void evaluate(const State&, gnmr::UnitView& v) const {
    v.delta = 0.0f;
    v.risk = 0.0f;
    v.target = gnmr::math::mul(tau, v.mean);  // what ClipToTarget would clip to
    if (v.count < warmup) {
      v.flags |= gnmr::kWarmup;
      return;
    }
    v.risk = gnmr::math::div(v.ratio, tau);
    if (v.ratio > tau && v.norm >= min_norm) v.flags |= gnmr::kTriggered;
  }
  // A triggered norm enters the mean clamped, as GNMR's own trigger does.
  GNMR_HOST_DEVICE float feed(const gnmr::UnitView& v) const {
    return (v.flags & gnmr::kTriggered) ? gnmr::math::min(v.norm, v.target) : v.norm;
  }
  GNMR_HOST_DEVICE void update(State&, const gnmr::UnitView&) const {}

  std::string check() const {
    return gnmr::detail::first_error(
        {gnmr::detail::positive("MinNormTrigger", "tau", tau),
         gnmr::detail::non_negative("MinNormTrigger", "min_norm", min_norm)});
  }
};

using MinNormController =
    gnmr::GnmrController<gnmr::L2Norm, gnmr::CumulativeMean, MinNormTrigger>;

}  // namespace

TEST_CASE("docs/policies.md example: MinNormTrigger in a controller", "[interface]") {
  MinNormTrigger trig;
  trig.min_norm = 12.0f;
  MinNormController c(2, {}, {}, trig);
  // Ten quiet steps: unit 0 at 2, unit 1 at 0.5.
  for (int t = 1; t <= 10; ++t) {
    const gnmr::StepSummary& s = c.step_norms(std::vector<float>{2.0f, 0.5f});
    REQUIRE(s.triggered == 0u);
  }
  // Step 11: unit 0 at 10 is five times its mean (2) but under min_norm 12:
  // not triggered, fed raw; unit 1 likewise at 4 (eight times 0.5).
  const gnmr::StepSummary& s11 = c.step_norms(std::vector<float>{10.0f, 4.0f});
  CHECK(s11.triggered == 0u);
  CHECK(c.decisions()[0].scale == 1.0f);
  CHECK(c.reports()[0].ratio == 5.0f);
  CHECK(c.reports()[0].risk == gnmr::math::div(5.0f, 3.0f));
  // Step 12: unit 0 at 30; its mean is now (10 * 2 + 10) / 11 = 30/11, r = 11:
  // triggered, granted, clipped to the mean (ClipToMean, kappa 1).
  const gnmr::StepSummary& s12 = c.step_norms(std::vector<float>{30.0f, 0.5f});
  const float mu = static_cast<float>(30.0 / 11.0);
  CHECK(s12.triggered == 1u);
  CHECK(s12.granted == 1u);
  CHECK(c.reports()[0].mean == mu);
  CHECK((c.decisions()[0].flags & gnmr::kGranted) != 0u);
  CHECK(c.decisions()[0].scale == gnmr::math::div(mu, 30.0f));
  CHECK(c.decisions()[1].scale == 1.0f);
  // The clamped feed: unit 0's sum grew by tau * mu, not by 30.
  const double sum = c.unit_states()[0].mean.sum;
  CHECK(sum == 30.0 + static_cast<double>(gnmr::math::mul(3.0f, mu)));
}

TEST_CASE("docs/policies.md example: bad parameters and the state blob", "[interface]") {
  MinNormTrigger bad;
  bad.min_norm = -1.0f;
  CHECK_THROWS_WITH(MinNormController(2, {}, {}, bad),
                    Catch::Contains("MinNormTrigger") && Catch::Contains("min_norm"));
  MinNormController a(3);
  for (int t = 1; t <= 12; ++t) a.step_norms(std::vector<float>{1.0f, 2.0f, t == 12 ? 9.0f : 3.0f});
  const std::vector<std::uint8_t> blob = gnmr::save_state(a);
  MinNormController b(3);
  gnmr::load_state(b, blob);
  CHECK(b.steps_done() == 12);
  const std::vector<float> next{1.0f, 8.0f, 3.0f};
  a.step_norms(next);
  b.step_norms(next);
  CHECK(a.decisions()[1].scale == b.decisions()[1].scale);
  CHECK(a.decisions()[1].flags == b.decisions()[1].flags);
  CHECK((a.decisions()[1].flags & gnmr::kGranted) != 0u);
  // Another trigger (GNMR's own) with the same State size: refused by name.
  gnmr::GnmrController<gnmr::L2Norm, gnmr::CumulativeMean, gnmr::FixedThreshold> other(3);
  CHECK_THROWS_AS(gnmr::load_state(other, blob), gnmr::StateError);
}
