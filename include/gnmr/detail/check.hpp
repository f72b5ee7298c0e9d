// gnmr/detail/check.hpp — host-side parameter validation helpers.
//
// Policies validate their hyperparameters in a host-only check() that
// returns an empty string when valid and a full message otherwise; the
// controller turns a message into std::invalid_argument at construction,
// before any state exists, so a bad configuration loses nothing.
#pragma once

#include <cmath>
#include <initializer_list>
#include <sstream>
#include <string>

namespace gnmr {
namespace detail {

inline std::string fmt_value(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

inline std::string bad(const char* policy, const char* param, const char* rule, double v) {
  return std::string("gnmr: ") + policy + ": " + param + " must be " + rule + ", got " +
         fmt_value(v);
}

// lo <= v < hi, finite.
inline std::string in_range_open_hi(const char* policy, const char* param, double v, double lo,
                                    double hi) {
  if (!(v >= lo && v < hi))
    return bad(policy, param, ("in [" + fmt_value(lo) + ", " + fmt_value(hi) + ")").c_str(), v);
  return {};
}

// v > 0 and finite.
inline std::string positive(const char* policy, const char* param, double v) {
  if (!(v > 0.0) || !std::isfinite(v)) return bad(policy, param, "finite and > 0", v);
  return {};
}

// v > 0; +inf allowed (means "off").
inline std::string positive_or_inf(const char* policy, const char* param, double v) {
  if (!(v > 0.0)) return bad(policy, param, "> 0 (or +inf to disable)", v);
  return {};
}

// v >= 0 and finite.
inline std::string non_negative(const char* policy, const char* param, double v) {
  if (!(v >= 0.0) || !std::isfinite(v)) return bad(policy, param, "finite and >= 0", v);
  return {};
}

// First non-empty message wins.
inline std::string first_error(std::initializer_list<std::string> msgs) {
  for (const auto& m : msgs)
    if (!m.empty()) return m;
  return {};
}

}  // namespace detail
}  // namespace gnmr
