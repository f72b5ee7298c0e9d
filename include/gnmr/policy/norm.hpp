// gnmr/policy/norm.hpp — NormPolicy: how a unit's gradient becomes one number.
//
// A norm is computed in two stages so that chunks, segments and ranks can be
// combined before the finish: an associative *partial* (sum of squares for
// L2/RMS, max |x| for Linf) and a *finish* (sqrt, sqrt(./numel), identity).
// The partial of a unit is what travels between ranks (one float per unit).
// NaN and Inf propagate through every partial, so a poisoned gradient always
// ends as a non-finite norm, which the controller never applies.
#pragma once

#include <string>

#include "gnmr/core/math.hpp"

namespace gnmr {

enum class Combine { kSum, kMax };

// L2 norm (default): sqrt(sum x^2).
struct L2Norm {
  static constexpr const char* kName = "l2";
  static constexpr Combine kCombine = Combine::kSum;
  GNMR_HOST_DEVICE static float identity() { return 0.0f; }
  GNMR_HOST_DEVICE static float element(float x) { return math::mul(x, x); }
  GNMR_HOST_DEVICE static float combine(float a, float b) { return math::add(a, b); }
  GNMR_HOST_DEVICE static float finish(float partial, double /*numel*/) {
    return math::sqrt(partial);
  }
  std::string check() const { return {}; }
};

// RMS norm: L2 / sqrt(numel); the unit's element count comes from the controller.
struct RmsNorm {
  static constexpr const char* kName = "rms";
  static constexpr Combine kCombine = Combine::kSum;
  GNMR_HOST_DEVICE static float identity() { return 0.0f; }
  GNMR_HOST_DEVICE static float element(float x) { return math::mul(x, x); }
  GNMR_HOST_DEVICE static float combine(float a, float b) { return math::add(a, b); }
  GNMR_HOST_DEVICE static float finish(float partial, double numel) {
    // The division is done in double then rounded once, identical on host and
    // device; numel = 0 is rejected when unit sizes are set.
    return math::sqrt(static_cast<float>(math::ddiv(static_cast<double>(partial), numel)));
  }
  std::string check() const { return {}; }
};

// Linf norm: max |x|. The max propagates NaN regardless of operand order.
struct LinfNorm {
  static constexpr const char* kName = "linf";
  static constexpr Combine kCombine = Combine::kMax;
  GNMR_HOST_DEVICE static float identity() { return 0.0f; }
  GNMR_HOST_DEVICE static float element(float x) { return x < 0.0f ? -x : x; }
  GNMR_HOST_DEVICE static float combine(float a, float b) { return math::max_nan(a, b); }
  GNMR_HOST_DEVICE static float finish(float partial, double /*numel*/) { return partial; }
  std::string check() const { return {}; }
};

// True when the NormPolicy needs per-unit element counts for its finish.
template <class Norm>
constexpr bool norm_needs_numel() {
  return false;
}
template <>
constexpr bool norm_needs_numel<RmsNorm>() {
  return true;
}

}  // namespace gnmr
