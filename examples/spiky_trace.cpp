// examples/spiky_trace.cpp — the smallest complete use of gnmr: the
// recommended controller, gnmr::make_default(n), over a trace of gradient
// norms, and what it did on each spike.
//
// Sixteen units with slowly decaying, noisy gradient norms; now and then
// one unit spikes (alone, or several at once), and once a norm is NaN. The
// controller is the preset "default" (docs/presets.md, "The default"): the
// stabilizer (Stable-SPAM's per-unit gradient normalisation) scales every
// unit on every step, and GNMR's calibrated trigger inside it clips and
// promotes the unit that spikes. So a scale of 1 never means "nothing
// happened": what GNMR did is in the flags (kTriggered, kGranted, kPromote,
// kSkip, ...), and that is what this program prints and checks. The
// injected events, and what the default does with each:
//
//   step  10  unit 0 x30      a ratio above the ceiling (16x its mean) fires
//                             from step 2, before the unit's 20 calibration
//                             samples: granted, clipped, promoted for 8 steps
//   step  40  unit 3 x8       the unit's learned rule fires (a ratio above
//                             the floor, 2x): granted and promoted
//   step  41  unit 3 x6       again, inside its lock: clipped, no second slot
//   step  80  6 units x5      more than max(2, 10% of 16) units at once: a
//                             model-wide jump, the step is held (no grant);
//                             the stabilizer bounds each unit
//   step 120  unit 2 NaN      skipped (kSkip, scale 0): a select, never a
//                             multiply; the NaN never reaches a statistic
//   step 150  units 5, 10 x4  two at once: one grant a step, to the riskier;
//                             the other is denied, bounded by the stabilizer
//
// A run without spikes is made alongside: GNMR never triggers on it (the
// stabilizer still scales every unit). The program exits non-zero, after
// printing CHECK FAILED, when any of the above does not happen, when a unit
// triggers where no spike was injected, when a granted spiking unit leaves
// its step with a larger applied norm (scale x norm) than on its last calm
// step (GNMR's clip to the mean), or when a spiking unit GNMR triggered on
// but did not grant (held or denied: inside the default the stabilizer
// bounds those) leaves it above kStabilizerBound times that norm. The
// stabilizer rescales a unit to norm m_hat / sqrt(v_hat) of its own norms
// (gamma1 0.7, gamma2 0.9, the current norm included): after calm steps a
// spike of k times the calm norm leaves at (0.7 + 0.3k) / sqrt(0.9 + 0.1k^2)
// times the calm applied norm, at most 1.21 (k = 3.9), and below 1 from
// k = 8 on.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "gnmr/gnmr.hpp"

