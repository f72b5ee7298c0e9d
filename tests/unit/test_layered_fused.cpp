// CPU checks of the fused layered step's premise (gnmr/cuda/layered_fused.cuh):
// an outer rule whose selection is the identity (detail::selection_free:
// unlimited slots, no systemic rule, no warm-up clip) can be stepped without
// its phase 2 — its per-unit evaluate + commit with rule_all() and
// systemic_none() is its whole step. The fused kernel does exactly that on
// the device; here the same functors run that order on the host, next to
// the inner controller, combined by layer_decision / layer_summary, and
// must give gnmr::LayeredController's decisions, summaries and outer
// decisions bit for bit, on partials with spikes, NaN, Inf and zeros. Also:
// which presets are selection-free (the fused path must refuse the others).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gnmr/host/layered.hpp"
#include "gnmr/presets/make.hpp"
#include "gnmr/presets/table.hpp"
#include "gnmr/step/layered.hpp"
#include "gnmr/step/select.hpp"
#include "gnmr/step/step.hpp"
#include "gnmr/step/systemic.hpp"

#include "../support/summary_eq.hpp"
#include "../support/trace_gen.hpp"
#include "../support/make_once.hpp"

namespace {

namespace presets = gnmr::presets;

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }


// The fused order on the host: the outer's per-unit step (no selection),
// the inner controller's own step, the combine.
template <class Outer, class Inner>
void check_pair(const std::string& outer_name, const std::string& inner_name, std::size_t n, int steps) {
  const std::string name = outer_name + "+" + inner_name;
  Outer outer_typed = [&] {
    std::unique_ptr<Outer> o;
    presets::with_preset(outer_name, n, {}, [&o](auto c) {
      if constexpr (std::is_same<decltype(c), Outer>::value) o.reset(new Outer(std::move(c)));
      return 0;
    });
    REQUIRE(o);
    return *o;
  }();
  const auto p = outer_typed.policies();
  REQUIRE(gnmr::detail::selection_free(p));
  using PS = typename Outer::Policies;
  std::vector<typename PS::UnitState> st(n, PS::init_unit());
  // The inner as the layered plan builds it (its overrides inside an outer rule).
  auto inner = gnmr_test::make(inner_name, n, presets::plan_layered(name, n, {}).inner);
  auto layered = gnmr_test::make(name, n);
  auto* lc = dynamic_cast<gnmr::LayeredController*>(layered.get());
  REQUIRE(lc != nullptr);
  std::vector<float> in(n);
  std::size_t bad = 0, bad_outer = 0, acted = 0;
  for (int t = 1; t <= steps; ++t) {
    tracegen::preset_partials(t, in);
    // NaN, Inf and zero units too (the safety action, the zero-norm rule).
    in[(static_cast<std::size_t>(t) * 13) % n] = std::numeric_limits<float>::quiet_NaN();
    if (t % 5 == 0) in[(static_cast<std::size_t>(t) * 29 + 3) % n] = std::numeric_limits<float>::infinity();
    if (t % 7 == 0) in[(static_cast<std::size_t>(t) * 31 + 5) % n] = 0.0f;
    inner->step(in.data(), n);
    layered->step(in.data(), n);
    std::uint32_t skip = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto u = static_cast<std::uint32_t>(i);
      const float norm = p.norm.finish(in[i], 1.0);
      const gnmr::UnitView v0 = gnmr::detail::evaluate_unit(p, st[i], norm, t, u);
      const std::uint64_t key = gnmr::detail::is_candidate(v0.flags) ? gnmr::detail::rank_key(v0.risk, u) : 0u;
      gnmr::SystemicStep sy = gnmr::systemic_none();
      sy.warm_scale = gnmr::detail::warmup_clip_scale(p.opt.warmup_clip, t, 0.0f);
      gnmr::UnitDecision dout{};
      std::uint32_t g = 0;
      gnmr::detail::commit_unit(p, st[i], v0, gnmr::detail::rule_grants(gnmr::detail::rule_all(), key), sy, dout,
                                nullptr, g);
      skip |= g;
      const gnmr::UnitDecision ref_outer = lc->outer().decisions()[i];
      bad_outer += dout.flags != ref_outer.flags || !same_bits(dout.scale, ref_outer.scale);
      const gnmr::UnitDecision d = gnmr::layer_decision(dout, inner->decisions()[i], gnmr::ScaleCombine::kProduct);
      bad += d.flags != layered->decisions()[i].flags || !same_bits(d.scale, layered->decisions()[i].scale);
      acted += (dout.flags & gnmr::kGranted) != 0u;
    }
    gnmr::StepSummary os{};
    os.skip_step = skip;
    const gnmr::StepSummary s = gnmr::layer_summary(os, inner->summary());
    bad += !testsupport::same_summary(s, layered->summary());
  }
  INFO(name << ": " << bad << " layered and " << bad_outer << " outer differences over " << steps << " steps");
  CHECK(bad == 0);
  CHECK(bad_outer == 0);
  CHECK(acted > 0);  // the outer granted: the test exercised its commit
}

}  // namespace

TEST_CASE("fused layered order: a selection-free outer stepped per unit equals LayeredController", "[layered][fused]") {
  check_pair<presets::Stabilizer, presets::GnmrCalibrated>("stabilizer", "gnmr-calibrated", 300, 160);
  check_pair<presets::Stabilizer, presets::GnmrPromote>("stabilizer", "gnmr-promote", 300, 160);
  // Spam: unlimited slots and its timer (the restart), still selection-free.
  check_pair<presets::Spam, presets::GnmrCalibrated>("spam", "gnmr-calibrated", 200, 140);
}

TEST_CASE("selection_free: which presets can be fused as an outer rule", "[layered][fused]") {
  const auto free_of = [](const std::string& name) {
    bool out = false;
    presets::with_preset(name, 8, {}, [&out](auto c) {
      out = gnmr::detail::selection_free(c.policies());
      return 0;
    });
    return out;
  };
  CHECK(free_of("stabilizer"));
  CHECK(free_of("spam"));
  CHECK(free_of("clip"));           // unlimited, but global: make_device keeps it generic
  CHECK_FALSE(free_of("adagc"));    // its warm-up global clip needs the total
  CHECK_FALSE(free_of("gnmr"));     // maxO budget, systemic rule
  CHECK_FALSE(free_of("gnmr-calibrated"));
  CHECK_FALSE(free_of("gnmr-systemic"));
  presets::Options o;
  o.systemic_action = "global-clip";
  bool sys = true;
  presets::with_preset("gnmr-clip", 8, o, [&sys](auto c) {
    sys = gnmr::detail::selection_free(c.policies());
    return 0;
  });
  CHECK_FALSE(sys);
}
