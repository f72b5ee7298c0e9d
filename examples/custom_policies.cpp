// examples/custom_policies.cpp — the host controller in a plain C++ training
// loop with a policy set of one's own: how to write a trigger and a recovery
// action, and how to swap every other policy. It builds a typed
// GnmrController instead of the recommended gnmr::make_default because its
// point is writing your own policies (for a controller to use as is, start
// from spiky_trace.cpp).
//
//   GnmrController<RmsNorm,             norm: L2 / sqrt(elements), so units of any size compare
//                  WindowMean<32>,      mean: the last 24 accepted norms
//                  StreakTrigger,       written here: a jump OR a slow creep
//                  RampClip,            written here: a clip that loosens over the lock
//                  MaxO>                budget: 2 slots, lock 6, cool-down 4
//
// A policy is a small struct with the members the built-in ones have (see
// include/gnmr/policy/*.hpp, and docs/policies.md for the checked list):
// kName (it goes into the state blob's fingerprint), a trivially copyable
// per-unit State with a static init(), the hooks of its kind, and check()
// returning "" or an error message (the controller's constructor throws
// std::invalid_argument with it). Hooks marked GNMR_HOST_DEVICE compile for
// the GPU too, so the same structs plug into gnmr::cuda::DeviceController.
// Decision arithmetic goes through gnmr::math (correctly rounded, the same on
// the host and the device).
//
// The loop: a linear model with four heads (y_h = W_h x + b_h, one unit per
// head: its weight and bias as two segments), SGD with momentum (the update
// of sgd_momentum.hpp, which honours skip, scale and moment resets), and
// injected label faults: heads 0, 1, 2 at step 50 (three spikes, two
// slots), head 1 again at step 58 (cooling down), and from step 100 a slow
// rise of head 3's label noise that no single step would call a spike.
// The program prints every grant and denial and checks that each of those
// happened as described; it exits non-zero otherwise.
//
// Expected output: docs/record/examples.md, "custom_policies".
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "gnmr/gnmr.hpp"
#include "sgd_momentum.hpp"

// ------------------------------------------------------------- trigger ----
// Fires on a jump (r > tau, as GNMR) or on a creep: `patience` steps in a
// row with r > creep. A trigger fills v.risk (slot priority), v.target (the
// norm its own rule would clip to), v.delta (reported as the unit's delta;
// here the streak length) and the kTriggered / kWarmup flags; it never sees
// a non-finite norm.
struct StreakTrigger {
  static constexpr const char* kName = "streak";
  float tau = 4.0f;
  float creep = 1.2f;
  std::uint32_t patience = 5;
  std::uint32_t warmup = 8;  // samples in the mean before a verdict

  struct State {
    std::uint32_t streak;  // consecutive elevated steps before this one
  };
  GNMR_HOST_DEVICE static State init() { return State{0u}; }

  GNMR_HOST_DEVICE std::uint32_t next_streak(const State& s, const gnmr::UnitView& v) const {
    return v.count >= warmup && v.ratio > creep ? s.streak + 1u : 0u;
  }
  // Pure: it runs before the slot selection, maybe more than once per step.
  GNMR_HOST_DEVICE void evaluate(const State& s, gnmr::UnitView& v) const {
    v.target = gnmr::math::mul(tau, v.mean);
    v.delta = 0.0f;
    v.risk = 0.0f;
    if (v.count < warmup) {
      v.flags |= gnmr::kWarmup;
      return;
    }
    const std::uint32_t streak = next_streak(s, v);
    v.delta = static_cast<float>(streak);
    v.risk = gnmr::math::max(gnmr::math::div(v.ratio, tau),
                           gnmr::math::div(static_cast<float>(streak), static_cast<float>(patience)));
    if (v.ratio > tau || streak >= patience) v.flags |= gnmr::kTriggered;
  }
  // What the mean is fed at the end of the step: a jump is clamped to the
  // threshold (it must not drag the mean up); a creep is fed as it is.
  GNMR_HOST_DEVICE float feed(const gnmr::UnitView& v) const {
    return (v.flags & gnmr::kTriggered) ? gnmr::math::min(v.norm, v.target) : v.norm;
  }
  // The trigger's own history, advanced on finite steps after the verdict.
  GNMR_HOST_DEVICE void update(State& s, const gnmr::UnitView& v) const { s.streak = next_streak(s, v); }
  std::string check() const {
    if (!(tau > 1.0f) || !(creep > 1.0f) || !(creep < tau))
      return "StreakTrigger: need 1 < creep < tau, got creep " + std::to_string(creep) + ", tau " +
             std::to_string(tau);
    if (patience < 1) return "StreakTrigger: patience must be >= 1";
    return {};
  }
};

