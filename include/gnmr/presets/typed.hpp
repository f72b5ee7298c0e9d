// gnmr/presets/typed.hpp — the peers' methods as typed controllers.
//
// The peers: global clipping (torch clip_grad_norm_), ZClip, AdaGC, SPAM,
// skip-step (OLMo-core) and GradientStabilizer (Stable-SPAM's AdaGN) are
// each a choice of the five policies, with the peer's published defaults
// (docs/presets.md, Peers (b)); tests/unit/test_presets.cpp and test_presets_more.cpp
// check every one against an independent double-precision reimplementation
// of the peer's rule (tests/unit/presets_ref.hpp). What a preset
// deliberately does differently (the current sample is never in its own
// statistic, non-finite norms are skipped rather than propagated, ...) is in
// docs/presets.md.
//
// These aliases and factories cost nothing at run time and are what a CUDA
// kernel instantiates (gnmr::cuda::DeviceController<...> takes the same
// policies). Selection by name is in gnmr/presets/table.hpp and
// gnmr/presets/make.hpp. Presets whose rule is global (clip, zclip, skip-step)
// are meant for ONE unit: sum the per-tensor L2 partials into unit 0.
#pragma once

#include <cfloat>
#include <cstddef>
#include <cstdint>

#include "gnmr/host/controller.hpp"
#include "gnmr/policy/budget.hpp"
#include "gnmr/policy/mean.hpp"
#include "gnmr/policy/mean_peers.hpp"
#include "gnmr/policy/norm.hpp"
#include "gnmr/policy/recovery.hpp"
#include "gnmr/policy/recovery_ladder.hpp"
#include "gnmr/policy/recovery_norm_replace.hpp"
#include "gnmr/policy/trigger.hpp"
#include "gnmr/policy/trigger_calibrated.hpp"
#include "gnmr/policy/trigger_noise.hpp"
#include "gnmr/policy/trigger_zscore.hpp"

