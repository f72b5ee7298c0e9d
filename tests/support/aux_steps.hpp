// tests/support/aux_steps.hpp — the aux signal the tests that loop over every
// preset give a controller whose trigger needs one (gnmr-noise-floor, whose
// steps take each unit's quantization noise: step_with_aux). Each unit's
// noise is a fixed fraction of its norm: units 0, 3, 6, ... at 0.7 n, under
// the sqrt(3) floor (1.21 n > n), the others at 0.3 n, above it (0.52 n),
// so every loop that drives the preset also sees it act. Controllers that
// do not need aux get the plain step. Plain C++: the CUDA tests use it too.
#pragma once

#include <cstddef>
#include <vector>

#include "gnmr/core/types.hpp"

namespace auxsteps {

inline float noise_fraction(std::size_t u) { return u % 3 == 0 ? 0.7f : 0.3f; }

// Finished norms -> the aux norms.
inline void aux_norms(const float* norms, std::size_t n, std::vector<float>& out) {
  out.resize(n);
  for (std::size_t u = 0; u < n; ++u) out[u] = norms[u] * noise_fraction(u);
}
// Partials (sums of squares) -> the aux partials.
inline void aux_partials(const float* partials, std::size_t n, std::vector<float>& out) {
  out.resize(n);
  for (std::size_t u = 0; u < n; ++u) out[u] = partials[u] * (noise_fraction(u) * noise_fraction(u));
}

// c.step(partials) or, for a trigger that needs aux, c.step_with_aux(...):
// c is a typed GnmrController or a DynController.
template <class C>
const gnmr::StepSummary& step(C& c, const float* partials, std::size_t n) {
  if (!c.needs_aux()) return c.step(partials, n);
  thread_local std::vector<float> aux;
  aux_partials(partials, n, aux);
  return c.step_with_aux(partials, aux.data(), n);
}
template <class C>
const gnmr::StepSummary& step_norms(C& c, const std::vector<float>& norms) {
  if (!c.needs_aux()) return c.step_norms(norms.data(), norms.size());
  thread_local std::vector<float> aux;
  aux_norms(norms.data(), norms.size(), aux);
  return c.step_norms_with_aux(norms.data(), aux.data(), norms.size());
}

}  // namespace auxsteps