// ------------------------------------------------------------ recovery ----
// Clips to kappa * mu on the grant step, then lets the level rise linearly
// to the trigger's own target over `ramp` steps, so a unit leaves recovery
// without a jump in step size. Its State counts the unit's grants: from the
// third on, the grant also resets the unit's optimizer moments. apply() runs
// for every finite unit on every step; a unit not in recovery must be left
// at scale 1 with no action flags.
struct RampClip {
  static constexpr const char* kName = "ramp_clip";
  float kappa = 1.0f;
  std::int32_t ramp = 4;

  struct State {
    std::uint32_t grants;
  };
  GNMR_HOST_DEVICE static State init() { return State{0u}; }
  GNMR_HOST_DEVICE void apply(State& s, const gnmr::UnitView& v, gnmr::UnitDecision& d,
                              std::uint32_t& /*global_skip*/) const {
    if (!(v.flags & gnmr::kInRecovery)) return;
    if (v.flags & gnmr::kGranted) {
      s.grants += 1u;
      if (s.grants >= 3u) d.flags |= gnmr::kResetMoments;
    }
    const float lo = gnmr::math::mul(kappa, v.mean);
    const std::int64_t age = v.step - v.granted_at;  // 0 on the grant step
    const float f = age >= ramp ? 1.0f : gnmr::math::div(static_cast<float>(age), static_cast<float>(ramp));
    const float hi = v.target > lo ? v.target : lo;
    const float level = gnmr::math::add(lo, gnmr::math::mul(f, gnmr::math::sub(hi, lo)));
    if (v.norm > level) d.scale = gnmr::math::div(level, v.norm);
  }
  std::string check() const {
    if (!(kappa > 0.0f)) return "RampClip: kappa must be > 0";
    if (ramp < 1) return "RampClip: ramp must be >= 1";
    return {};
  }
};

