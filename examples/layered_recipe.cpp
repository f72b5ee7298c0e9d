// examples/layered_recipe.cpp — GNMR inside a recipe's own rule, in one step:
// what the recommended controller is made of, rule by rule.
//
// The preset "default" (gnmr::make_default) IS a layered controller,
// "stabilizer+gnmr-calibrated" (docs/presets.md, "The default";
// docs/algorithm.md, "Layered controllers"): a recipe that renormalises
// every unit's gradient on every step (Stable-SPAM's AdaGN, the
// `stabilizer` preset) with GNMR's calibrated, budgeted trigger inside it.
// Both rules see the same raw norms; the scales multiply; a skip from
// either skips; promotion comes from GNMR alone. The program builds it by
// its name, "default", checks on every step that it decides exactly as
// presets::make("stabilizer+gnmr-calibrated") does, and reads the two
// rules apart through gnmr::LayeredController::outer() / inner(). Any
// other pair composes the same way ("clip+gnmr", "spam+gnmr-promote", or
// gnmr::LayeredController(outer, inner) for two controllers of one's own).
//
// Twelve units with noisy norms; unit 3 spikes x40 at step 60 (after the
// 20 steps in which GNMR's trigger calibrates each unit's thresholds) and
// unit 7's norm is NaN at step 90. The program prints what each rule did on
// those steps, checks the combination rule on every step, and shows that a
// checkpoint of the layered controller resumes with the same decisions.
// On the spike both rules clip, and the default product of scales clips
// twice (the stabilizer's renormalisation, about 0.02, then GNMR's clip of
// the granted unit to its mean, about 0.026); gnmr::LayeredController(outer,
// inner, gnmr::ScaleCombine::kMin) takes the smaller scale instead. The
// stabilizer scales every unit on every step, so a scale of 1 is not "GNMR
// did nothing": GNMR's part is in the flags (kTriggered, kGranted, kPromote).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "gnmr/gnmr.hpp"

