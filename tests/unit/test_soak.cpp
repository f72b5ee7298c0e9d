// Soak test: the default controller over a million faulty steps.
//
// 64 units, 1,000,000 steps of a random trace with faults mixed in: spikes
// (x10 .. x1e4), NaN, +-Inf, zeros, long dead stretches, tiny values, huge
// values up to FLT_MAX, and bursts where many units spike at once. Every
// step checks the invariants a user relies on: every float of the state
// stays finite and bounded, at most maxO units are in recovery, decisions
// are sane (scale in [0, 1], skip means scale 0, non-finite means skip).
// At step 500,000 the state is saved and loaded into a fresh controller;
// from then on both run side by side and must agree bit for bit.
//
// Hidden tag [.soak]: the default `gnmr_tests` run skips it; CTest runs it
// as its own entry (`gnmr_tests "[soak]"`, label soak). About 20 s in a
// Release build on one core; a second case runs the calibrated trigger
// (the default's inner rule) over 200,000 steps of the same faults.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gnmr/host/controller.hpp"
#include "gnmr/io/state.hpp"
#include "gnmr/presets/typed.hpp"
#include "../support/summary_eq.hpp"

namespace {

// The fault-injecting trace. Deterministic (fixed seed) so a failure repeats.
class FaultyTrace {
 public:
  explicit FaultyTrace(std::size_t units) : rng_(20261122u), base_(units), dead_until_(units, 0) {
    std::uniform_real_distribution<double> e(-3.0, 2.0);
    for (auto& b : base_) b = std::pow(10.0, e(rng_));
  }

  void next(std::int64_t t, std::vector<float>& out) {
    const std::size_t n = base_.size();
    // A burst: a third of the units spike together (exercises maxO denials).
    const bool burst = uni(rng_) < 2e-4;
    for (std::size_t i = 0; i < n; ++i) {
      const double drift = 1.0 + 0.3 * std::sin(static_cast<double>(t) * 1e-4 + static_cast<double>(i));
      double v = base_[i] * drift * (0.8 + 0.4 * uni(rng_));
      if (burst && i % 3 == 0) v *= 10.0 + 90.0 * uni(rng_);
      if (t < dead_until_[i]) v = 0.0;
      const double u = uni(rng_);
      float f = static_cast<float>(v);
      if (u < 1e-3) {
        f = static_cast<float>(v * std::pow(10.0, 1.0 + 3.0 * uni(rng_)));  // spike
      } else if (u < 1.2e-3) {
        f = std::numeric_limits<float>::quiet_NaN();
      } else if (u < 1.3e-3) {
        f = std::numeric_limits<float>::infinity();
      } else if (u < 1.35e-3) {
        f = -std::numeric_limits<float>::infinity();
      } else if (u < 1.55e-3) {
        f = 0.0f;
      } else if (u < 1.6e-3) {
        f = static_cast<float>(std::pow(10.0, 20.0 + 18.0 * uni(rng_)));  // huge
      } else if (u < 1.62e-3) {
        f = FLT_MAX;
      } else if (u < 1.65e-3) {
        f = 1e-30f;
      } else if (u < 1.65e-3 + 2e-6) {
        dead_until_[i] = t + 1000 + static_cast<std::int64_t>(uni(rng_) * 20000.0);  // a dead stretch
      }
      out[i] = f;
    }
  }

 private:
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> uni{0.0, 1.0};
  std::vector<double> base_;
  std::vector<std::int64_t> dead_until_;
};

bool finite(float x) { return std::isfinite(x); }

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Field by field: the structs have padding, which memcmp would compare too.
template <class S>
bool same_state(const S& x, const S& y, int window) {
  bool ok = bits(x.mean.m) == bits(y.mean.m) && bits(x.mean.beta_pow) == bits(y.mean.beta_pow) &&
            x.mean.k == y.mean.k && x.trigger.head == y.trigger.head && x.trigger.n == y.trigger.n &&
            x.budget.granted_at == y.budget.granted_at;
  for (int j = 0; j < window; ++j) ok = ok && bits(x.trigger.ring[j]) == bits(y.trigger.ring[j]);
  return ok;
}

using testsupport::same_summary;  // tests/support/summary_eq.hpp

}  // namespace

