// tests/support/summary_eq.hpp — two StepSummaries equal field by field
// (floats by their bits). Not memcmp: a StepSummary has 4 bytes of tail
// padding that no code defines (a clang build compared them and failed).
// Shared by the host and CUDA tests.
#pragma once

#include <cstdint>
#include <cstring>

#include "gnmr/core/types.hpp"

namespace testsupport {

inline std::uint32_t float_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

inline bool same_summary(const gnmr::StepSummary& a, const gnmr::StepSummary& b) {
  return a.step == b.step && a.triggered == b.triggered && a.granted == b.granted &&
         a.in_recovery == b.in_recovery && a.denied == b.denied && a.nonfinite == b.nonfinite &&
         a.released == b.released && float_bits(a.max_ratio) == float_bits(b.max_ratio) &&
         a.max_ratio_unit == b.max_ratio_unit && a.skip_step == b.skip_step && a.systemic == b.systemic &&
         float_bits(a.systemic_scale) == float_bits(b.systemic_scale) &&
         float_bits(a.total_norm) == float_bits(b.total_norm) && float_bits(a.total_mean) == float_bits(b.total_mean);
}

}  // namespace testsupport
