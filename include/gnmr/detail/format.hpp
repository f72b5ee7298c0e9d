// gnmr/detail/format.hpp — locale-proof float/integer text conversion for
// the trace CSV (trace.hpp) and the JSON Lines event log (telemetry.hpp).
//
// printf("%g") and strtof follow LC_NUMERIC: a training program that calls
// setlocale(LC_ALL, "de_DE.UTF-8") would write "1,5" into a CSV whose cells
// are comma-separated. std::to_chars / std::from_chars never look at the
// locale, so they are used where the standard library has them for float
// (libstdc++ 11+, MSVC); the printf/strtof fallback is only for libraries
// without them (libc++ before 17). Nothing here allocates.
#pragma once

#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "gnmr/core/math.hpp"

namespace gnmr {
namespace detail {

// Room for "%.9g" of any float ("-1.17549435e-38" is 15) and any int64.
constexpr std::size_t kNumBuf = 32;

// Finite floats as "%.9g" (9 significant digits: enough to read back the
// same float); non-finite ones as "nan", "inf", "-inf". Returns the length.
inline std::size_t format_float(char (&buf)[kNumBuf], float v) {
  if (!is_finite(v)) {
    const char* s = is_nan(v) ? "nan" : (v > 0.0f ? "inf" : "-inf");
    const std::size_t k = std::strlen(s);
    std::memcpy(buf, s, k);
    return k;
  }
#if defined(__cpp_lib_to_chars)
  const auto r = std::to_chars(buf, buf + kNumBuf, v, std::chars_format::general, 9);
  return static_cast<std::size_t>(r.ptr - buf);
#else
  const int k = std::snprintf(buf, kNumBuf, "%.9g", static_cast<double>(v));
  // A locale with a decimal comma: put the point back.
  for (int i = 0; i < k; ++i)
    if (buf[i] == ',') buf[i] = '.';
  return k > 0 ? static_cast<std::size_t>(k) : 0;
#endif
}

inline std::size_t format_int(char (&buf)[kNumBuf], std::int64_t v) {
  const auto r = std::to_chars(buf, buf + kNumBuf, v);
  return static_cast<std::size_t>(r.ptr - buf);
}

// Whole-field parse of a decimal integer; false on anything else, overflow included.
inline bool parse_int64(const char* b, const char* e, std::int64_t& out) {
  if (b != e && *b == '+') ++b;
  if (b == e) return false;
  const auto r = std::from_chars(b, e, out);
  return r.ec == std::errc() && r.ptr == e;
}

// Whole-field parse of a decimal float; accepts nan, inf, -inf, infinity
// (any case) and a leading '+'. A value beyond the float range becomes
// +-inf (that is what an fp32 norm of it would be) and one below it 0 or a
// subnormal. Hex floats and trailing characters are rejected.
inline bool parse_float(const char* b, const char* e, float& out) {
  bool neg = false;
  if (b != e && (*b == '+' || *b == '-')) {
    neg = *b == '-';
    ++b;
  }
  if (b == e || *b == '+' || *b == '-') return false;
  // Hex: from_chars would stop at the 'x' and strtof would accept it.
  for (const char* p = b; p != e; ++p)
    if (*p == 'x' || *p == 'X') return false;
#if defined(__cpp_lib_to_chars)
  float v = 0.0f;
  const auto r = std::from_chars(b, e, v);
  if (r.ptr != e) return false;
  if (r.ec == std::errc::result_out_of_range) {
    // Overflow or underflow: the double tells which, and rounds it.
    double d = 0.0;
    const auto rd = std::from_chars(b, e, d);
    if (rd.ec == std::errc()) {
      v = static_cast<float>(d);
    } else {
      // Beyond double as well: the exponent's sign decides.
      const char* x = b;
      while (x != e && *x != 'e' && *x != 'E') ++x;
      v = (x + 1 < e && x[1] == '-') ? 0.0f : inf_f();
    }
  } else if (r.ec != std::errc()) {
    return false;
  }
#else
  char tmp[128];
  const std::size_t len = static_cast<std::size_t>(e - b);
  if (len >= sizeof tmp) return false;
  std::memcpy(tmp, b, len);
  tmp[len] = '\0';
  for (std::size_t i = 0; i < len; ++i)
    if (tmp[i] == ',') return false;
  char* end = nullptr;
  errno = 0;
  float v = std::strtof(tmp, &end);
  if (end != tmp + len) return false;
#endif
  out = neg ? -v : v;
  return true;
}

}  // namespace detail
}  // namespace gnmr
