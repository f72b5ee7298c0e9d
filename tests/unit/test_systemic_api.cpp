// The edges of issue 11's core work that are not one step's arithmetic:
// the total norm's fixed-order tree against independent references, the
// denied-unit clip on hand-computed steps, UnitView::unit, promoted_units()
// (a promotion holds through a non-finite step of its lock), the systemic
// overrides of the presets, and the `systemic` line of the event log.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gnmr/io/telemetry.hpp"
#include "gnmr/presets/make.hpp"
#include "semantics_util.hpp"

using namespace semtest;
using gnmr::kDenied;
using gnmr::kGranted;
using gnmr::kInRecovery;
using gnmr::kNonFinite;
using gnmr::kPromote;
using gnmr::kSkip;
using gnmr::kSystemic;
using gnmr::kTriggered;
using gnmr::SystemicAction;

namespace {

// The tree as docs/algorithm.md ("The total norm") writes it, recursively
// on copies: a block of 2s values folds to the s sums v[j] + v[j + s], until
// one is left; the squares are padded with zeros to a multiple of 256, each
// 256-block folded so, and the block sums the same way, level by level.
double fold(std::vector<double> v) {
  if (v.size() == 1) return v[0];
  std::vector<double> half(v.size() / 2);
  for (std::size_t j = 0; j < half.size(); ++j) half[j] = v[j] + v[j + half.size()];
  return fold(half);
}
double tree_reference(std::vector<double> level) {
  do {
    level.resize((level.size() + 255) / 256 * 256, 0.0);
    std::vector<double> up;
    for (std::size_t b = 0; b < level.size(); b += 256)
      up.push_back(fold(std::vector<double>(level.begin() + static_cast<std::ptrdiff_t>(b),
                                            level.begin() + static_cast<std::ptrdiff_t>(b + 256))));
    level = up;
  } while (level.size() > 1);
  return level[0];
}

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

TEST_CASE("the total norm's tree: bit for bit against an independent tree, close to the exact sum",
          "[systemic][cuda-logic]") {
  std::mt19937_64 rng(77);
  for (std::size_t n : {1u, 2u, 255u, 256u, 257u, 1000u, 65536u, 65537u, 300000u}) {
    for (int trial = 0; trial < 3; ++trial) {
      std::vector<float> norms(n);
      std::vector<double> sq(n);
      long double exact = 0.0L;
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint64_t r = rng();
        // Norms over 12 decades, some exact zeros, NaN and +-Inf (which count 0).
        float x = std::ldexp(static_cast<float>((r >> 11) & 0xffffff) / 16777216.0f, static_cast<int>(r % 40) - 20);
        if (r % 97 == 0) x = 0.0f;
        if (r % 101 == 0) x = kNaN;
        if (r % 103 == 0) x = (r & 1) ? kInf : -kInf;
        if (trial == 2 && i % 7 == 0) x = from_bits(0x5f000000u + static_cast<std::uint32_t>(r % 1000));  // ~9e18
        norms[i] = x;
        sq[i] = std::isfinite(x) ? static_cast<double>(x) * static_cast<double>(x) : 0.0;
        exact += static_cast<long double>(sq[i]);
      }
      std::vector<double> scratch(gnmr::detail::total_scratch_size(n));
      const double got_d = gnmr::detail::total_sq_tree(norms.data(), n, scratch.data());
      INFO("n " << n << " trial " << trial);
      // The double before its rounding: another order would show here.
      const double want = tree_reference(sq);
      CHECK(std::memcmp(&got_d, &want, 8) == 0);
      const float got = static_cast<float>(got_d);
      // And within one float ulp of the exact sum (double rounding error is
      // far below it); both +inf when the sum leaves the float range.
      const float ex = static_cast<float>(exact);
      if (std::isinf(ex))
        CHECK(got == ex);
      else
        CHECK(std::fabs(got - ex) <= std::nextafter(ex, kInf) - ex);
    }
  }
  double scratch[1];
  CHECK(gnmr::detail::total_sq_tree(nullptr, 0, scratch) == 0.0);
}

