// gnmr/step/systemic.hpp — what happens to triggered units the budget does not
// serve: the systemic rule (many units trigger at once) and the denied-unit
// rule (a unit triggers while every slot is held).
//
// The budget maxO keeps *local* recovery sparse. When most of the model
// jumps at once (a learning-rate burst), denying all but maxO units lets the
// burst through; when a few low-risk units hold every slot, a 30x spike
// elsewhere is denied and passes unclipped. Both rules act without taking
// slots, so locks and the slot selection are untouched; both are off by
// default (ControllerOptions), and docs/algorithm.md ("Systemic steps",
// "Denied units") states them precisely enough to reimplement.
//
// The per-step part (is the step systemic, the global scale, the tracker of
// the total norm) is decide_systemic(); the per-unit part is in
// detail::commit_unit (gnmr/step/step.hpp). Both are GNMR_HOST_DEVICE and
// shared by the host and CUDA backends.
//
// Determinism: the systemic test compares two integers (the triggered count
// and a threshold fixed at construction); the total norm is a fixed-shape
// tree of exact double squares (total_sq_tree, replayed by the device's
// phase 1), rounded once to fp32; everything after is gnmr::math arithmetic.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "gnmr/core/math.hpp"
#include "gnmr/detail/check.hpp"
#include "gnmr/policy/mean.hpp"

namespace gnmr {

// What a systemic step does instead of the denials.
enum class SystemicAction : std::uint32_t {
  kOff = 0,            // no systemic rule: the step is never systemic (today's behaviour)
  kClipTriggered = 1,  // clip every triggered unit without a slot to kappa * mu_i
  kGlobalClip = 2,     // scale every finite unit by s = min(1, kappa * M / G)
  kSkip = 3,           // skip the step (every unit kSkip, summary.skip_step)
  kHold = 4,           // grant no slot this step: a model-wide jump is not a local risk
                       // (triggered units without a slot get kSystemic, nothing else)
};

inline const char* systemic_action_name(SystemicAction a) {
  switch (a) {
    case SystemicAction::kOff: return "off";
    case SystemicAction::kClipTriggered: return "clip-triggered";
    case SystemicAction::kGlobalClip: return "global-clip";
    case SystemicAction::kSkip: return "skip";
    case SystemicAction::kHold: return "hold";
  }
  return "?";
}
// "off" | "clip-triggered" | "global-clip" | "skip" | "hold" ('_' for '-' accepted);
// false for anything else.
inline bool parse_systemic_action(std::string s, SystemicAction& out) {
  for (char& c : s)
    if (c == '_') c = '-';
  for (std::uint32_t a = 0; a <= 4; ++a)
    if (s == systemic_action_name(static_cast<SystemicAction>(a))) {
      out = static_cast<SystemicAction>(a);
      return true;
    }
  return false;
}

// A step is systemic when more units trigger than
//   C = min(max(min(floor(share * N), floor(maxo_multiple * maxO)), min_count), N)
//       (the maxO term only if maxo_multiple > 0)
// i.e. when triggered > share * N, or triggered > maxo_multiple * maxO
// (detail::systemic_threshold computes C once, at construction). Every
// default here is provisional (docs/algorithm.md): the benchmark decides them.
struct SystemicRule {
  SystemicAction action = SystemicAction::kOff;
  // Doubles, so that a decimal share (0.29 of 100 units) means what it says;
  // they are only used on the host, to compute C.
  double share = 0.5;          // in [0, 1]; 1 turns the share test off
  double maxo_multiple = 0.0;  // >= 0; 0 turns the maxO test off
  std::uint32_t min_count = 0; // C is at least this: never systemic with this many or fewer triggered
  // At most this many slots granted on one step (0: no cap, as many as are
  // free). Units that trigger on the same step are more often one cause (a
  // shared input, the schedule) than independent faults; a cap of 1 grants
  // the riskiest and leaves the others to the denied-unit rule. Any action
  // but off applies it (docs/algorithm.md, "Systemic steps").
  std::uint32_t max_grants = 0;
  float kappa = 1.0f;          // clip level: kappa * mu_i (clip-triggered), kappa * M (global-clip)
  float beta = 0.99f;          // EMA decay of the total norm's tracker M (global-clip)