namespace {

constexpr std::size_t kUnits = 12;
constexpr int kSteps = 140;
int failures = 0;

void check(bool ok, const char* what, int step) {
  if (!ok) {
    std::printf("CHECK FAILED at step %d: %s\n", step, what);
    ++failures;
  }
}

// Noise in [-1, 1) from a hash of (step, unit): the same trace with every
// compiler and standard library.
float noise(int t, std::size_t u) {
  std::uint32_t h = static_cast<std::uint32_t>(t) * 0x9E3779B1u ^ static_cast<std::uint32_t>(u + 1) * 0x85EBCA77u;
  h ^= h >> 15, h *= 0x2C1B3C6Du, h ^= h >> 12, h *= 0x297A2D39u, h ^= h >> 15;
  return static_cast<float>(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

std::vector<float> partials_at(int t) {
  std::vector<float> p(kUnits);
  for (std::size_t u = 0; u < kUnits; ++u) {
    float n = (1.0f + 0.1f * static_cast<float>(u)) * (1.0f + 0.08f * noise(t, u));
    if (t == 60 && u == 3) n *= 40.0f;
    if (t == 90 && u == 7) n = std::nanf("");
    p[u] = n * n;  // L2 partial: the sum of squares
  }
  return p;
}

bool same(const gnmr::UnitDecision& a, const gnmr::UnitDecision& b) { return a.scale == b.scale && a.flags == b.flags; }

}  // namespace

int main() {
  // The recommended controller, by name; gnmr::make_default(kUnits) is the same.
  auto ctl = gnmr::presets::make("default", kUnits);
  // ... which is this layered pair, spelled out.
  auto spelled = gnmr::presets::make("stabilizer+gnmr-calibrated", kUnits);
  const auto& layered = dynamic_cast<const gnmr::LayeredController&>(*ctl);
  std::printf("\"%s\" = outer \"%s\" + inner \"%s\" (scales: %s)\n", ctl->name().c_str(),
              layered.outer().name().c_str(), layered.inner().name().c_str(),
              layered.combine_rule() == gnmr::ScaleCombine::kProduct ? "product" : "min");
  std::vector<std::uint8_t> checkpoint;
  std::vector<std::vector<float>> rest;  // the steps after the checkpoint
  std::vector<std::vector<gnmr::UnitDecision>> seen;
  for (int t = 1; t <= kSteps; ++t) {
    const std::vector<float> p = partials_at(t);
    const gnmr::StepSummary& s = ctl->step(p);
    spelled->step(p);
    const auto& d = ctl->decisions();
    const auto& od = layered.outer().decisions();
    const auto& id = layered.inner().decisions();
    for (std::size_t u = 0; u < kUnits; ++u) {
      check(same(d[u], spelled->decisions()[u]), "\"default\" decides as stabilizer+gnmr-calibrated", t);
      check(d[u].scale == od[u].scale * id[u].scale, "scale is outer x inner", t);
      check(((d[u].flags & gnmr::kPromote) != 0) == ((id[u].flags & gnmr::kPromote) != 0),
            "promotion comes from GNMR", t);
      check((d[u].flags & ~gnmr::kOuterFlags) == (id[u].flags & ~gnmr::kOuterFlags),
            "every flag but skip, reset and non-finite comes from GNMR", t);
      if (!(d[u].flags & gnmr::kNonFinite))
        check(od[u].scale != 1.0f || t == 1, "the stabilizer scales every finite unit on every step", t);
      if (t != 60 || u != 3) check((d[u].flags & gnmr::kTriggered) == 0, "GNMR triggers on the spike alone", t);
    }
    if (t == 60) {
      std::printf("step 60, unit 3 spikes x40: stabilizer scale %.4f, GNMR scale %.4f%s%s -> applied %.4f\n",
                  static_cast<double>(od[3].scale), static_cast<double>(id[3].scale),
                  (id[3].flags & gnmr::kGranted) ? ", granted" : "", (id[3].flags & gnmr::kPromote) ? ", promoted" : "",
                  static_cast<double>(d[3].scale));
      check((d[3].flags & gnmr::kGranted) && (d[3].flags & gnmr::kPromote), "the spiking unit is granted and promoted",
            t);
      check(s.granted == 1, "one grant on the spike step", t);
      check(id[3].scale < 1.0f && d[3].scale < od[3].scale, "GNMR's clip acts on top of the stabilizer's", t);
    }
    if (t == 90) {
      std::printf("step 90, unit 7 is NaN: flags %s%s; the other units %s\n",
                  (d[7].flags & gnmr::kNonFinite) ? "NONFINITE " : "", (d[7].flags & gnmr::kSkip) ? "SKIP" : "",
                  (d[0].flags & gnmr::kSkip) ? "skipped too" : "update");
      check((d[7].flags & gnmr::kSkip) != 0 && d[7].scale == 0.0f, "the NaN unit is skipped", t);
      for (std::size_t u = 0; u < kUnits; ++u)
        if (u != 7) check((d[u].flags & gnmr::kSkip) == 0, "only the NaN unit is skipped", t);
    }
    if (t == 100) checkpoint = ctl->save();
    if (t > 100) {
      rest.push_back(p);
      seen.push_back(d);
    }
  }
  // Resume from the checkpoint in a fresh controller: the same decisions.
  auto resumed = gnmr::make_default(kUnits);
  resumed->load(checkpoint);
  for (std::size_t k = 0; k < rest.size(); ++k) {
    resumed->step(rest[k]);
    for (std::size_t u = 0; u < kUnits; ++u)
      check(same(resumed->decisions()[u], seen[k][u]), "the resumed controller decides like the original",
            101 + static_cast<int>(k));
  }
  std::printf("%s: %d steps, checkpoint at 100 resumed identically; %s\n", ctl->name().c_str(), kSteps,
              failures ? "CHECKS FAILED" : "all checks passed");
  return failures ? 1 : 0;
}