TEST_CASE("denied units: clipped to kappa * mu without a slot, when the rule is on", "[semantics][systemic]") {
  gnmr::ControllerOptions on;
  on.denied.action = gnmr::DeniedAction::kClip;
  on.denied.kappa = 2.0f;
  // N = 3, maxO 1, lock 3. t = 3: units 0 (r 10) and 1 (r 20) trigger; unit 1
  // takes the slot, unit 0 is denied: 2 * 1 / 10 with the rule, 1 without.
  for (const bool rule : {false, true}) {
    Ctl c = make(3, ema(0.5f), trig(3.0f, kInf, 2), maxo(1, 3, 0), 1.0f, rule ? on : gnmr::ControllerOptions{});
    c.step_norms({1, 1, 1});
    c.step_norms({1, 1, 1});
    const auto s = c.step_norms({10, 20, 1});
    INFO("rule " << rule);
    SEM_FLAGS(c.reports()[0].flags, kTriggered | kDenied);
    CHECK(c.decisions()[0].scale == (rule ? 0.2f : 1.0f));
    SEM_FLAGS(c.reports()[1].flags, kTriggered | kGranted | kInRecovery);
    CHECK(c.decisions()[1].scale == 0.05f);
    CHECK(s.denied == 1u);
    CHECK(c.reports()[0].lock_left == 0);  // no slot, no lock
    // t = 4: unit 0 spikes again (mu = 15/7 after the feed 3) and is denied
    // again; a denied unit whose norm is under kappa * mu keeps scale 1.
    c.step_norms({100, 1, 4});
    CHECK(c.decisions()[0].scale == (rule ? 2.0f * c.reports()[0].mean / 100.0f : 1.0f));
    SEM_FLAGS(c.reports()[2].flags, kTriggered | kDenied);
    CHECK(c.decisions()[2].scale == (rule ? 0.5f : 1.0f));  // min(1, 2 * 1 / 4)
  }
  // On a systemic step the systemic action replaces the denial (and its clip).
  gnmr::ControllerOptions both = systemic(SystemicAction::kClipTriggered, 0.0);  // C = 0: any trigger
  both.denied = on.denied;
  Ctl c = make(3, ema(0.5f), trig(3.0f, kInf, 2), maxo(1, 3, 0), 1.0f, both);
  c.step_norms({1, 1, 1});
  c.step_norms({1, 1, 1});
  c.step_norms({10, 20, 1});
  SEM_FLAGS(c.reports()[0].flags, kTriggered | kSystemic);
  CHECK(c.decisions()[0].scale == 0.1f);  // the systemic kappa 1, not the denied kappa 2
}

namespace {

// GNMR's trigger with tau = 2 + unit: a per-unit threshold, written from UnitView::unit.
struct TauByUnit {
  static constexpr const char* kName = "tau_by_unit";
  gnmr::GnmrTrigger base = trig(2.0f, kInf, 2);
  using State = gnmr::GnmrTrigger::State;
  static State init() { return gnmr::GnmrTrigger::init(); }
  gnmr::GnmrTrigger at(std::uint32_t u) const {
    gnmr::GnmrTrigger t = base;
    t.tau = base.tau + static_cast<float>(u);
    return t;
  }
  void evaluate(const State& s, gnmr::UnitView& v) const { at(v.unit).evaluate(s, v); }
  float feed(const gnmr::UnitView& v) const { return at(v.unit).feed(v); }
  void update(State& s, const gnmr::UnitView& v) const { base.update(s, v); }
  std::string check() const { return base.check(); }
};

}  // namespace

TEST_CASE("UnitView::unit: a trigger with a per-unit threshold", "[semantics]") {
  gnmr::GnmrController<gnmr::L2Norm, gnmr::EmaMean, TauByUnit, gnmr::ClipToMean, gnmr::Unlimited> c(4, {}, ema(0.5f));
  c.step_norms({1, 1, 1, 1});
  c.step_norms({1, 1, 1, 1});
  // r = 3.5 everywhere: above tau 2 (unit 0) and 3 (unit 1), not 4 or 5.
  const auto s = c.step_norms({3.5f, 3.5f, 3.5f, 3.5f});
  CHECK(s.triggered == 2u);
  SEM_FLAGS(c.reports()[0].flags, kTriggered | kGranted | kInRecovery);
  SEM_FLAGS(c.reports()[1].flags, kTriggered | kGranted | kInRecovery);
  SEM_FLAGS(c.reports()[2].flags, 0u);
  SEM_FLAGS(c.reports()[3].flags, 0u);
  CHECK(c.reports()[1].risk == 3.5f / 3.0f);
  // A policy of one's own is named in the state blob's identity.
  CHECK(gnmr::policy_identity(c.policies()) == "l2/ema/tau_by_unit/clip_to_mean/unlimited");
}

