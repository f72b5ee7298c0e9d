// tests/python/reference.cpp — gnmr_py_reference: the C++ host controller's
// decisions on a recorded norm trace, for the Python tests to compare the
// binding's with, bit for bit.
//
//   gnmr_py_reference TRACE.csv PRESET [key=value ...]
//
// Runs gnmr::presets::make(PRESET, units, overrides) over the trace with
// step_norms(), one row per step, exactly as gnmr-replay does (a global
// preset's trace already has its one "global" column when the binding
// recorded it). Prints, per step, one summary line and one line per unit,
// floats as their bit patterns so that nothing is lost in formatting:
//   S,<step>,<triggered>,<granted>,<in_recovery>,<denied>,<nonfinite>,
//     <released>,<max_ratio bits>,<max_ratio_unit>,<skip_step>,<systemic>,
//     <systemic_scale bits>,<total_norm bits>,<total_mean bits>
//   D,<step>,<unit>,<scale bits>,<flags>
// Overrides use gnmr::presets::Options' names (tau=2.5 max_o=2 mean=window).
// Exit status 2 on a usage or setting error, 1 on an unreadable trace.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>

#include "gnmr/io/trace.hpp"
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
#define GNMR_REF_F(f) \
  if (k == #f) {      \
    o.f = std::stof(v); \
    return;           \
  }
#define GNMR_REF_I(f) \
  if (k == #f) {      \
    o.f = std::stoll(v); \
    return;           \
  }
  GNMR_REF_F(tau) GNMR_REF_F(delta) GNMR_REF_F(beta) GNMR_REF_F(kappa) GNMR_REF_F(max_norm)
  GNMR_REF_F(z) GNMR_REF_F(clip_factor)
  GNMR_REF_I(warmup) GNMR_REF_I(window) GNMR_REF_I(delta_window) GNMR_REF_I(max_o) GNMR_REF_I(lock)
  GNMR_REF_I(cooldown) GNMR_REF_I(restart_every) GNMR_REF_I(systemic_max_grants)
  GNMR_REF_F(systemic_kappa) GNMR_REF_F(systemic_beta) GNMR_REF_F(deny_kappa)
  GNMR_REF_F(rate) GNMR_REF_F(floor) GNMR_REF_F(ceiling)
  if (k == "systemic_share") {
    o.systemic_share = std::stod(v);
    return;
  }
  if (k == "systemic_maxo") {
    o.systemic_maxo = std::stod(v);
    return;
  }
  if (k == "systemic_action") {
    o.systemic_action = v;
    return;
  }
  if (k == "deny_action") {
    o.deny_action = v;
    return;
  }
#undef GNMR_REF_F
#undef GNMR_REF_I
  if (k == "mean") {
    o.mean = v;
    return;
  }
  throw std::invalid_argument("unknown option '" + k + "'");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: gnmr_py_reference TRACE.csv PRESET [key=value ...]\n");
    return 2;
  }
  gnmr::presets::Options o;
  std::unique_ptr<gnmr::DynController> c;
  gnmr::Trace t;
  try {
    for (int i = 3; i < argc; ++i) set_option(o, argv[i]);
    std::ifstream in(argv[1]);
    if (!in) {
      std::fprintf(stderr, "gnmr_py_reference: cannot open %s\n", argv[1]);
      return 1;
    }
    t = gnmr::read_trace(in);
    c = gnmr::presets::make(argv[2], t.num_units(), o);
  } catch (const gnmr::TraceError& e) {
    std::fprintf(stderr, "gnmr_py_reference: %s: %s\n", argv[1], e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gnmr_py_reference: %s\n", e.what());
    return 2;
  }
  for (std::size_t s = 0; s < t.num_steps(); ++s) {
    const gnmr::StepSummary& m = c->step_norms(t.row(s), t.num_units());
    std::printf("S,%lld,%u,%u,%u,%u,%u,%u,%08x,%d,%u,%u,%08x,%08x,%08x\n", static_cast<long long>(m.step),
                m.triggered, m.granted, m.in_recovery, m.denied, m.nonfinite, m.released, bits(m.max_ratio),
                m.max_ratio_unit, m.skip_step, m.systemic, bits(m.systemic_scale), bits(m.total_norm),
                bits(m.total_mean));
    const auto& d = c->decisions();
    for (std::size_t u = 0; u < d.size(); ++u)
      std::printf("D,%lld,%zu,%08x,%u\n", static_cast<long long>(m.step), u, bits(d[u].scale), d[u].flags);
  }
  return 0;
}
