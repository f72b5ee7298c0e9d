// fuzz/fuzz_trace.cpp — libFuzzer target for gnmr::read_trace (trace.hpp).
//
// Any byte string must either parse or throw gnmr::TraceError with a line
// inside the input; nothing else may escape, crash or trip ASan/UBSan.
// A parsed trace must satisfy the format's invariants and survive a round
// trip through TraceWriter bit for bit (NaN as NaN).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>

#include "gnmr/io/trace.hpp"

namespace {
void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_trace: invariant violated: %s\n", what);
    std::abort();
  }
}
std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::size_t lines = 1;
  for (char c : text) lines += c == '\n';
  gnmr::Trace t;
  try {
    std::istringstream in(text);
    t = gnmr::read_trace(in);
  } catch (const gnmr::TraceError& e) {
    check(e.line >= 1 && e.line <= lines + 1, "TraceError line outside the input");
    check(!e.message.empty(), "empty TraceError message");
    return 0;
  }
  const std::size_t n = t.num_units();
  check(n >= 1, "no units");
  check(t.num_steps() >= 1, "no steps");
  check(t.norms.size() == n * t.num_steps(), "norms size");
  for (std::size_t s = 1; s < t.num_steps(); ++s) check(t.steps[s] > t.steps[s - 1], "steps increase");
  for (float v : t.norms) check(!(v < 0.0f) || !gnmr::is_finite(v), "negative finite norm");

  std::ostringstream out;
  gnmr::TraceWriter w(out, t.names);  // throws (escapes) if the reader let a bad name in
  for (std::size_t s = 0; s < t.num_steps(); ++s) w.write(t.steps[s], t.row(s), n);
  std::istringstream back(out.str());
  const gnmr::Trace u = gnmr::read_trace(back);
  check(u.names == t.names && u.steps == t.steps && u.norms.size() == t.norms.size(), "round trip shape");
  for (std::size_t i = 0; i < t.norms.size(); ++i)
    check(gnmr::is_nan(t.norms[i]) ? gnmr::is_nan(u.norms[i]) : bits(u.norms[i]) == bits(t.norms[i]),
          "round trip value");
  return 0;
}