namespace {

constexpr std::size_t kUnits = 16;
constexpr int kSteps = 200;
int failures = 0;

void check(bool ok, int step, const char* what) {
  if (!ok) {
    std::printf("CHECK FAILED at step %d: %s\n", step, what);
    ++failures;
  }
}

struct Spike {
  int step;
  std::vector<std::size_t> units;
  float factor;  // 0 means NaN
};

// Noise in [-1, 1) from a hash of (step, unit): the same trace with every
// compiler and standard library (<random>'s distributions are not).
float noise(int t, std::size_t u) {
  std::uint32_t h = static_cast<std::uint32_t>(t) * 0x9E3779B1u ^ static_cast<std::uint32_t>(u + 1) * 0x85EBCA77u;
  h ^= h >> 15, h *= 0x2C1B3C6Du, h ^= h >> 12, h *= 0x297A2D39u, h ^= h >> 15;
  return static_cast<float>(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

std::vector<float> norms_at(int t, const std::vector<Spike>& spikes) {
  std::vector<float> n(kUnits);
  for (std::size_t u = 0; u < kUnits; ++u) {
    const float level = (1.0f + 0.2f * static_cast<float>(u)) * std::exp(-static_cast<float>(t) / 400.0f);
    n[u] = level * (1.0f + 0.05f * noise(t, u));
  }
  for (const Spike& s : spikes)
    if (s.step == t)
      for (std::size_t u : s.units) n[u] = s.factor == 0.0f ? std::nanf("") : n[u] * s.factor;
  return n;
}

bool spiked(const std::vector<Spike>& spikes, int t, std::size_t u) {
  for (const Spike& s : spikes)
    if (s.step == t)
      for (std::size_t v : s.units)
        if (v == u) return true;
  return false;
}

void print_step(int t, const gnmr::StepSummary& s, const std::vector<gnmr::UnitReport>& rep) {
  std::printf("step %3d  triggered %u  granted %u  denied %u  non-finite %u%s\n", t, s.triggered, s.granted, s.denied,
              s.nonfinite, s.systemic == 4 ? "  (held: a model-wide jump, no slot granted)" : "");
  for (std::size_t u = 0; u < kUnits; ++u) {
    const gnmr::UnitReport& r = rep[u];
    if (!(r.flags & (gnmr::kTriggered | gnmr::kNonFinite))) continue;
    const char* what = (r.flags & gnmr::kNonFinite) ? "non-finite: update skipped"
                       : (r.flags & gnmr::kGranted) ? "granted, clipped to its mean"
                       : (r.flags & gnmr::kDenied)  ? "denied (one grant a step), bounded by the stabilizer"
                       : (r.flags & gnmr::kSystemic) ? "held step, bounded by the stabilizer"
                                                     : "again while in recovery, clipped";
    std::printf("    unit %2zu  norm %9.4g  mean %7.4f  ratio %7.2f  scale %.4f%s  %s\n", u,
                static_cast<double>(r.norm), static_cast<double>(r.mean), static_cast<double>(r.ratio),
                static_cast<double>(r.scale), (r.flags & gnmr::kPromote) ? "  PROMOTE" : "", what);
  }
}

// The stabilizer's bound on a spike it alone bounds (see the top of the file),
// with room for the calm steps' own noise.
constexpr float kStabilizerBound = 1.3f;

struct Totals {
  long triggered = 0, granted = 0, denied = 0, nonfinite = 0, promoted_unit_steps = 0, held_steps = 0;
  unsigned most_in_recovery = 0;
  float min_scale = 1.0f, max_scale = 0.0f;  // over finite units: the stabilizer's range
};

Totals run(const std::vector<Spike>& spikes, bool verbose) {
  auto ctl = gnmr::make_default(kUnits);  // the recommended controller
  std::vector<float> calm(kUnits, 0.0f);  // each unit's applied norm on its last calm step
  Totals tot;
  for (int t = 1; t <= kSteps; ++t) {
    const std::vector<float> n = norms_at(t, spikes);
    // Finished norms here; ctl->step(partials, n) takes per-unit sums of squares.
    const gnmr::StepSummary& s = ctl->step_norms(n);
    const std::vector<gnmr::UnitDecision>& d = ctl->decisions();
    tot.triggered += s.triggered;
    tot.granted += s.granted;
    tot.denied += s.denied;
    tot.nonfinite += s.nonfinite;
    tot.held_steps += s.systemic == 4;
    if (s.in_recovery > tot.most_in_recovery) tot.most_in_recovery = s.in_recovery;
    check(s.granted <= 1, t, "at most one grant a step");
    for (std::size_t u = 0; u < kUnits; ++u) {
      const std::uint32_t f = d[u].flags;
      tot.promoted_unit_steps += (f & gnmr::kPromote) != 0;
      if (!(f & gnmr::kSkip)) {
        tot.min_scale = std::fmin(tot.min_scale, d[u].scale);
        tot.max_scale = std::fmax(tot.max_scale, d[u].scale);
      }
      check(((f & gnmr::kTriggered) != 0) == spiked(spikes, t, u) || (f & gnmr::kNonFinite), t,
            "a unit triggers exactly where a spike was injected");
      const float applied = d[u].scale * n[u];
      if (f & gnmr::kTriggered) {
        const bool granted = (f & (gnmr::kGranted | gnmr::kInRecovery)) != 0;
        check(applied < (granted ? 1.0f : kStabilizerBound) * calm[u], t,
              granted ? "a granted spiking unit leaves the step smaller than its last calm step did"
                      : "a spiking unit GNMR does not grant is bounded by the stabilizer");
      } else if (!(f & gnmr::kSkip)) {
        calm[u] = applied;
      }
    }
    if (verbose && (s.triggered || s.nonfinite)) print_step(t, s, ctl->reports());

    if (spikes.empty()) continue;
    const auto has = [&d](std::size_t u, std::uint32_t flags) { return (d[u].flags & flags) == flags; };
    if (t == 10) check(has(0, gnmr::kGranted | gnmr::kPromote), t, "the ceiling fires before calibration ends");
    if (t == 11) check(has(0, gnmr::kPromote), t, "the grant promotes the next step");
    if (t == 40) check(has(3, gnmr::kGranted | gnmr::kPromote), t, "the learned rule fires on a x8 spike");
    if (t == 41) check(has(3, gnmr::kTriggered | gnmr::kInRecovery) && !has(3, gnmr::kGranted), t,
                       "a second spike inside the lock is clipped without a second slot");
    if (t == 80) {
      check(s.systemic == 4 && s.granted == 0 && s.triggered == 6, t, "six units at once: the step is held");
      for (std::size_t u : {1, 5, 7, 9, 11, 13}) check(has(u, gnmr::kTriggered | gnmr::kSystemic), t, "held, bounded");
    }
    if (t == 120) check(has(2, gnmr::kNonFinite | gnmr::kSkip) && d[2].scale == 0.0f, t, "the NaN unit is skipped");
    if (t == 150) check(s.triggered == 2 && s.granted == 1 && s.denied == 1 && s.systemic == 0, t,
                        "two units at once: one grant, one denied");
  }
  return tot;
}

}  // namespace

int main() {
  const std::vector<Spike> spikes = {
      {10, {0}, 30.0f},                  // above the ceiling while calibrating
      {40, {3}, 8.0f},                   // one unit spikes
      {41, {3}, 6.0f},                   // ... and again while in recovery (keeps its lock)
      {80, {1, 5, 7, 9, 11, 13}, 5.0f},  // six units at once: a model-wide jump
      {120, {2}, 0.0f},                  // a NaN norm: skipped, never applied
      {150, {5, 10}, 4.0f},              // two at once: one grant a step
  };
  std::printf("gnmr %d.%d.%d: gnmr::make_default (\"%s\") over %zu units x %d steps\n", GNMR_VERSION_MAJOR,
              GNMR_VERSION_MINOR, GNMR_VERSION_PATCH, gnmr::make_default(1)->name().c_str(), kUnits, kSteps);
  std::printf("injected: unit 0 x30 at step 10; unit 3 x8 at 40 and x6 at 41; units 1,5,7,9,11,13 x5 at 80;\n"
              "          unit 2 NaN at 120; units 5 and 10 x4 at 150\n\n");
  const Totals spiky = run(spikes, true);
  const Totals quiet = run({}, false);
  std::printf("\n%-6s %9s %7s %7s %10s %11s %16s %20s\n", "run", "triggers", "grants", "denied", "non-finite",
              "held steps", "promoted steps", "stabilizer scales");
  for (const auto& [name, r] : {std::pair<const char*, const Totals&>{"spiky", spiky}, {"quiet", quiet}})
    std::printf("%-6s %9ld %7ld %7ld %10ld %11ld %16ld %11.3f..%.3f\n", name, r.triggered, r.granted, r.denied,
                r.nonfinite, r.held_steps, r.promoted_unit_steps, static_cast<double>(r.min_scale),
                static_cast<double>(r.max_scale));
  check(spiky.most_in_recovery <= 4, 0, "at most max_o = 4 units in recovery at once");
  check(spiky.granted == 3 && spiky.denied == 1 && spiky.nonfinite == 1 && spiky.held_steps == 1, 0,
        "the spiky run's totals: 3 grants (steps 10, 40, 150), 1 denial, 1 NaN, 1 held step");
  check(quiet.triggered == 0 && quiet.promoted_unit_steps == 0 && quiet.nonfinite == 0, 0,
        "the quiet run: GNMR never triggers, nothing is promoted");
  check(quiet.min_scale < 1.0f || quiet.max_scale > 1.0f, 0, "the quiet run: the stabilizer still scales");
  std::printf(failures ? "spiky_trace: %d check(s) FAILED\n" : "spiky_trace: all checks passed\n", failures);
  return failures ? 1 : 0;
}