namespace gnmr {
namespace presets {

// ---------------------------------------------------------------- types ----
// torch.nn.utils.clip_grad_norm_: scale = min(1, max_norm / (n + 1e-6)).
// Also the "none" preset (pass_through below): the same type whose threshold
// is the largest float, so no finite norm is ever clipped.
using GlobalClip = GnmrController<L2Norm, NoMean, FixedThreshold, ClipToTarget, Unlimited>;
// ZClip (bluorion-com/ZClip zclip/zclip.py).
using ZClip = GnmrController<L2Norm, EmaMeanVar, ZScoreTrigger, ClipToTarget, Unlimited>;
// AdaGC, per-tensor mode (lishuai-97/AdaGC megatron-gpt2.patch, class AdaGC).
using AdaGC = GnmrController<L2Norm, MinSeededEma, GnmrTrigger, ClipToTarget, Unlimited>;
// SPAM's spike rule at unit granularity (TianjinYellow/SPAM-Optimizer SPAM.py).
using Spam =
    GnmrController<L2Norm, EmaSquareMean, GnmrTrigger, Compose<ClipToTarget, ResetMoments>, Unlimited>;
// OLMo-core SkipStepOptimizer (optim/skip_step_optimizer.py).
using SkipStep = GnmrController<L2Norm, WindowMean<128>, ZScoreTrigger, GlobalSkip, Unlimited>;
// Stable-SPAM's AdaGN ("GradientStabilizer", galore_torch/stablespam.py).
using Stabilizer = GnmrController<L2Norm, NoMean, AlwaysTrigger, NormReplace, Unlimited>;
// GNMR with the escalation ladder (the preset "gnmr" itself is below, after
// GnmrWith: it is GNMR's signal with clip + promotion and the systemic rule).
using GnmrLadder = GnmrController<L2Norm, EmaMean, GnmrTrigger, Ladder, MaxO>;

// GNMR's signal (L2, EMA, GnmrTrigger, MaxO) with the recovery action as the
// one parameter, on either backend: GnmrWith<R> is the host controller,
// GnmrWith<R, gnmr::cuda::DeviceController> the device one. The benchmark's
// arms (promotion against clipping driven by the same signal,
// docs/algorithm.md, Promotion: prior art) differ in R alone, so each is
// one line.
template <class Recovery,
          template <class, class, class, class, class> class Controller = GnmrController>
using GnmrWith = Controller<L2Norm, EmaMean, GnmrTrigger, Recovery, MaxO>;
// Recovery actions: clip the current step's gradient to kappa * mu and send
// the unit to the higher-precision path for the lock (docs/algorithm.md,
// Precision promotion).
using ClipAndPromote = Compose<ClipToMean, PromotePrecision>;
using GnmrPromote = GnmrWith<ClipAndPromote>;         // preset "gnmr-promote"
using GnmrPromoteOnly = GnmrWith<PromotePrecision>;   // promotion, gradient untouched
using GnmrClip = GnmrWith<ClipToMean>;                // preset "gnmr-clip" (= GnmrController<>)
// The preset "gnmr": GNMR as the stability benchmark chose it on its
// development seeds (docs/record/stability.md, "Choosing the defaults"): clip to
// kappa * mu and promote for the lock (the type of gnmr-promote), with the
// systemic rule on (gnmr_systemic_rule()) and denied units clipped to their
// mean (gnmr_denied_rule()). GnmrController<> keeps the clip
// alone in its Recovery slot: it is the policies' defaults, gnmr-clip.
using Gnmr = GnmrPromote;
// The preset "gnmr-calibrated" (issue 31): gnmr-promote's action (clip to
// kappa * mu and promote for the lock) and budget, with thresholds the
// trigger sets per unit from a false-alarm rate (CalibratedTrigger,
// docs/algorithm.md, "Calibrated trigger") instead of tau and delta.
using GnmrCalibrated = GnmrController<L2Norm, EmaMean, CalibratedTrigger, ClipAndPromote, MaxO>;
// The preset "gnmr-noise-floor": promotion of the units whose gradient is
// below sqrt(3) times its quantization noise (NoiseFloorTrigger, Chmiel et
// al.'s threshold per unit; docs/algorithm.md, "Noise-floor trigger"),
// under GNMR's budget. Nothing is clipped; the systemic and denied-unit
// rules are off (a denied unit keeps its low precision, which bounds
// nothing and needs no bound). Steps take the noise: step_with_aux.
using GnmrNoiseFloor = GnmrController<L2Norm, EmaMean, NoiseFloorTrigger, PromotePrecision, MaxO>;

// The systemic rule of the presets "gnmr" and "gnmr-systemic", and the
// denied-unit rule of "gnmr" (docs/record/stability.md, "Choosing the defaults").
inline SystemicRule gnmr_systemic_rule() { return SystemicRule{SystemicAction::kClipTriggered}; }
inline DeniedRule gnmr_denied_rule() { return DeniedRule{DeniedAction::kClip, 1.0f}; }
// The systemic rule of "gnmr-calibrated" (and so of "default"): a step on
// which more than a tenth of the units trigger at once is a model-wide jump
// (the end of a learning-rate warm-up, a recipe's change), not a local
// numerical risk: no slot is granted on it (kHold), the outer rule and the
// recipe's clip deal with it (docs/algorithm.md, "Systemic steps"; chosen on
// development seeds, docs/record/stability-verdict.md). On any other step at
// most one slot is granted: two or three units triggering together (q and k
// of one layer, gate and up) are one event, promoted once; the others are
// denied units, bounded by calibrated_denied_rule(). Chosen on development
// seeds (the same page, "Coupled triggers").
inline SystemicRule calibrated_systemic_rule() {
  SystemicRule r;
  r.action = SystemicAction::kHold;
  r.share = 0.1;
  r.min_count = 2;  // a pair of units may be one local event (an operator and its neighbour)
  r.max_grants = 1;
  return r;
}
// The denied-unit rule of "gnmr-calibrated" (and so of "default"): a
// triggered unit that gets no slot (denied by the budget or the one-grant
// cap, or on a held step) is clipped to the trigger's target, the largest
// norm the unit's own statistics call calm (the level threshold as a norm,
// at most `ceiling` times its mean): every unit that triggered leaves the
// step bounded, without a slot or a lock (docs/algorithm.md, "Denied units").
inline DeniedRule calibrated_denied_rule() { return DeniedRule{DeniedAction::kClipTarget, 1.0f}; }

// ------------------------------------------------ published parameters ----
// Field names follow the peer's own arguments so a user can copy a config.
struct TorchClipParams {
  float max_norm = 1.0f;
  float eps = 1e-6f;  // torch adds it to the norm: max_norm / (n + eps)
};
struct ZClipParams {
  float alpha = 0.97f;
  float z_thresh = 2.5f;
  std::uint32_t warmup_steps = 25;
  float max_grad_norm = 1.0f;  // +inf for ZClip's None
  float eps = 1e-6f;
  ZScoreTrigger::Clip clip_option = ZScoreTrigger::Clip::kAdaptive;
  float clip_factor = 1.0f;
};
struct AdaGCParams {
  float clip_ratio = 1.04f;
  float beta = 0.99f;
  float eps = 1e-6f;
  std::uint32_t start_clip_steps = 100;
  // Steps 1..start_clip_steps: AdaGC's global clip at --clip-grad (1.0),
  // each tensor's minimum taken after it (ControllerOptions::warmup_clip).
  // +inf: no warm-up clip, the minimum of the raw norms.
  float clip_grad = 1.0f;
};
struct SpamParams {
  float threshold = 5000.0f;  // theta: a spike is n^2 > theta * v
  float beta2 = 0.999f;
  // SPAM checks from its grad_accu_steps-th step on (current_step >= 20),
  // i.e. once grad_accu_steps - 1 samples are in v.
  std::uint32_t grad_accu_steps = 20;
  // SPAM's timer (DeltaT, 500 in the peer's constructor): every delta_t
  // steps every unit's v restarts from zero, its moments are reset, and no
  // unit is checked for grad_accu_steps steps (ControllerOptions::timer).
  // 0 = off.
  std::uint32_t delta_t = 500;
};
struct SkipStepParams {
  int rolling_interval_length = 128;  // at most 128 (WindowMean<128>)
  float sigma_factor = 6.0f;
  // OLMo-core decides once max(2, len/2) values, the current one included,
  // are in its list: max(2, len/2) - 1 earlier samples. 0 = that rule.
  std::uint32_t warmup = 0;
  // Feed the z threshold on a skipped step (our rule); false = OLMo-core's
  // raw feed.
  bool clamp_feed = true;
};
struct StabilizerParams {
  float gamma1 = 0.7f;
  float gamma2 = 0.9f;
  float eps = 1e-8f;
  // Stable-SPAM's restart every update_proj_gap steps (1000 in the peer's
  // code): 0 = off, the default, because the peer ties it to GaLore's
  // projection gap (docs/presets.md, stabilizer).
  std::uint32_t restart_every = 0;
};

// ----------------------------------------------------------- factories ----
// Never acts on a finite norm, but a non-finite unit is still skipped: the
// safety action holds for every preset. The type is GlobalClip's: "none" is
// global clipping at an unreachable threshold, not a type of its own.
inline GlobalClip pass_through(std::size_t num_units) {
  return GlobalClip(num_units, {}, {}, FixedThreshold{FLT_MAX, 0.0f}, ClipToTarget{0.0f},
                    Unlimited{1, 0});
}

inline GlobalClip global_clip(std::size_t num_units = 1, const TorchClipParams& p = {}) {
  return GlobalClip(num_units, {}, {}, FixedThreshold{p.max_norm, p.eps}, ClipToTarget{p.eps},
                    Unlimited{1, 0});
}

inline ZClip zclip(std::size_t num_units = 1, const ZClipParams& p = {}) {
  ZScoreTrigger t;
  t.z = p.z_thresh;
  t.warmup = p.warmup_steps;
  t.eps = p.eps;
  t.max_norm = p.max_grad_norm;
  t.clip = p.clip_option;
  t.clip_factor = p.clip_factor;
  t.clamp_feed = true;  // ZClip feeds its clip value to the EMA
  return ZClip(num_units, {}, EmaMeanVar{p.alpha, p.warmup_steps}, t,
               ClipToTarget{1e-6f},  // ZClip's apply_in_place_clipping adds 1e-6
               Unlimited{1, 0});
}

inline AdaGC adagc(std::size_t num_units, const AdaGCParams& p = {}) {
  GnmrTrigger t;
  t.tau = p.clip_ratio;
  t.delta = inf_f();
  t.warmup = p.start_clip_steps;
  t.clamp_feed = true;  // the EMA follows the clipped norm, clip_ratio * EMA
  ControllerOptions opt;
  opt.warmup_clip = WarmupClipRule{p.start_clip_steps, p.clip_grad, p.eps};
  return AdaGC(num_units, {}, MinSeededEma{p.beta, p.start_clip_steps}, t, ClipToTarget{p.eps},
               Unlimited{1, 0}, opt);
}

inline Spam spam(std::size_t num_units, const SpamParams& p = {}) {
  GnmrTrigger t;
  t.tau = math::sqrt(p.threshold);  // n / sqrt(v) > sqrt(theta)  <=>  n^2 > theta v
  t.delta = inf_f();
  t.warmup = p.grad_accu_steps > 0 ? p.grad_accu_steps - 1 : 0;
  t.clamp_feed = true;  // v follows the clipped value sqrt(theta v)
  using R = Compose<ClipToTarget, ResetMoments>;
  ControllerOptions opt;
  opt.timer.every = p.delta_t;
  opt.timer.quiet = p.delta_t != 0u ? p.grad_accu_steps : 0u;
  return Spam(num_units, {}, EmaSquareMean{p.beta2}, t, R{ClipToTarget{0.0f}, {ResetMoments{}}},
              Unlimited{1, 0}, opt);
}

inline std::uint32_t skip_step_warmup(int rolling_interval_length) {
  // skip_step_optimizer.py @fa6c501: max(2, len // 2) (it was max(20, ...)
  // before OLMo-core #139; the same 64 at the default 128).
  const int gate = rolling_interval_length / 2 > 2 ? rolling_interval_length / 2 : 2;
  return static_cast<std::uint32_t>(gate - 1);
}

inline SkipStep skip_step(std::size_t num_units = 1, const SkipStepParams& p = {}) {
  ZScoreTrigger t;
  t.feed_rule = ZScoreTrigger::Feed::kThreshold;  // the step is skipped: no clip value
  t.z = p.sigma_factor;
  t.warmup = p.warmup != 0 ? p.warmup : skip_step_warmup(p.rolling_interval_length);
  t.eps = 0.0f;  // OLMo-core: (x - mean) <= sigma_factor * std
  t.max_norm = inf_f();
  t.clamp_feed = p.clamp_feed;
  WindowMean<128> w;
  w.window = p.rolling_interval_length;
  w.bessel = true;  // torch.std_mean is unbiased by default
  return SkipStep(num_units, {}, w, t, GlobalSkip{}, Unlimited{1, 0});
}

inline Stabilizer stabilizer(std::size_t num_units, const StabilizerParams& p = {}) {
  // AdaGN advances its statistics on every step, zero norms included.
  ControllerOptions opt;
  opt.zero_is_sample = true;
  return Stabilizer(num_units, {}, {}, AlwaysTrigger{}, NormReplace{p.gamma1, p.gamma2, p.eps, p.restart_every},
                    Unlimited{1, 0}, opt);
}

// The preset "gnmr": GNMR's own rule as the benchmark chose it (not called
// plain gnmr(): inside gnmr::presets that name would hide the namespace).
// The recommended controller is another one, make_default()
// (gnmr/presets/make.hpp; on the device gnmr::cuda::make_default).
inline Gnmr gnmr_preset(std::size_t num_units) {
  ControllerOptions opt;
  opt.systemic = gnmr_systemic_rule();
  opt.denied = gnmr_denied_rule();
  return Gnmr(num_units, {}, {}, {}, ClipAndPromote{ClipToMean{}, {PromotePrecision{}}}, {}, opt);
}

inline GnmrLadder gnmr_ladder(std::size_t num_units, const Ladder& ladder = {}) {
  return GnmrLadder(num_units, {}, {}, {}, ladder, {});
}

// docs/algorithm.md defaults; kappa is the clip's (scale = min(1, kappa * mu / n)).
inline GnmrPromote gnmr_promote(std::size_t num_units, float kappa = 1.0f) {
  return GnmrPromote(num_units, {}, {}, {}, ClipAndPromote{ClipToMean{kappa}, {PromotePrecision{}}}, {});
}

inline GnmrPromoteOnly gnmr_promote_only(std::size_t num_units) { return GnmrPromoteOnly(num_units); }

// The preset "gnmr-calibrated": the calibrated trigger (rate 1e-3, floor 2,
// ceiling 16 by default) with gnmr-promote's clip and promotion, maxO 4,
// lock 8, calibrated_systemic_rule() (no grant on a model-wide jump, one a
// step otherwise) and calibrated_denied_rule() (the others clipped to the
// trigger's target).
inline GnmrCalibrated gnmr_calibrated(std::size_t num_units, CalibratedTrigger trigger = {}, float kappa = 1.0f) {
  ControllerOptions opt;
  opt.systemic = calibrated_systemic_rule();
  opt.denied = calibrated_denied_rule();
  return GnmrCalibrated(num_units, {}, {}, trigger, ClipAndPromote{ClipToMean{kappa}, {PromotePrecision{}}}, {}, opt);
}

inline GnmrClip gnmr_clip(std::size_t num_units, float kappa = 1.0f) {
  return GnmrClip(num_units, {}, {}, {}, ClipToMean{kappa}, {});
}

// GNMR's clip with the systemic rule on, no promotion (preset
// "gnmr-systemic"; docs/algorithm.md, "Systemic steps"). The same type as
// gnmr-clip: only the options differ, so their blobs interchange.
inline GnmrClip gnmr_systemic(std::size_t num_units, const SystemicRule& rule = gnmr_systemic_rule()) {
  ControllerOptions opt;
  opt.systemic = rule;
  return GnmrClip(num_units, {}, {}, {}, ClipToMean{}, {}, opt);
}

}  // namespace presets
}  // namespace gnmr