namespace {

using Controller = gnmr::GnmrController<gnmr::RmsNorm, gnmr::WindowMean<32>, StreakTrigger, RampClip, gnmr::MaxO>;

constexpr std::uint32_t kIn = 16, kHeads = 4, kBatch = 32;
constexpr int kSteps = 160;

struct Rng {  // xorshift64*, Box-Muller: the same numbers everywhere
  std::uint64_t s;
  double uniform() {
    s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
    return static_cast<double>((s * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
  }
  float normal() {
    return static_cast<float>(std::sqrt(-2.0 * std::log(uniform() + 1e-300)) * std::cos(6.283185307179586 * uniform()));
  }
};

// Label faults: multiplier of head h's label noise at step t.
float label_noise(int t, std::uint32_t h) {
  if (t == 50) return h == 0 ? 40.0f : h == 1 ? 60.0f : h == 2 ? 80.0f : 1.0f;
  if (t == 58 && h == 1) return 60.0f;
  if (t >= 100 && h == 3) return std::pow(1.06f, static_cast<float>(t - 99 < 40 ? t - 99 : 40));
  return 1.0f;
}

std::string flags_text(std::uint32_t f) {
  std::string s;
  const struct { std::uint32_t bit; const char* name; } names[] = {
      {gnmr::kTriggered, "triggered"}, {gnmr::kGranted, "granted"},   {gnmr::kDenied, "denied"},
      {gnmr::kCooldown, "cooling-down"}, {gnmr::kReleased, "released"}, {gnmr::kResetMoments, "reset-moments"}};
  for (const auto& n : names)
    if (f & n.bit) s += (s.empty() ? "" : " ") + std::string(n.name);
  return s;
}

}  // namespace

int main() {
  Rng rng{42};
  std::vector<float> truth(kHeads * kIn);
  for (float& w : truth) w = rng.normal() * 0.5f;

  // Parameters, gradients and momentum buffers; weight and bias of a head
  // are one unit.
  std::vector<float> W(kHeads * kIn, 0.0f), b(kHeads, 0.0f), dW(W.size()), db(b.size());
  std::vector<float> mW(W.size(), 0.0f), mb(b.size(), 0.0f);
  std::vector<gnmr::Segment> segs;
  for (std::uint32_t h = 0; h < kHeads; ++h) {
    segs.push_back({&dW[h * kIn], kIn, gnmr::DType::kF32, h});
    segs.push_back({&db[h], 1, gnmr::DType::kF32, h});
  }

  StreakTrigger trig;
  gnmr::WindowMean<32> mean;
  mean.window = 24;
  Controller ctl(kHeads, gnmr::RmsNorm{}, mean, trig, RampClip{}, gnmr::MaxO{2, 6, 4});
  const std::vector<std::uint64_t> numel = gnmr::unit_numel(segs, kHeads);
  ctl.set_unit_numel(numel.data(), numel.size());  // RmsNorm divides by each unit's elements
  const sgdm::Hyper hyper{0.05f, 0.9f, 0.0f};
  std::vector<float> partials(kHeads);

  int bad = 0;
  const auto expect = [&bad](bool ok, const char* what) {
    if (!ok) {
      std::printf("CHECK FAILED: %s\n", what);
      ++bad;
    }
  };
  bool creep_caught = false;
  double last_loss = 0.0;  // mean over the batch, summed over the heads
  for (int t = 1; t <= kSteps; ++t) {
    std::vector<float> x(kBatch * kIn), y(kBatch * kHeads);
    for (float& v : x) v = rng.normal();
    for (std::uint32_t r = 0; r < kBatch; ++r)
      for (std::uint32_t h = 0; h < kHeads; ++h) {
        float s = 0.0f;
        for (std::uint32_t i = 0; i < kIn; ++i) s += truth[h * kIn + i] * x[r * kIn + i];
        y[r * kHeads + h] = s + 0.1f * label_noise(t, h) * rng.normal();
      }
    // Forward and hand-written backward of the mean squared error.
    std::fill(dW.begin(), dW.end(), 0.0f);
    std::fill(db.begin(), db.end(), 0.0f);
    double loss = 0.0;
    for (std::uint32_t r = 0; r < kBatch; ++r)
      for (std::uint32_t h = 0; h < kHeads; ++h) {
        float p = b[h];
        for (std::uint32_t i = 0; i < kIn; ++i) p += W[h * kIn + i] * x[r * kIn + i];
        const float e = (p - y[r * kHeads + h]) / kBatch;
        loss += 0.5 * kBatch * double(e) * e;
        db[h] += e;
        for (std::uint32_t i = 0; i < kIn; ++i) dW[h * kIn + i] += e * x[r * kIn + i];
      }
    last_loss = loss;

    gnmr::host_unit_partials(segs, partials);
    const gnmr::StepSummary& s = ctl.step(partials);
    for (std::uint32_t h = 0; h < kHeads; ++h) {
      const gnmr::UnitDecision d = ctl.decisions()[h];
      for (std::uint32_t i = 0; i < kIn; ++i) sgdm::update(hyper, d, W[h * kIn + i], mW[h * kIn + i], dW[h * kIn + i]);
      sgdm::update(hyper, d, b[h], mb[h], db[h]);
      const gnmr::UnitReport& r = ctl.reports()[h];
      if (r.flags & (gnmr::kGranted | gnmr::kDenied))
        std::printf("step %3d head %u: ratio %6.2f streak %2.0f risk %5.2f scale %.3f  %s\n", t, h, r.ratio, r.delta,
                    r.risk, r.scale, flags_text(r.flags).c_str());
      if (h == 3 && t >= 100 && (r.flags & gnmr::kGranted) && r.ratio < trig.tau) creep_caught = true;
    }
    if (t == 50) {
      expect(s.granted == 2 && s.denied == 1, "step 50: two of the three spikes granted, one denied");
      float lowest_granted = 1e30f, denied_risk = 0.0f;
      for (std::uint32_t h = 0; h < kHeads; ++h) {
        const gnmr::UnitReport& r = ctl.reports()[h];
        if (r.flags & gnmr::kGranted) lowest_granted = std::fmin(lowest_granted, r.risk);
        if (r.flags & gnmr::kDenied) denied_risk = r.risk;
      }
      expect(denied_risk < lowest_granted, "step 50: the two highest risks win the slots");
    }
    if (t == 58)
      expect((ctl.decisions()[1].flags & gnmr::kDenied) && (ctl.decisions()[1].flags & gnmr::kCooldown),
             "step 58: head 1 is cooling down (granted at 50, lock 6, cool-down 4)");
  }
  expect(creep_caught, "the creep in head 3 was granted on its streak, below tau");
  // The spiked heads recovered: their weights are back at the truth.
  std::printf("final batch loss %.4f; weights off the truth:", last_loss);
  for (std::uint32_t h = 0; h < kHeads; ++h) {
    double err = 0.0, ref = 0.0;
    for (std::uint32_t i = 0; i < kIn; ++i) {
      const double d = double(W[h * kIn + i]) - truth[h * kIn + i];
      err += d * d, ref += double(truth[h * kIn + i]) * truth[h * kIn + i];
    }
    const double rel = std::sqrt(err / ref);
    std::printf(" head %u %.1f%%%s", h, 100.0 * rel, h == 3 ? " (its labels are still noisy)\n" : ",");
    if (h < 3) expect(rel < 0.05, "heads 0-2 learned the truth again (weights within 5%)");
  }
  std::printf(bad ? "custom_policies: %d check(s) FAILED\n" : "custom_policies: all checks passed\n", bad);
  return bad ? 1 : 0;
}
