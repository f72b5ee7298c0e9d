// python-jax/gnmr_jax/csrc/common.hpp — what the CPU and CUDA FFI handlers of
// gnmr_jax share: the overrides as one string attribute, the layout of the
// step's summary arrays, and a pool of controllers per configuration.
//
// The JAX step is a pure function (partials, state blob) -> (state blob,
// decisions, summary): the state lives in a JAX uint8 array holding exactly
// the bytes of DynController::save(). A handler therefore needs a controller
// only as scratch space to run the library's step on: it takes one from a
// pool keyed by (preset, overrides, units), loads the blob into it, steps,
// saves. The pool hands each concurrent call (one per device under SPMD, or
// XLA's own threads) a controller of its own, so no two calls share one.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gnmr/config.hpp"
#include "gnmr/core/types.hpp"
#include "gnmr/presets/options.hpp"

namespace gnmr_jax {

// The summary as two small arrays (JAX has no struct dtype): kCounts int32
// and kValues float32, in this order. The Python side (gnmr_jax/_ffi.py)
// names them in the same order; test_ffi.py checks both agree.
constexpr std::size_t kCounts = 10;  // step, triggered, granted, in_recovery, denied, nonfinite,
                                     // released, max_ratio_unit, skip_step, systemic
constexpr std::size_t kValues = 4;   // max_ratio, systemic_scale, total_norm, total_mean

// Host and device: the CUDA handler's unpack kernel calls it too.
GNMR_HOST_DEVICE void write_summary(const gnmr::StepSummary& s, std::int32_t* counts, float* values) {
  // The step as int32: 2^31 steps are beyond any run (the blob keeps int64).
  counts[0] = static_cast<std::int32_t>(s.step);
  counts[1] = static_cast<std::int32_t>(s.triggered);
  counts[2] = static_cast<std::int32_t>(s.granted);
  counts[3] = static_cast<std::int32_t>(s.in_recovery);
  counts[4] = static_cast<std::int32_t>(s.denied);
  counts[5] = static_cast<std::int32_t>(s.nonfinite);
  counts[6] = static_cast<std::int32_t>(s.released);
  counts[7] = s.max_ratio_unit;
  counts[8] = static_cast<std::int32_t>(s.skip_step);
  counts[9] = static_cast<std::int32_t>(s.systemic);
  values[0] = s.max_ratio;
  values[1] = s.systemic_scale;
  values[2] = s.total_norm;
  values[3] = s.total_mean;
}

// --------------------------------------------------------------- overrides ----
// gnmr::presets::Options from "key=value" lines (the Python side writes one
// per override, floats as repr(), which reads back as the same double).
// Float fields take the double rounded once to float, as the torch binding's
// static_cast<float>(double); systemic_share/maxo stay doubles.
inline std::int64_t parse_int(const std::string& k, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE)
    throw std::invalid_argument("gnmr: override '" + k + "' must be an integer, got '" + v + "'");
  return static_cast<std::int64_t>(x);
}
inline double parse_double(const std::string& k, const std::string& v) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0') throw std::invalid_argument("gnmr: override '" + k + "' must be a number, got '" + v + "'");
  return x;
}

#define GNMR_JAX_FLOAT_OPTIONS(X)                                                                 \
  X(tau) X(delta) X(beta) X(kappa) X(max_norm) X(z) X(clip_factor) X(systemic_kappa) X(systemic_beta) \
  X(deny_kappa) X(rate) X(floor) X(ceiling) X(noise_c)
#define GNMR_JAX_INT_OPTIONS(X) \
  X(warmup) X(window) X(delta_window) X(max_o) X(lock) X(cooldown) X(restart_every) X(systemic_max_grants)
#define GNMR_JAX_DOUBLE_OPTIONS(X) X(systemic_share) X(systemic_maxo)
#define GNMR_JAX_STRING_OPTIONS(X) X(mean) X(systemic_action) X(deny_action)

