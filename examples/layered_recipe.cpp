// examples/layered_recipe.cpp — GNMR inside a recipe's own rule, in one step.
//
// A recipe that already renormalises every unit's gradient on every step
// (Stable-SPAM's AdaGN, the `stabilizer` preset) gets GNMR's budgeted
// trigger inside it as one layered controller ("stabilizer+gnmr-promote",
// docs/algorithm.md "Layered controllers"): both rules see the same raw
// norms; scales multiply; a skip from either skips; promotion comes from
// GNMR alone. On the stability benchmark this layering beat the stabilizer
// alone on activation outliers (docs/record/stability-verdict.md).
//
// Twelve units with noisy norms; unit 3 spikes x40 at step 60 and unit 7's
// norm is NaN at step 90. The program prints what each rule did on those
// steps, checks the combination rule on every step, and shows that a
// checkpoint of the layered controller resumes with the same decisions.
// On the spike both rules clip, and the default product of scales clips
// twice (about 0.02 x 0.03): gnmr-promote keeps that to the units it
// grants (no systemic or denied-unit clip, unlike gnmr), and
// gnmr::LayeredController(outer, inner, gnmr::ScaleCombine::kMin) avoids.
#include <cmath>
#include <cstdio>
#include <random>
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

std::vector<float> partials_at(int t, std::mt19937& rng) {
  std::normal_distribution<float> noise(0.0f, 0.05f);
  std::vector<float> p(kUnits);
  for (std::size_t u = 0; u < kUnits; ++u) {
    float n = (1.0f + 0.1f * static_cast<float>(u)) * (1.0f + noise(rng));
    if (t == 60 && u == 3) n *= 40.0f;
    if (t == 90 && u == 7) n = std::nanf("");
    p[u] = n * n;  // L2 partial: the sum of squares
  }
  return p;
}

}  // namespace

int main() {
  // By name; gnmr::LayeredController(outer, inner) composes any two.
  auto ctl = gnmr::presets::make("stabilizer+gnmr-promote", kUnits);
  const auto& layered = dynamic_cast<const gnmr::LayeredController&>(*ctl);
  std::mt19937 rng(1);
  std::vector<std::uint8_t> checkpoint;
  std::vector<std::vector<float>> rest;  // the steps after the checkpoint
  std::vector<std::vector<gnmr::UnitDecision>> seen;
  for (int t = 1; t <= kSteps; ++t) {
    const std::vector<float> p = partials_at(t, rng);
    const gnmr::StepSummary& s = ctl->step(p);
    const auto& d = ctl->decisions();
    const auto& od = layered.outer().decisions();
    const auto& id = layered.inner().decisions();
    for (std::size_t u = 0; u < kUnits; ++u) {
      check(d[u].scale == od[u].scale * id[u].scale, "scale is outer x inner", t);
      check(((d[u].flags & gnmr::kPromote) != 0) == ((id[u].flags & gnmr::kPromote) != 0),
            "promotion comes from GNMR", t);
    }
    if (t == 60) {
      std::printf("step 60, unit 3 spikes x40: stabilizer scale %.4f, GNMR scale %.4f%s%s -> applied %.4f\n",
                  static_cast<double>(od[3].scale), static_cast<double>(id[3].scale),
                  (id[3].flags & gnmr::kGranted) ? ", granted" : "", (id[3].flags & gnmr::kPromote) ? ", promoted" : "",
                  static_cast<double>(d[3].scale));
      check((d[3].flags & gnmr::kGranted) && (d[3].flags & gnmr::kPromote), "the spiking unit is granted and promoted",
            t);
      check(s.granted >= 1, "a grant on the spike step", t);
    }
    if (t == 90) {
      std::printf("step 90, unit 7 is NaN: flags %s%s; the other units %s\n",
                  (d[7].flags & gnmr::kNonFinite) ? "NONFINITE " : "", (d[7].flags & gnmr::kSkip) ? "SKIP" : "",
                  (d[0].flags & gnmr::kSkip) ? "skipped too" : "update");
      check((d[7].flags & gnmr::kSkip) != 0, "the NaN unit is skipped", t);
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
  auto resumed = gnmr::presets::make("stabilizer+gnmr-promote", kUnits);
  resumed->load(checkpoint);
  for (std::size_t k = 0; k < rest.size(); ++k) {
    resumed->step(rest[k]);
    for (std::size_t u = 0; u < kUnits; ++u)
      check(resumed->decisions()[u].scale == seen[k][u].scale && resumed->decisions()[u].flags == seen[k][u].flags,
            "the resumed controller decides like the original", 101 + static_cast<int>(k));
  }
  std::printf("%s: %d steps, checkpoint at 100 resumed identically; %s\n", ctl->name().c_str(), kSteps,
              failures ? "CHECKS FAILED" : "all checks passed");
  return failures ? 1 : 0;
}