TEST_CASE("promoted_units(): ascending, built without allocation, held through a non-finite step",
          "[semantics][promote]") {
  using Promote = gnmr::Compose<gnmr::ClipToMean, gnmr::PromotePrecision>;
  gnmr::GnmrController<gnmr::L2Norm, gnmr::EmaMean, gnmr::GnmrTrigger, Promote, gnmr::MaxO> c(
      4, {}, ema(0.5f), trig(3.0f, kInf, 2), {}, maxo(2, 3, 0));
  const std::uint32_t* buf = c.promoted_units().data();
  const std::size_t cap = c.promoted_units().capacity();
  c.step_norms({1, 1, 1, 1});
  c.step_norms({1, 1, 1, 1});
  CHECK(c.promoted_units().empty());
  c.step_norms({1, 1, 10, 1});  // t = 3: unit 2 granted, locked t = 3..5
  CHECK(c.promoted_units() == std::vector<std::uint32_t>{2});
  c.step_norms({10, 1, kNaN, 1});  // t = 4: unit 0 granted; unit 2 NaN inside its lock
  SEM_FLAGS(c.reports()[2].flags, kInRecovery | kNonFinite | kSkip | kPromote);
  CHECK(c.decisions()[2].scale == 0.0f);
  CHECK(c.promoted_units() == std::vector<std::uint32_t>{0, 2});
  c.step_norms({1, 1, kInf, 1});  // t = 5: still both
  CHECK(c.promoted_units() == std::vector<std::uint32_t>{0, 2});
  c.step_norms({1, 1, 1, 1});  // t = 6: unit 2 released
  CHECK(c.promoted_units() == std::vector<std::uint32_t>{0});
  c.step_norms({kNaN, 1, 1, 1});  // t = 7: unit 0's lock ends at t = 6; a NaN outside a lock: no promotion
  c.step_norms({1, 1, 1, 1});
  CHECK(c.promoted_units().empty());
  CHECK(c.promoted_units().data() == buf);
  CHECK(c.promoted_units().capacity() == cap);
  CHECK(cap >= 4u);
  c.reset();
  CHECK(c.promoted_units().empty());

  // The probe runs on a copy: a stateful action's state is untouched by the
  // non-finite step (NormReplace advances on every finite sample).
  using NR = gnmr::Compose<gnmr::NormReplace, gnmr::PromotePrecision>;
  gnmr::Unlimited u;
  u.lock = 3;
  gnmr::GnmrController<gnmr::L2Norm, gnmr::NoMean, gnmr::AlwaysTrigger, NR, gnmr::Unlimited> d(2, {}, {}, {}, {}, u);
  d.step_norms({1, 2});  // granted at t = 1, locked t = 1..3
  const auto before = bytes_of(d.unit_states()[1].recovery);
  d.step_norms({1, kNaN});
  SEM_FLAGS(d.reports()[1].flags, kInRecovery | kNonFinite | kSkip | kPromote);
  CHECK(bytes_of(d.unit_states()[1].recovery) == before);
  CHECK(d.promoted_units() == std::vector<std::uint32_t>{0, 1});
  // Through the DynController face too.
  auto dyn = gnmr::make_dyn(std::move(d));
  dyn->step_norms(std::vector<float>{1, 1});
  CHECK(dyn->promoted_units() == std::vector<std::uint32_t>{0, 1});
}

