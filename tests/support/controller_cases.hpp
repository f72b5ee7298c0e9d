// tests/support/controller_cases.hpp — the cases of the GPU test
// "controller vs host" (tests/cuda/test_controller.cu) as data, shared with
// the CPU suite (tests/unit/test_gpu_case_preconditions.cpp).
//
// Each case says what its trace must exercise for the comparison to prove
// something (contention: denied or systemic steps; grants; for a systemic
// rule, both systemic and ordinary steps). Those preconditions depend only
// on the host controller and the trace, so the CPU suite checks them on every
// run: a case whose trace cannot meet them fails here, on a machine without
// a GPU, instead of the first time a GPU runs it (which is how a max_grants
// case at share 0.5 over 3000 units, never systemic, went unnoticed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gnmr/host/controller.hpp"
#include "gnmr/policy/mean.hpp"
#include "trace_gen.hpp"

namespace ctlcases {

// GNMR's trigger with a per-unit tau: tau + (unit % 4) / 2 (a policy can
// read its unit's index: UnitView::unit).
struct PerUnitTau {
  static constexpr const char* kName = "per_unit_tau";
  gnmr::GnmrTrigger base;
  using State = gnmr::GnmrTrigger::State;
  GNMR_HOST_DEVICE static State init() { return gnmr::GnmrTrigger::init(); }
  GNMR_HOST_DEVICE gnmr::GnmrTrigger at(std::uint32_t unit) const {
    gnmr::GnmrTrigger t = base;
    t.tau = gnmr::math::add(base.tau, 0.5f * static_cast<float>(unit % 4u));
    return t;
  }
  GNMR_HOST_DEVICE void evaluate(const State& s, gnmr::UnitView& v) const { at(v.unit).evaluate(s, v); }
  GNMR_HOST_DEVICE float feed(const gnmr::UnitView& v) const { return at(v.unit).feed(v); }
  GNMR_HOST_DEVICE void update(State& s, const gnmr::UnitView& v) const { base.update(s, v); }
  std::string check() const { return base.check(); }
};

struct Case {
  std::string name;
  std::size_t n;
  int steps;
  std::uint64_t seed;
  bool from_partials;
  bool expect_denials;
  bool caller_workspace;              // the device controller in a caller-owned workspace
  std::vector<std::uint64_t> numel;   // unit sizes (RMS norms), empty if none
  Case(std::string name_, std::size_t n_, int steps_, std::uint64_t seed_, bool from_partials_,
       bool expect_denials_, bool caller_workspace_ = false)
      : name(std::move(name_)), n(n_), steps(steps_), seed(seed_), from_partials(from_partials_),
        expect_denials(expect_denials_), caller_workspace(caller_workspace_) {}
};

inline gnmr::ControllerOptions systemic_opt(gnmr::SystemicAction a, double share, double maxo_multiple = 0.0) {
  gnmr::ControllerOptions o;
  o.systemic.action = a;
  o.systemic.share = share;
  o.systemic.maxo_multiple = maxo_multiple;
  return o;
}

inline gnmr::MaxO maxo(std::int32_t max_o, std::int32_t lock, std::int32_t cooldown = 0) {
  gnmr::MaxO b;
  b.max_o = max_o;
  b.lock = lock;
  b.cooldown = cooldown;
  return b;
}

// Calls visit(const Case&, HostController&&) for every case; `quick` is the
// GPU harness's reduced sizes (GNMR_CUDA_TEST_QUICK=1).
template <class Visit>
void visit_cases(bool quick, Visit&& visit) {
  const bool q = quick;
  visit(Case{"default, maxO 3", 1000, q ? 30 : 60, 101, false, true},
        gnmr::GnmrController<>(1000, {}, {}, {}, {}, maxo(3, 4)));
  {
    const std::size_t n = q ? 100000 : 1000000;
    visit(Case{"default, maxO 2, large N", n, q ? 16 : 25, 102, false, true},
          gnmr::GnmrController<>(n, {}, {}, {}, {}, maxo(2, 3)));
  }
  // 40 slots > kTopKCap: the full radix select over all units, with a
  // cool-down, in a caller-owned workspace (two-phase form).
  visit(Case{"default, maxO 40, caller workspace", 5000, 40, 103, false, true, true},
        gnmr::GnmrController<>(5000, {}, {}, {}, {}, maxo(40, 3, 2)));
  {
    // From partials, RMS norm (unit sizes), window mean, reset on grant,
    // unlimited budget (never denies).
    using Rec = gnmr::Compose<gnmr::ClipToMean, gnmr::ResetMoments>;
    using Host = gnmr::GnmrController<gnmr::RmsNorm, gnmr::WindowMean<16>, gnmr::GnmrTrigger, Rec, gnmr::Unlimited>;
    const std::size_t n = 3000;
    gnmr::Unlimited b;
    b.lock = 2;
    Case c{"rms/window/reset/unlimited from partials", n, 40, 104, true, false};
    c.numel.resize(n);
    for (std::size_t i = 0; i < n; ++i) c.numel[i] = 1 + (i * 7919) % 100000;
    visit(c, Host(n, {}, {}, {}, {}, b));
  }
  // The systemic rule: the trace's bursts (every 7th step from 14, a quarter
  // of the tie groups) are systemic; the ordinary spikes are not.
  // C = min(floor(0.5 * 1000), floor(5 * 3)) = 15: the bursts.
  visit(Case{"systemic clip-triggered, maxO 3", 1000, q ? 30 : 60, 105, false, true},
        gnmr::GnmrController<>(1000, {}, {}, {}, {}, maxo(3, 4),
                               systemic_opt(gnmr::SystemicAction::kClipTriggered, 0.5, 5.0)));
  {
    const std::size_t n = q ? 100000 : 1000000;  // 3907 block sums: a three-level tree
    visit(Case{"systemic global-clip, large N, from partials", n, q ? 16 : 30, 106, true, true},
          gnmr::GnmrController<>(n, {}, {}, {}, {}, maxo(2, 3), systemic_opt(gnmr::SystemicAction::kGlobalClip, 0.1)));
  }
  visit(Case{"systemic skip, maxO 40", 5000, 40, 107, false, true},
        gnmr::GnmrController<>(5000, {}, {}, {}, {}, maxo(40, 3, 2), systemic_opt(gnmr::SystemicAction::kSkip, 0.1)));
  // The per-step cap (max_grants 2 of maxO 6) under clip-triggered: every
  // ordinary step with three or more candidates and free slots selects two
  // of them, on the top-k path (slots <= its cap) and on the full select
  // (maxO 64); the bursts (share 0.1: more than 300 of 3000 units) are
  // systemic steps.
  for (const std::int32_t max_o : {6, 64}) {
    auto o = systemic_opt(gnmr::SystemicAction::kClipTriggered, 0.1);
    o.systemic.max_grants = 2;
    visit(Case{max_o == 6 ? "max_grants 2, maxO 6" : "max_grants 2, maxO 64", 3000, q ? 30 : 60, 109, false, true},
          gnmr::GnmrController<>(3000, {}, {}, {}, {}, maxo(max_o, 3), o));
  }
  {
    // The denied-unit clip (systemic off), and a trigger that reads the unit index.
    gnmr::ControllerOptions o;
    o.denied.action = gnmr::DeniedAction::kClip;
    o.denied.kappa = 1.5f;
    using Host = gnmr::GnmrController<gnmr::L2Norm, gnmr::EmaMean, PerUnitTau>;
    visit(Case{"denied clip, per-unit tau", 2000, q ? 30 : 60, 108, false, true},
          Host(2000, {}, {}, {}, {}, maxo(3, 4), o));
  }
}

// What a case's run exercised, counted on the host controller's summaries.
struct Stats {
  std::size_t denied_steps = 0, grants = 0, systemic_steps = 0, capped_steps = 0;
  int steps = 0;
  void add(const gnmr::StepSummary& s, std::uint32_t max_grants) {
    ++steps;
    denied_steps += s.denied > 0;
    grants += s.granted;
    systemic_steps += s.systemic != 0u;
    capped_steps += max_grants != 0u && s.granted == max_grants && s.denied > 0;
  }
};

// The input of step s of a case (norms, or their squares as partials).
inline void fill(const Case& c, int s, std::vector<float>& in) {
  tracegen::fill(c.seed, s, in);
  if (c.from_partials)
    for (float& x : in) x = x * x;  // a sum of squares; NaN/Inf stay non-finite
}

// Empty when the run exercised what the comparison needs, else why not.
template <class PS>
std::string unmet(const Case& c, const PS& p, const Stats& st) {
  const bool systemic_on = p.opt.systemic.action != gnmr::SystemicAction::kOff;
  if (!(st.grants > 0)) return c.name + ": no grant in the trace";
  if (c.expect_denials && st.denied_steps + st.systemic_steps < 3)
    return c.name + ": the trace did not contend (" + std::to_string(st.denied_steps) + " denied steps, " +
           std::to_string(st.systemic_steps) + " systemic)";
  if (systemic_on && !(st.systemic_steps >= 1 && st.systemic_steps + 2 <= static_cast<std::size_t>(st.steps)))
    return c.name + ": the trace should have systemic and ordinary steps (" + std::to_string(st.systemic_steps) +
           " systemic of " + std::to_string(st.steps) + ")";
  if (p.opt.systemic.max_grants != 0u && st.capped_steps == 0)
    return c.name + ": the per-step cap never bound (no step granted max_grants with a candidate left)";
  return std::string();
}

// The host side of a case alone: its Stats (what the CPU suite checks).
template <class HostCtl>
Stats host_stats(const Case& c, HostCtl& host) {
  if (!c.numel.empty()) host.set_unit_numel(c.numel.data(), c.numel.size());
  std::vector<float> in(c.n);
  Stats st;
  for (int s = 1; s <= c.steps; ++s) {
    fill(c, s, in);
    st.add(c.from_partials ? host.step(in) : host.step_norms(in), host.policies().opt.systemic.max_grants);
  }
  return st;
}

}  // namespace ctlcases
