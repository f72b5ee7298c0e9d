// gnmr/policy/mean.hpp — MeanTracker: a unit's historical mean mu_i.
//
// A tracker owns a small POD State per unit and exposes:
//   count(s)   k_i, the accepted samples so far
//   mean(s)    mu_i from those samples (0 while k = 0)
//   push(s,x)  accept one sample at the end of a step
// The current step's sample is never in mu (the controller pushes after the
// verdict), spikes are fed clamped, non-finite norms are never pushed, and
// neither are zero norms unless ControllerOptions::zero_is_sample is set.
// Trackers with a variance (mean_peers.hpp) also define stddev(s).
// All arithmetic goes through gnmr::math so host and device agree bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "gnmr/core/math.hpp"
#include "gnmr/core/numeric.hpp"
#include "gnmr/detail/check.hpp"

namespace gnmr {

// Bias-corrected EMA (default): m <- beta*m + (1-beta)*x from m = 0,
// mu = m / (1 - beta^k). beta^k is kept as a running product rather than
// powf, whose last bit differs between libm and the CUDA math library.
struct EmaMean {
  static constexpr const char* kName = "ema";
  float beta = 0.99f;

  struct State {
    float m;
    float beta_pow;  // beta^k
    std::uint32_t k;
  };
  GNMR_HOST_DEVICE static State init() { return State{0.0f, 1.0f, 0u}; }
  GNMR_HOST_DEVICE static std::uint32_t count(const State& s) { return s.k; }
  GNMR_HOST_DEVICE float mean(const State& s) const {
    if (s.k == 0) return 0.0f;
    return math::div(s.m, math::sub(1.0f, s.beta_pow));
  }
  GNMR_HOST_DEVICE void push(State& s, float x) const {
    s.m = math::add(math::mul(beta, s.m), math::mul(math::sub(1.0f, beta), x));
    s.beta_pow = math::mul(s.beta_pow, beta);
    s.k = detail::saturating_inc(s.k);
  }
  std::string check() const {
    return detail::in_range_open_hi("EmaMean", "beta", beta, 0.0f, 1.0f);
  }
};

// Cumulative mean of every accepted sample. The sum is kept in double so a
// run of millions of steps does not drift; double add is IEEE on both sides.
struct CumulativeMean {
  static constexpr const char* kName = "cumulative";

  struct State {
    double sum;
    std::uint32_t k;
    std::uint32_t pad_;  // explicit, always 0: no hole in a state blob (gnmr/detail/canonical.hpp)
  };
  GNMR_HOST_DEVICE static State init() { return State{0.0, 0u, 0u}; }
  GNMR_HOST_DEVICE static std::uint32_t count(const State& s) { return s.k; }
  GNMR_HOST_DEVICE float mean(const State& s) const {
    if (s.k == 0) return 0.0f;
    return static_cast<float>(math::ddiv(s.sum, static_cast<double>(s.k)));
  }
  GNMR_HOST_DEVICE void push(State& s, float x) const {
    s.sum = math::dadd(s.sum, static_cast<double>(x));
    s.k = detail::saturating_inc(s.k);
  }
  std::string check() const { return {}; }
};

// Mean (and sample standard deviation) of the last `window` accepted
// samples, window <= Cap. The ring is summed in a fixed order every time,
// so there is no running-sum drift and the result is reproducible.
template <int Cap = 32>
struct WindowMean {
  static_assert(Cap >= 1 && Cap <= 4096, "WindowMean<Cap>: Cap must be in [1, 4096]");
  static constexpr const char* kName = "window";
  static constexpr int kCap = Cap;
  int window = Cap < 16 ? Cap : 16;
  bool bessel = true;  // stddev with (n-1), as torch.std_mean (OLMo-core)

  struct State {
    float ring[static_cast<std::size_t>(Cap)];
    std::uint32_t head;  // next slot to write
    std::uint32_t k;     // accepted samples in total (saturating)
  };
  GNMR_HOST_DEVICE static State init() {
    State s{};
    return s;
  }
  GNMR_HOST_DEVICE static std::uint32_t count(const State& s) { return s.k; }
  GNMR_HOST_DEVICE std::uint32_t filled(const State& s) const {
    return s.k < static_cast<std::uint32_t>(window) ? s.k : static_cast<std::uint32_t>(window);
  }
  GNMR_HOST_DEVICE double sum(const State& s) const {
    // Oldest to newest, so the order is a function of the samples alone.
    const std::uint32_t n = filled(s);
    const std::uint32_t w = static_cast<std::uint32_t>(window);
    double acc = 0.0;
    for (std::uint32_t j = 0; j < n; ++j) {
      const float x = s.ring[detail::ring_oldest_first(s.head, w, n, j)];
      acc = math::dadd(acc, static_cast<double>(x));
    }
    return acc;
  }
  GNMR_HOST_DEVICE float mean(const State& s) const {
    const std::uint32_t n = filled(s);
    if (n == 0) return 0.0f;
    return static_cast<float>(math::ddiv(sum(s), static_cast<double>(n)));
  }
  GNMR_HOST_DEVICE float stddev(const State& s) const {
    const std::uint32_t n = filled(s);
    const std::uint32_t w = static_cast<std::uint32_t>(window);
    const std::uint32_t dof = bessel ? (n > 1 ? n - 1 : 0) : n;
    if (dof == 0) return 0.0f;
    const double mu = math::ddiv(sum(s), static_cast<double>(n));
    double ss = 0.0;
    for (std::uint32_t j = 0; j < n; ++j) {
      const float x = s.ring[detail::ring_oldest_first(s.head, w, n, j)];
      const double d = static_cast<double>(x) - mu;
      ss = math::dadd(ss, math::dmul(d, d));
    }
    return math::sqrt(static_cast<float>(math::ddiv(ss, static_cast<double>(dof))));
  }
  GNMR_HOST_DEVICE void push(State& s, float x) const {
    const std::uint32_t w = static_cast<std::uint32_t>(window);
    detail::ring_push(s.ring, s.head, w, x);
    s.k = detail::saturating_inc(s.k);
  }
  std::string check() const {
    if (window < 1 || window > Cap)
      return "gnmr: WindowMean: window must be in [1, " + std::to_string(Cap) +
             "] (the template's Cap), got " + std::to_string(window);
    return {};
  }
};

// No statistic at all (fixed-threshold presets such as global clipping).
struct NoMean {
  static constexpr const char* kName = "none";
  struct State {
    std::uint32_t k;
  };
  GNMR_HOST_DEVICE static State init() { return State{0u}; }
  GNMR_HOST_DEVICE static std::uint32_t count(const State& s) { return s.k; }
  GNMR_HOST_DEVICE float mean(const State&) const { return 0.0f; }
  GNMR_HOST_DEVICE void push(State& s, float) const {
    s.k = detail::saturating_inc(s.k);
  }
  std::string check() const { return {}; }
};

}  // namespace gnmr