inline std::string option_names() {
  std::string s;
#define GNMR_JAX_NAME(f) s += (s.empty() ? "" : ", ") + std::string(#f);
  GNMR_JAX_FLOAT_OPTIONS(GNMR_JAX_NAME)
  GNMR_JAX_INT_OPTIONS(GNMR_JAX_NAME)
  GNMR_JAX_DOUBLE_OPTIONS(GNMR_JAX_NAME)
  GNMR_JAX_STRING_OPTIONS(GNMR_JAX_NAME)
#undef GNMR_JAX_NAME
  return s;
}

inline void set_option(gnmr::presets::Options& o, const std::string& k, const std::string& v) {
#define GNMR_JAX_F(f)                                                \
  if (k == #f) {                                                     \
    o.f = static_cast<float>(parse_double(k, v));                    \
    return;                                                          \
  }
#define GNMR_JAX_I(f)        \
  if (k == #f) {             \
    o.f = parse_int(k, v);   \
    return;                  \
  }
#define GNMR_JAX_D(f)          \
  if (k == #f) {               \
    o.f = parse_double(k, v);  \
    return;                    \
  }
#define GNMR_JAX_S(f) \
  if (k == #f) {      \
    o.f = v;          \
    return;           \
  }
  GNMR_JAX_FLOAT_OPTIONS(GNMR_JAX_F)
  GNMR_JAX_INT_OPTIONS(GNMR_JAX_I)
  GNMR_JAX_DOUBLE_OPTIONS(GNMR_JAX_D)
  GNMR_JAX_STRING_OPTIONS(GNMR_JAX_S)
#undef GNMR_JAX_F
#undef GNMR_JAX_I
#undef GNMR_JAX_D
#undef GNMR_JAX_S
  throw std::invalid_argument("gnmr: unknown override '" + k + "'; valid overrides: " + option_names());
}

inline gnmr::presets::Options parse_options(const std::string& text) {
  gnmr::presets::Options o;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(at, nl - at);
    at = nl + 1;
    if (line.empty()) continue;
    const std::size_t eq = line.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("gnmr: malformed override '" + line + "'");
    set_option(o, line.substr(0, eq), line.substr(eq + 1));
  }
  return o;
}

// -------------------------------------------------------------------- pool ----
// Controllers of one configuration, free for the taking. Ctl is
// gnmr::DynController or gnmr::cuda::DynDeviceController (with its buffers);
// make() builds a new one when every pooled one is in use.
template <class Ctl>
class Pool {
 public:
  using Ptr = std::unique_ptr<Ctl>;

  // A controller for `key`, built by make() if none is free.
  template <class Make>
  Ptr take(const std::string& key, Make&& make) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& free = free_[key];
      if (!free.empty()) {
        Ptr p = std::move(free.back());
        free.pop_back();
        return p;
      }
    }
    return make();  // outside the lock: a controller's construction may be slow
  }
  void give_back(const std::string& key, Ptr p) {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mu_);
    free_[key].push_back(std::move(p));
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::vector<Ptr>> free_;
};

// Returns the controller to its pool on every path out of a handler. It
// keeps a reference to the key (no copy, so no allocation): the key must
// outlive the lease.
template <class Ctl>
class Lease {
 public:
  Lease(Pool<Ctl>& pool, const std::string& key, typename Pool<Ctl>::Ptr p)
      : pool_(pool), key_(key), p_(std::move(p)) {}
  ~Lease() { pool_.give_back(key_, std::move(p_)); }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  Ctl* operator->() const { return p_.get(); }
  Ctl& operator*() const { return *p_; }

 private:
  Pool<Ctl>& pool_;
  const std::string& key_;
  typename Pool<Ctl>::Ptr p_;
};

// The pool's key of a configuration, written into `out` (a string kept by
// the caller: once it has grown to a key's size, no allocation).
inline void pool_key_into(std::string& out, std::string_view preset, std::string_view options, std::size_t n) {
  char num[24];
  const int k = std::snprintf(num, sizeof num, "%zu", n);
  out.clear();
  out.append(preset.data(), preset.size());
  out.push_back('\0');
  out.append(options.data(), options.size());
  out.push_back('\0');
  out.append(num, static_cast<std::size_t>(k));
}
inline std::string pool_key(const std::string& preset, const std::string& options, std::size_t n) {
  std::string key;
  pool_key_into(key, preset, options, n);
  return key;
}

}  // namespace gnmr_jax
