// gnmr/policy/mean_peers.hpp — MeanTrackers that the peer presets need.
//
// EmaMeanVar (ZClip): EMA of mean and variance, seeded from the first
// `seed` samples. MinSeededEma (AdaGC): plain EMA started from the minimum of
// the warm-up samples. EmaSquareMean (SPAM): EMA of the squared norm, whose
// square root is reported as the mean so that a ratio trigger tau = sqrt(theta)
// is SPAM's test n^2 > theta * v. Same contract as mean.hpp.
#pragma once

#include <cstdint>
#include <string>

#include "gnmr/core/math.hpp"
#include "gnmr/core/numeric.hpp"
#include "gnmr/detail/check.hpp"

namespace gnmr {

// ZClip's statistic: for the first `seed` samples, the sample mean and the
// population variance (Welford in double); after that
//   mu <- a*mu + (1-a)*x;  var <- a*var + (1-a)*(x - mu_new)^2
// (ZClip updates the variance with the already-updated mean).
struct EmaMeanVar {
  static constexpr const char* kName = "ema_mean_var";
  float alpha = 0.97f;
  std::uint32_t seed = 25;

  struct State {
    double w_mean;  // Welford accumulators while k < seed
    double w_m2;
    float mu;
    float var;
    std::uint32_t k;
    std::uint32_t pad_;  // explicit, always 0: no hole in a state blob (gnmr/detail/canonical.hpp)
  };
  GNMR_HOST_DEVICE static State init() { return State{0.0, 0.0, 0.0f, 0.0f, 0u, 0u}; }
  GNMR_HOST_DEVICE static std::uint32_t count(const State& s) { return s.k; }
  GNMR_HOST_DEVICE float mean(const State& s) const { return s.mu; }
  GNMR_HOST_DEVICE float stddev(const State& s) const { return math::sqrt(s.var); }
  GNMR_HOST_DEVICE void push(State& s, float x) const {
    if (s.k < seed) {
      const double n = static_cast<double>(s.k) + 1.0;
      const double d = static_cast<double>(x) - s.w_mean;
      s.w_mean = math::dadd(s.w_mean, math::ddiv(d, n));
      s.w_m2 = math::dadd(s.w_m2, math::dmul(d, static_cast<double>(x) - s.w_mean));
      s.mu = static_cast<float>(s.w_mean);
      s.var = static_cast<float>(math::ddiv(s.w_m2, n));
    } else {
      const float one_m = math::sub(1.0f, alpha);
      s.mu = math::add(math::mul(alpha, s.mu), math::mul(one_m, x));
      const float d = math::sub(x, s.mu);
      s.var = math::add(math::mul(alpha, s.var), math::mul(one_m, math::mul(d, d)));
    }
    s.k = detail::saturating_inc(s.k);
  }
  std::string check() const {
    return detail::first_error(
        {detail::in_range_open_hi("EmaMeanVar", "alpha", alpha, 0.0f, 1.0f),
         seed >= 1 ? std::string() : detail::bad("EmaMeanVar", "seed", ">= 1", seed)});
  }
};

// AdaGC's statistic: while k < seed it is the minimum sample seen; from then
// on m <- beta*m + (1-beta)*x, with no bias correction (it starts warm).
struct MinSeededEma {
  static constexpr const char* kName = "min_seeded_ema";
  float beta = 0.99f;
  std::uint32_t seed = 100;

  struct State {
    float m;
    std::uint32_t k;
  };
  GNMR_HOST_DEVICE static State init() { return State{0.0f, 0u}; }
  GNMR_HOST_DEVICE static std::uint32_t count(const State& s) { return s.k; }
  GNMR_HOST_DEVICE float mean(const State& s) const { return s.m; }
  GNMR_HOST_DEVICE void push(State& s, float x) const {
    if (s.k == 0)
      s.m = x;
    else if (s.k < seed)
      s.m = math::min(s.m, x);
    else
      s.m = math::add(math::mul(beta, s.m), math::mul(math::sub(1.0f, beta), x));
    s.k = detail::saturating_inc(s.k);
  }
  std::string check() const {
    return detail::first_error(
        {detail::in_range_open_hi("MinSeededEma", "beta", beta, 0.0f, 1.0f),
         seed >= 1 ? std::string() : detail::bad("MinSeededEma", "seed", ">= 1", seed)});
  }
};

// SPAM's statistic at unit granularity: v <- b2*v + (1-b2)*x^2 from v = 0,
// without bias correction (as Adam's exp_avg_sq that SPAM compares against);
// mean() reports sqrt(v) so that it is in norm units.
struct EmaSquareMean {
  static constexpr const char* kName = "ema_square";
  float beta2 = 0.999f;

  struct State {
    float v;
    std::uint32_t k;
  };
  GNMR_HOST_DEVICE static State init() { return State{0.0f, 0u}; }
  GNMR_HOST_DEVICE static std::uint32_t count(const State& s) { return s.k; }
  GNMR_HOST_DEVICE float mean(const State& s) const { return math::sqrt(s.v); }
  GNMR_HOST_DEVICE float second_moment(const State& s) const { return s.v; }
  GNMR_HOST_DEVICE void push(State& s, float x) const {
    s.v = math::add(math::mul(beta2, s.v), math::mul(math::sub(1.0f, beta2), math::mul(x, x)));
    s.k = detail::saturating_inc(s.k);
  }
  std::string check() const {
    return detail::in_range_open_hi("EmaSquareMean", "beta2", beta2, 0.0f, 1.0f);
  }
};

}  // namespace gnmr