  std::string check() const {
    if (static_cast<std::uint32_t>(action) > 4u)
      return "gnmr: SystemicRule: action must be off, clip-triggered, global-clip, skip or hold, got " +
             std::to_string(static_cast<std::uint32_t>(action));
    if (!(share >= 0.0 && share <= 1.0)) return detail::bad("SystemicRule", "share", "in [0, 1]", share);
    return detail::first_error({detail::non_negative("SystemicRule", "maxo_multiple", maxo_multiple),
                                detail::positive("SystemicRule", "kappa", kappa),
                                detail::in_range_open_hi("SystemicRule", "beta", beta, 0.0f, 1.0f)});
  }
};

// A global clip for the first `steps` steps (AdaGC's warm-up, megatron-
// gpt2.patch @32c249f class AdaGC: steps 1..start_clip_steps clip the
// global norm G at max_norm with max_norm / (G + eps)): every unit is
// scaled by that coefficient when it is below 1, and each unit's statistic
// is fed its norm times the coefficient (AdaGC's state is the minimum of
// the globally clipped norms). G comes from the unit norms the controller
// already has (total_sq_tree), no extra pass. steps = 0: off, the default.
struct WarmupClipRule {
  std::uint32_t steps = 0;
  float max_norm = 1.0f;  // +inf: no clip, the statistic sees the raw norms
  float eps = 1e-6f;
  std::string check() const {
    if (!(max_norm > 0.0f)) return detail::bad("WarmupClipRule", "max_norm", "> 0 (or +inf)", max_norm);
    return detail::non_negative("WarmupClipRule", "eps", eps);
  }
};

// What a denied unit gets (a triggered unit that holds no slot and was not
// granted one), on a step that is not systemic, and, under the systemic
// action hold, what a triggered unit without a slot gets on a held step.
enum class DeniedAction : std::uint32_t {
  kNone = 0,        // nothing: the update passes as it is (GNMR's budget as published)
  kClip = 1,        // clip to kappa * mu_i for this step, without a slot or a lock
  kClipTarget = 2,  // clip to the trigger's own target (v.target: the largest norm its rule
                    // calls calm, tau * mu for GNMR's, the level threshold for the calibrated)
};
inline const char* denied_action_name(DeniedAction a) {
  switch (a) {
    case DeniedAction::kNone: return "none";
    case DeniedAction::kClip: return "clip";
    case DeniedAction::kClipTarget: return "clip-target";
  }
  return "?";
}
// "none" | "clip" | "clip-target" ('_' for '-' accepted); false for anything else.
inline bool parse_denied_action(std::string s, DeniedAction& out) {
  for (char& c : s)
    if (c == '_') c = '-';
  for (std::uint32_t a = 0; a <= 2; ++a)
    if (s == denied_action_name(static_cast<DeniedAction>(a))) {
      out = static_cast<DeniedAction>(a);
      return true;
    }
  return false;
}
struct DeniedRule {
  DeniedAction action = DeniedAction::kNone;
  float kappa = 1.0f;  // kClip's level (kappa * mu_i)
  std::string check() const {
    if (static_cast<std::uint32_t>(action) > 2u)
      return "gnmr: DeniedRule: action must be none, clip or clip-target, got " +
             std::to_string(static_cast<std::uint32_t>(action));
    return detail::positive("DeniedRule", "kappa", kappa);
  }
};

// The controller's global (not per-unit) state: the tracker M of the total
// norm G, an EMA with bias correction (EmaMean with the rule's beta). Saved
// in the state blob; fed only under the global-clip action.
struct GlobalState {
  EmaMean::State total;
};
GNMR_HOST_DEVICE GlobalState init_global() { return GlobalState{EmaMean::init()}; }

// The step-wide outcome, decided once per step after the slot selection.
struct SystemicStep {
  std::uint32_t action;  // 0: not systemic; else the SystemicAction applied
  float scale;           // global-clip's s (1 otherwise)
  float total_norm;      // G (global-clip only, every step; 0 otherwise)
  float total_mean;      // M before this step's sample (global-clip only)
  float warm_scale;      // WarmupClipRule's coefficient this step (1: none)
};
GNMR_HOST_DEVICE SystemicStep systemic_none() { return SystemicStep{0u, 1.0f, 0.0f, 0.0f, 1.0f}; }

namespace detail {

// floor(x) for x = a product like share * N computed in double, where a
// decimal share can land a hair below the integer it means (0.29 * 100 =
// 28.999999999999996): within a relative 1e-9 of an integer, x is that integer.
inline double floor_snapped(double x) {
  const double r = std::nearbyint(x);
  const double tol = 1e-9 * (std::fabs(x) > 1.0 ? std::fabs(x) : 1.0);
  return std::fabs(x - r) <= tol ? r : std::floor(x);
}

// C, fixed at construction, in double (host only): systemic iff triggered > C.
inline std::uint32_t systemic_threshold(const SystemicRule& r, std::size_t units, std::uint32_t slots) {
  const double n = static_cast<double>(units);
  double c = floor_snapped(r.share * n);
  if (r.maxo_multiple > 0.0) {
    const double m = floor_snapped(r.maxo_multiple * static_cast<double>(slots));
    if (m < c) c = m;
  }
  if (c < static_cast<double>(r.min_count)) c = static_cast<double>(r.min_count);
  if (c > n) c = n;
  return static_cast<std::uint32_t>(c);
}

// The step-wide decision, from the triggered count and, for global-clip,
// the fp32 rounding of the total's sum of squares (total_sq_tree). Advances
// the tracker (global-clip only): fed min(G, kappa * M) on a systemic step
// with a sample, G otherwise, and nothing when G is 0 or not finite.
GNMR_HOST_DEVICE SystemicStep decide_systemic(const SystemicRule& r, std::uint32_t threshold,
                                              std::uint32_t triggered, float total_sq, GlobalState& g) {
  SystemicStep out = systemic_none();
  if (r.action == SystemicAction::kOff) return out;
  const bool systemic = triggered > threshold;
  if (r.action == SystemicAction::kGlobalClip) {
    const EmaMean tracker{r.beta};
    const float total = math::sqrt(total_sq);
    const float mean = tracker.mean(g.total);
    out.total_norm = total;
    out.total_mean = mean;
    float fed = total;
    if (systemic && EmaMean::count(g.total) > 0u) {
      const float level = math::mul(r.kappa, mean);
      // min(1, level / G); G = 0 keeps 1, G = +inf gives 0 (no NaN: G > 0).
      out.scale = total > 0.0f ? math::min(1.0f, math::div(level, total)) : 1.0f;
      fed = math::min(total, level);
    }
    if (total > 0.0f && is_finite(total)) tracker.push(g.total, fed);
  }
  out.action = systemic ? static_cast<std::uint32_t>(r.action) : 0u;
  return out;
}

// Whether the step's slots are held (kHold on a systemic step): no unit is
// granted one, whatever its risk. An integer comparison, as decide_systemic's.
GNMR_HOST_DEVICE bool holds_slots(const SystemicRule& r, std::uint32_t threshold, std::uint32_t triggered) {
  return r.action == SystemicAction::kHold && triggered > threshold;
}

// How many of the step's candidates are granted, from the budget's wish
// (grants_wanted: min(free slots, candidates)): none on a held step, at most
// max_grants otherwise (0 = no cap; the rule off never caps). Integers only,
// so host and device grant the same count.
GNMR_HOST_DEVICE std::uint32_t step_grants(const SystemicRule& r, std::uint32_t threshold, std::uint32_t triggered,
                                           std::uint32_t wanted) {
  if (holds_slots(r, threshold, triggered)) return 0u;
  if (r.action != SystemicAction::kOff && r.max_grants != 0u && wanted > r.max_grants) return r.max_grants;
  return wanted;
}

// Whether a step needs the total norm G (total_sq_tree; the CUDA phase 1
// runs the same tree): global-clip's tracker, or the warm-up clip.
GNMR_HOST_DEVICE bool needs_total(const SystemicRule& r, const WarmupClipRule& w) {
  return r.action == SystemicAction::kGlobalClip || w.steps != 0u;
}

// The warm-up clip's coefficient at step t from the fp32 total sum of
// squares: min(1, max_norm / (G + eps)) while t <= steps, 1 after (and for
// G = 0; a non-finite unit's norm is not in G, see total_square).
GNMR_HOST_DEVICE float warmup_clip_scale(const WarmupClipRule& w, std::int64_t t, float total_sq) {
  if (w.steps == 0u || t > static_cast<std::int64_t>(w.steps)) return 1.0f;
  const float total = math::sqrt(total_sq);
  const float c = math::div(w.max_norm, math::add(total, w.eps));
  return c < 1.0f ? c : 1.0f;
}

// ---- The total norm's fixed-order sum --------------------------------------
// Squares of the finite norms in double (exact: a float's square fits in
// 53 bits), zero for non-finite units, padded with zeros to a multiple of
// 256; each 256-block summed by the halving tree x[j] += x[j + s] for
// s = 128, 64, ..., 1 (x[0] is the block's sum); the block sums are summed
// the same way, level after level, until one value is left. The CUDA phase 1
// runs exactly this tree in shared memory; this is its host form.
constexpr std::size_t kTotalBlock = 256;

GNMR_HOST_DEVICE double total_square(float norm) {
  return is_finite(norm) ? math::dmul(static_cast<double>(norm), static_cast<double>(norm)) : 0.0;
}

// One 256-block in place (x has kTotalBlock entries); returns x[0].
inline double tree_256(double* x) {
  for (std::size_t s = kTotalBlock / 2; s > 0; s >>= 1)
    for (std::size_t j = 0; j < s; ++j) x[j] = math::dadd(x[j], x[j + s]);
  return x[0];
}

// The tree over n leaves leaf(i) (doubles), in the order above: each
// 256-block by tree_256, then the block sums level after level. scratch
// must hold ceil(n / 256) doubles (no allocation here). total_sq_tree below
// (the systemic total, the layered controller's global norm) is this tree
// over the squares; the CUDA twin is cuda::detail::block_tree_256 +
// block_sums_tree.
template <class Leaf>
double tree_sum(std::size_t n, Leaf leaf, double* scratch) {
  double blk[kTotalBlock];
  std::size_t m = 0;
  for (std::size_t b = 0; b < n; b += kTotalBlock, ++m) {
    for (std::size_t j = 0; j < kTotalBlock; ++j) blk[j] = b + j < n ? leaf(b + j) : 0.0;
    scratch[m] = tree_256(blk);
  }
  while (m > 1) {  // the block sums, level by level, in place
    std::size_t k = 0;
    for (std::size_t b = 0; b < m; b += kTotalBlock, ++k) {
      for (std::size_t j = 0; j < kTotalBlock; ++j) blk[j] = b + j < m ? scratch[b + j] : 0.0;
      scratch[k] = tree_256(blk);
    }
    m = k;
  }
  return n ? scratch[0] : 0.0;
}

// Sum of the squares of n finite-or-not norms, in the tree's order (the
// caller rounds it to fp32 once). scratch must hold ceil(n / 256) doubles.
inline double total_sq_tree(const float* norms, std::size_t n, double* scratch) {
  return tree_sum(n, [norms](std::size_t i) { return total_square(norms[i]); }, scratch);
}

inline std::size_t total_scratch_size(std::size_t n) { return (n + kTotalBlock - 1) / kTotalBlock; }

}  // namespace detail
}  // namespace gnmr