TEST_CASE("soak: a million faulty steps keep every invariant", "[.soak]") {
  using C = gnmr::GnmrController<>;
  const std::size_t kUnits = 64;
  const std::int64_t kSteps = 1000000;
  const std::int64_t kSaveAt = 500000;
  C a(kUnits);
  C b(kUnits);  // gets a's state at kSaveAt
  const gnmr::MaxO budget = a.policies().budget;
  const std::uint32_t max_o = static_cast<std::uint32_t>(budget.max_o);
  const int window = a.policies().trigger.window;

  FaultyTrace trace(kUnits);
  std::vector<float> norms(kUnits);
  std::vector<float> max_fed(kUnits, 0.0f);  // largest finite norm seen per unit
  std::uint64_t n_grant = 0, n_deny = 0, n_nonfinite = 0, n_full = 0;

  for (std::int64_t t = 1; t <= kSteps; ++t) {
    trace.next(t, norms);
    for (std::size_t i = 0; i < kUnits; ++i)
      if (finite(norms[i]) && norms[i] > max_fed[i]) max_fed[i] = norms[i];

    if (t == kSaveAt + 1) {
      const std::vector<std::uint8_t> blob = gnmr::save_state(a);
      gnmr::load_state(b, blob.data(), blob.size());
      REQUIRE(b.steps_done() == a.steps_done());
      REQUIRE(gnmr::save_state(b) == blob);
    }

    const gnmr::StepSummary& s = a.step_norms(norms);
    n_grant += s.granted;
    n_deny += s.denied;
    n_nonfinite += s.nonfinite;
    n_full += s.in_recovery == max_o ? 1u : 0u;

    // Plain bools, not Catch macros (too slow 64 million times); the first
    // violation is described and fails the test.
    const auto& st = a.unit_states();
    const auto& dec = a.decisions();
    const auto& rep = a.reports();
    std::uint32_t in_rec = 0;
    for (std::size_t i = 0; i < kUnits; ++i) {
      const auto& u = st[i];
      const float sc = dec[i].scale;
      const std::uint32_t f = dec[i].flags;
      in_rec += (f & gnmr::kInRecovery) ? 1u : 0u;
      const char* bad = nullptr;
      // EMA state: finite, within [0, largest sample], bias term in [0, 1].
      if (!(finite(u.mean.m) && u.mean.m >= 0.0f && u.mean.m <= max_fed[i])) bad = "EMA m";
      else if (!(u.mean.beta_pow >= 0.0f && u.mean.beta_pow <= 1.0f)) bad = "EMA beta^k";
      // Trigger history: finite, non-negative ratios.
      else if (!(u.trigger.n <= static_cast<std::uint32_t>(window) &&
                 u.trigger.head < static_cast<std::uint32_t>(window))) bad = "ratio ring indices";
      else if (!(u.budget.granted_at >= 0 && u.budget.granted_at <= t)) bad = "granted_at";
      // Decisions and reports.
      else if (!(finite(sc) && sc >= 0.0f && sc <= 1.0f)) bad = "scale";
      else if ((f & gnmr::kSkip) && sc != 0.0f) bad = "skip with a non-zero scale";
      else if (!finite(norms[i]) && !((f & gnmr::kSkip) && (f & gnmr::kNonFinite))) bad = "non-finite norm not skipped";
      else if (!(rep[i].risk >= 0.0f)) bad = "risk";
      else if (!(finite(rep[i].mean) && rep[i].mean >= 0.0f)) bad = "reported mean";
      for (int j = 0; !bad && j < window; ++j)
        if (!(finite(u.trigger.ring[j]) && u.trigger.ring[j] >= 0.0f)) bad = "ratio ring value";
      if (bad) {
        FAIL("step " << t << ", unit " << i << ": " << bad << " -- norm " << norms[i] << ", m "
             << u.mean.m << ", k " << u.mean.k << ", max norm fed " << max_fed[i] << ", ring "
             << u.trigger.ring[0] << " " << u.trigger.ring[1] << " " << u.trigger.ring[2] << " "
             << u.trigger.ring[3] << ", ratio " << rep[i].ratio << ", mean " << rep[i].mean
             << ", risk " << rep[i].risk << ", scale " << sc << ", flags " << f);
      }
    }
    if (s.in_recovery > max_o || in_rec != s.in_recovery || s.step != t)
      FAIL("step " << t << ": in_recovery " << s.in_recovery << " (flags say " << in_rec
           << ", maxO " << max_o << ")");

    if (t > kSaveAt) {
      b.step_norms(norms);
      // Bit for bit: decisions, reports (no padding in either), the whole
      // state and the summary.
      static_assert(sizeof(gnmr::UnitDecision) == 8 && sizeof(gnmr::UnitReport) == 32,
                    "UnitDecision / UnitReport gained padding: compare field by field");
      bool same =
          std::memcmp(a.decisions().data(), b.decisions().data(), kUnits * sizeof(gnmr::UnitDecision)) == 0 &&
          std::memcmp(a.reports().data(), b.reports().data(), kUnits * sizeof(gnmr::UnitReport)) == 0 &&
          same_summary(a.summary(), b.summary());
      for (std::size_t i = 0; same && i < kUnits; ++i)
        same = same_state(a.unit_states()[i], b.unit_states()[i], window);
      if (!same) {
        INFO("the reloaded controller diverged at step " << t);
        REQUIRE(same);
      }
    }
  }
  // The trace did exercise what it claims to.
  CHECK(n_grant > 1000);
  CHECK(n_deny > 100);
  CHECK(n_full > 100);
  CHECK(n_nonfinite > 10000);
  CHECK(b.steps_done() == kSteps);
}

