// tests/unit/semantics_util.hpp — shorthands for the [semantics] tests.
//
// The hand-computed traces build many small controllers with unusual
// hyperparameters; these helpers keep each trace readable (one line per
// configuration) and make a flag mismatch print flag *names* rather than
// a bare integer. Nothing here computes an expected value: expectations
// are written out in the test files, derived from docs/algorithm.md in comments.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gnmr/core/types.hpp"
#include "gnmr/detail/canonical.hpp"
#include "gnmr/host/controller.hpp"

namespace semtest {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

inline gnmr::EmaMean ema(float beta) {
  gnmr::EmaMean m;
  m.beta = beta;
  return m;
}

inline gnmr::GnmrTrigger trig(float tau, float delta, std::uint32_t warmup, int window = 4) {
  gnmr::GnmrTrigger t;
  t.tau = tau;
  t.delta = delta;
  t.warmup = warmup;
  t.window = window;
  return t;
}

inline gnmr::MaxO maxo(int max_o, int lock, int cooldown) {
  gnmr::MaxO b;
  b.max_o = max_o;
  b.lock = lock;
  b.cooldown = cooldown;
  return b;
}

inline gnmr::ClipToMean clip(float kappa) {
  gnmr::ClipToMean c;
  c.kappa = kappa;
  return c;
}

// The default policy families with explicit hyperparameters.
using Ctl = gnmr::GnmrController<>;
inline Ctl make(std::size_t n, gnmr::EmaMean mean, gnmr::GnmrTrigger tr, gnmr::MaxO b,
                float kappa = 1.0f, gnmr::ControllerOptions opt = {}) {
  return Ctl(n, gnmr::L2Norm{}, mean, tr, clip(kappa), b, opt);
}

// n units under the systemic tests' configuration (EmaMean 0.5, tau 3, no
// delta, warm-up 2; maxO max_o, lock 3), after two warm-up steps of norm 1:
// every mean is exactly 1, so r = n on the next step.
inline Ctl warmed(std::size_t n, const gnmr::ControllerOptions& o, int max_o = 2) {
  Ctl c = make(n, ema(0.5f), trig(3.0f, kInf, 2), maxo(max_o, 3, 0), 1.0f, o);
  const std::vector<float> ones(n, 1.0f);
  c.step_norms(ones);
  c.step_norms(ones);
  return c;
}

// ControllerOptions with the systemic rule (share, optional maxO multiple).
inline gnmr::ControllerOptions systemic(gnmr::SystemicAction a, double share, double maxo_multiple = 0.0,
                                        float kappa = 1.0f, float beta = 0.99f) {
  gnmr::ControllerOptions o;
  o.systemic.action = a;
  o.systemic.share = share;
  o.systemic.maxo_multiple = maxo_multiple;
  o.systemic.kappa = kappa;
  o.systemic.beta = beta;
  return o;
}

inline std::string flag_names(std::uint32_t f) {
  static const struct {
    std::uint32_t bit;
    const char* name;
  } kNames[] = {{gnmr::kTriggered, "TRIGGERED"},   {gnmr::kGranted, "GRANTED"},
                {gnmr::kInRecovery, "IN_RECOVERY"}, {gnmr::kDenied, "DENIED"},
                {gnmr::kCooldown, "COOLDOWN"},     {gnmr::kNonFinite, "NONFINITE"},
                {gnmr::kSkip, "SKIP"},             {gnmr::kResetMoments, "RESET_MOMENTS"},
                {gnmr::kPromote, "PROMOTE"},       {gnmr::kReleased, "RELEASED"},
                {gnmr::kWarmup, "WARMUP"},         {gnmr::kZeroNorm, "ZERO_NORM"},
                {gnmr::kSystemic, "SYSTEMIC"},     {gnmr::kRestart, "RESTART"}};
  std::string s;
  for (const auto& n : kNames)
    if (f & n.bit) {
      s += s.empty() ? "" : "|";
      s += n.name;
      f &= ~n.bit;
    }
  if (f) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "%#x", static_cast<unsigned>(f));
    s += (s.empty() ? "" : "|") + std::string(hex);
  }
  return s.empty() ? "none" : s;
}

// Compares names so that a failure reads "TRIGGERED|DENIED == TRIGGERED|GRANTED|IN_RECOVERY".
#define SEM_FLAGS(actual, expected) \
  CHECK(semtest::flag_names(actual) == semtest::flag_names(expected))

// Raw bytes of a trivially copyable object (padding included), to prove
// that a call left state untouched.
template <class T>
std::vector<std::uint8_t> bytes_of(const T* p, std::size_t n) {
  // Canonical bytes (gnmr/detail/canonical.hpp): a state's padding holds
  // no value, so two equal states compare equal here as in their blobs.
  std::vector<std::uint8_t> b(sizeof(T) * n);
  for (std::size_t i = 0; i < n; ++i) gnmr::detail::canonical_copy(p[i], b.data() + i * sizeof(T));
  return b;
}
template <class T>
std::vector<std::uint8_t> bytes_of(const std::vector<T>& v) {
  return bytes_of(v.data(), v.size());
}
template <class T>
std::vector<std::uint8_t> bytes_of(const T& x) {
  return bytes_of(&x, 1);
}

}  // namespace semtest