TEST_CASE("presets: gnmr-systemic and the systemic and denied overrides", "[dyn][systemic]") {
  namespace P = gnmr::presets;
  // gnmr and gnmr-systemic have the rule on (gnmr_systemic_rule(), share
  // 0.5), gnmr-clip and gnmr-promote have it off.
  CHECK(P::gnmr_systemic_rule().action != SystemicAction::kOff);
  auto g = P::make("gnmr", 10);
  auto& typed = static_cast<gnmr::DynAdapter<P::Gnmr>&>(*g).controller();
  CHECK(typed.policies().opt.systemic.action == P::gnmr_systemic_rule().action);
  CHECK(typed.policies().opt.denied.action == gnmr::DeniedAction::kClip);  // gnmr_denied_rule()
  CHECK(typed.policies().opt.denied.kappa == P::gnmr_denied_rule().kappa);
  for (const char* off_name : {"gnmr-clip", "gnmr-promote"})
    CHECK(P::with_preset(off_name, 10, P::Options{}, [](const auto& c) { return c.policies().opt.systemic.action; }) ==
          SystemicAction::kOff);
  auto s = P::make("gnmr-systemic", 10);
  const auto& so = static_cast<gnmr::DynAdapter<P::GnmrClip>&>(*s).controller().policies().opt;
  CHECK(so.systemic.action == P::gnmr_systemic_rule().action);
  CHECK(so.systemic.share == 0.5);
  CHECK(static_cast<gnmr::DynAdapter<P::GnmrClip>&>(*s).controller().systemic_threshold() == 5u);
  // Overrides.
  P::Options o;
  o.systemic_action = std::string("global_clip");
  o.systemic_share = 0.25;
  o.systemic_maxo = 1.5;
  o.systemic_kappa = 2.0f;
  o.systemic_beta = 0.9f;
  o.deny_kappa = 1.5f;
  auto t = P::make("gnmr", 10, o);
  const auto& c = static_cast<gnmr::DynAdapter<P::Gnmr>&>(*t).controller();
  CHECK(c.policies().opt.systemic.action == SystemicAction::kGlobalClip);
  CHECK(c.policies().opt.systemic.kappa == 2.0f);
  CHECK(c.policies().opt.systemic.beta == 0.9f);
  CHECK(c.policies().opt.denied.action == gnmr::DeniedAction::kClip);
  CHECK(c.policies().opt.denied.kappa == 1.5f);
  CHECK(c.systemic_threshold() == 2u);  // min(floor(2.5), floor(1.5 * 4))
  // gnmr-systemic and gnmr-clip are one type: their blobs interchange.
  CHECK_NOTHROW(P::make("gnmr-clip", 10)->load(s->save()));
  // Errors: a knob without an action, an unknown action, a bad value, a
  // preset the knob does not apply to.
  P::Options k;
  k.systemic_share = 0.3;
  CHECK_THROWS_WITH(P::make("gnmr-clip", 10, k), Catch::Contains("need the systemic rule on"));
  CHECK_NOTHROW(P::make("gnmr", 10, k));
  CHECK_NOTHROW(P::make("gnmr-systemic", 10, k));
  P::Options bad;
  bad.systemic_action = std::string("sometimes");
  CHECK_THROWS_WITH(P::make("gnmr-systemic", 10, bad), Catch::Contains("off, clip-triggered, global-clip, skip"));
  P::Options range;
  range.systemic_share = 1.5;
  CHECK_THROWS_WITH(P::make("gnmr-systemic", 10, range), Catch::Contains("share must be in [0, 1]"));
  P::Options off;
  off.systemic_action = std::string("off");
  auto f = P::make("gnmr-systemic", 10, off);
  CHECK(static_cast<gnmr::DynAdapter<P::GnmrClip>&>(*f).controller().policies().opt.systemic.action ==
        SystemicAction::kOff);
  CHECK_THROWS_WITH(P::make("zclip", 1, k), Catch::Contains("does not apply to preset 'zclip'"));
  gnmr::ControllerOptions opt;
  opt.denied.kappa = 0.0f;
  CHECK_THROWS_WITH(gnmr::GnmrController<>(3, {}, {}, {}, {}, {}, opt), Catch::Contains("DeniedRule: kappa"));
}

TEST_CASE("event log: one systemic line per systemic step", "[telemetry][systemic]") {
  auto line_of = [](SystemicAction a) {
    Ctl c = make(4, ema(0.5f), trig(3.0f, kInf, 2), maxo(1, 2, 0), 1.0f, systemic(a, 0.5, 0.0, 1.0f, 0.5f));
    std::ostringstream os;
    gnmr::EventLog log(os);
    for (int t = 0; t < 3; ++t) {
      c.step_norms({1, 1, 1, 1});
      log.write_from(c);
    }
    c.step_norms({10, 10, 10, 1});
    log.write_from(c);
    c.step_norms({1, 1, 1, 1});  // not systemic: no systemic line
    log.write_from(c);
    log.flush();
    std::istringstream in(os.str());
    std::string l, found;
    int count = 0;
    while (std::getline(in, l))
      if (l.find("\"event\":\"systemic\"") != std::string::npos) {
        found = l;
        ++count;
      }
    CHECK(count == 1);
    return found;
  };
  CHECK(line_of(SystemicAction::kClipTriggered) ==
        "{\"step\":4,\"unit\":-1,\"name\":\"global\",\"event\":\"systemic\",\"triggered\":3,\"norm\":null,"
        "\"mean\":null,\"ratio\":null,\"delta\":null,\"risk\":null,\"action\":\"clip-triggered\"}");
  CHECK(line_of(SystemicAction::kSkip) ==
        "{\"step\":4,\"unit\":-1,\"name\":\"global\",\"event\":\"systemic\",\"triggered\":3,\"norm\":null,"
        "\"mean\":null,\"ratio\":null,\"delta\":null,\"risk\":null,\"action\":\"skip\"}");
  // G = sqrt(301) = 17.3493519, M = 2, G / M, s = 2 / G.
  char want[512];
  const float g = std::sqrt(301.0f);
  std::snprintf(want, sizeof want,
                "{\"step\":4,\"unit\":-1,\"name\":\"global\",\"event\":\"systemic\",\"triggered\":3,\"norm\":%.9g,"
                "\"mean\":2,\"ratio\":%.9g,\"delta\":null,\"risk\":null,\"action\":\"global-clip:%.9g\"}",
                static_cast<double>(g), static_cast<double>(g / 2.0f), static_cast<double>(2.0f / g));
  CHECK(line_of(SystemicAction::kGlobalClip) == want);
  // The mask drops it.
  CHECK(gnmr::kEvAll & gnmr::kEvSystemic);
}