// The calibrated trigger (the default's inner rule) under the same faults:
// 200,000 steps of 64 units, every float of its statistics finite and
// bounded (locations and window values within the log2 range a float
// ratio can have, spreads non-negative and bounded by that range, the bias
// products in (0, 1]), the budget respected, decisions sane; the state
// saved at the half-way point and reloaded decides bit for bit alike.
TEST_CASE("soak: the calibrated trigger's statistics stay finite and bounded", "[.soak]") {
  using C = gnmr::presets::GnmrCalibrated;
  const std::size_t kUnits = 64;
  const std::int64_t kSteps = 200000, kSaveAt = 100000;
  C a = gnmr::presets::gnmr_calibrated(kUnits);
  C b = gnmr::presets::gnmr_calibrated(kUnits);
  const std::uint32_t max_o = static_cast<std::uint32_t>(a.policies().budget.max_o);
  const int window = a.policies().trigger.window;
  FaultyTrace trace(kUnits);
  std::vector<float> norms(kUnits);
  std::uint64_t n_trig = 0, n_grant = 0, n_held = 0;
  const auto stat_ok = [](const gnmr::detail::LogStat& x) {
    // m and s are raw EMAs of values in [-126 - 3 spreads, 128 + ...]: finite
    // and within a few hundred; p a product of betas.
    return finite(x.m) && std::fabs(x.m) < 1000.0f && finite(x.s) && x.s >= 0.0f && x.s < 1000.0f &&
           x.p > 0.0f && x.p <= 1.0f;
  };
  for (std::int64_t t = 1; t <= kSteps; ++t) {
    trace.next(t, norms);
    if (t == kSaveAt + 1) {
      const std::vector<std::uint8_t> blob = gnmr::save_state(a);
      gnmr::load_state(b, blob.data(), blob.size());
      REQUIRE(gnmr::save_state(b) == blob);
    }
    const gnmr::StepSummary& s = a.step_norms(norms);
    n_trig += s.triggered;
    n_grant += s.granted;
    n_held += s.systemic == static_cast<std::uint32_t>(gnmr::SystemicAction::kHold) ? 1u : 0u;
    const auto& st = a.unit_states();
    const char* bad = nullptr;
    std::size_t at = 0;
    for (std::size_t i = 0; i < kUnits && !bad; ++i) {
      const auto& u = st[i].trigger;
      at = i;
      if (!stat_ok(u.level) || !stat_ok(u.jump)) bad = "a statistic";
      for (int j = 0; !bad && j < window; ++j)
        if (!(finite(u.ring[j]) && u.ring[j] >= -126.0f && u.ring[j] <= 128.0f)) bad = "a window value";
      const float sc = a.decisions()[i].scale;
      if (!bad && !(finite(sc) && sc >= 0.0f && sc <= 1.0f)) bad = "scale";
      if (!bad && !(finite(st[i].mean.m) && st[i].mean.m >= 0.0f)) bad = "EMA m";
    }
    if (bad) FAIL("step " << t << ", unit " << at << ": " << bad);
    if (s.in_recovery > max_o) FAIL("step " << t << ": in_recovery " << s.in_recovery);
    if (t > kSaveAt) {
      b.step_norms(norms);
      const bool same =
          std::memcmp(a.decisions().data(), b.decisions().data(), kUnits * sizeof(gnmr::UnitDecision)) == 0 &&
          std::memcmp(a.reports().data(), b.reports().data(), kUnits * sizeof(gnmr::UnitReport)) == 0 &&
          same_summary(a.summary(), b.summary());
      if (!same) {
        INFO("the reloaded calibrated controller diverged at step " << t);
        REQUIRE(same);
      }
    }
  }
  CHECK(n_trig > 1000);
  CHECK(n_grant > 100);
  CHECK(n_held > 10);  // the bursts (a third of the units spike together) are held
}
