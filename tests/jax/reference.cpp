// tests/jax/reference.cpp — gnmr_jax_reference: the C++ host controller's
// decisions on recorded per-unit partials, for the JAX tests to compare the
// FFI step's with, bit for bit (tests/jax/test_equality.py).
//
//   gnmr_jax_reference PARTIALS.f32 UNITS PRESET [key=value ...]
//
// PARTIALS.f32 holds steps x UNITS little-endian float32 partial sums (sums
// of squares), row by row. Runs gnmr::presets::make(PRESET, UNITS,
// overrides) and DynController::step(partials) on each row — the plain C++
// API, no XLA — and prints, per step, the summary and one line per unit as
// tests/python/reference.cpp does (floats as bit patterns):
//   S,<step>,<triggered>,<granted>,<in_recovery>,<denied>,<nonfinite>,
//     <released>,<max_ratio bits>,<max_ratio_unit>,<skip_step>,<systemic>,
//     <systemic_scale bits>,<total_norm bits>,<total_mean bits>
//   D,<step>,<unit>,<scale bits>,<flags>
// and at the end the controller's state blob (save()) in hex:
//   B,<hex>
// Overrides use gnmr::presets::Options' names; a float override is the
// double rounded once to float, as the Python bindings pass it.
// Exit status 2 on a usage or setting error, 1 on an unreadable input.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gnmr/presets/make.hpp"

namespace {

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

void set_option(gnmr::presets::Options& o, const std::string& kv) {
  const auto eq = kv.find('=');
  if (eq == std::string::npos) throw std::invalid_argument("expected key=value, got '" + kv + "'");
  const std::string k = kv.substr(0, eq);
  const std::string v = kv.substr(eq + 1);
#define REF_F(f)                                 \
  if (k == #f) {                                 \
    o.f = static_cast<float>(std::stod(v));      \
    return;                                      \
  }
#define REF_I(f)           \
  if (k == #f) {           \
    o.f = std::stoll(v);   \
    return;                \
  }
#define REF_D(f)          \
  if (k == #f) {          \
    o.f = std::stod(v);   \
    return;               \
  }
#define REF_S(f) \
  if (k == #f) { \
    o.f = v;     \
    return;      \
  }
  REF_F(tau) REF_F(delta) REF_F(beta) REF_F(kappa) REF_F(max_norm) REF_F(z) REF_F(clip_factor)
  REF_F(systemic_kappa) REF_F(systemic_beta) REF_F(deny_kappa) REF_F(rate) REF_F(floor) REF_F(ceiling)
  REF_I(warmup) REF_I(window) REF_I(delta_window) REF_I(max_o) REF_I(lock) REF_I(cooldown)
  REF_I(restart_every) REF_I(systemic_max_grants)
  REF_D(systemic_share) REF_D(systemic_maxo)
  REF_S(mean) REF_S(systemic_action) REF_S(deny_action)
#undef REF_F
#undef REF_I
#undef REF_D
#undef REF_S
  throw std::invalid_argument("unknown option '" + k + "'");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: gnmr_jax_reference PARTIALS.f32 UNITS PRESET [key=value ...]\n");
    return 2;
  }
  std::size_t units = 0;
  gnmr::presets::Options o;
  std::unique_ptr<gnmr::DynController> c;
  try {
    units = static_cast<std::size_t>(std::stoull(argv[2]));
    for (int i = 4; i < argc; ++i) set_option(o, argv[i]);
    c = gnmr::presets::make(argv[3], units, o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gnmr_jax_reference: %s\n", e.what());
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "gnmr_jax_reference: cannot open %s\n", argv[1]);
    return 1;
  }
  const std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t row = units * sizeof(float);
  if (raw.size() % row != 0) {
    std::fprintf(stderr, "gnmr_jax_reference: %s: %zu bytes is not a whole number of %zu-unit rows\n", argv[1],
                 raw.size(), units);
    return 1;
  }
  std::vector<float> partials(units);
  for (std::size_t s = 0; s < raw.size() / row; ++s) {
    std::memcpy(partials.data(), raw.data() + s * row, row);
    const gnmr::StepSummary& m = c->step(partials.data(), units);
    std::printf("S,%lld,%u,%u,%u,%u,%u,%u,%08x,%d,%u,%u,%08x,%08x,%08x\n", static_cast<long long>(m.step),
                m.triggered, m.granted, m.in_recovery, m.denied, m.nonfinite, m.released, bits(m.max_ratio),
                m.max_ratio_unit, m.skip_step, m.systemic, bits(m.systemic_scale), bits(m.total_norm),
                bits(m.total_mean));
    const auto& d = c->decisions();
    for (std::size_t u = 0; u < d.size(); ++u)
      std::printf("D,%lld,%zu,%08x,%u\n", static_cast<long long>(m.step), u, bits(d[u].scale), d[u].flags);
  }
  std::printf("B,");
  for (std::uint8_t b : c->save()) std::printf("%02x", b);
  std::printf("\n");
  return 0;
}
