// python-jax/gnmr_jax/csrc/ffi_cpu.cpp — gnmr_jax's CPU side: the XLA FFI
// handler that runs one controller step inside a compiled JAX program, and
// the few C functions the Python package calls through ctypes when it builds
// a guard (preset names, the initial state blob, checks).
//
// The handler (GnmrJaxStep, registered as "gnmr_jax_step" for the CPU):
//   args:  partials float32[N], state uint8[B]
//   attrs: preset (string), options (string: "key=value" lines)
//   rets:  state uint8[B] (aliased to the input state by the caller),
//          scale float32[N], flags uint32[N], counts int32[10], values float32[4]
// It runs host_step (host_step.hpp) on a pooled gnmr::presets::make
// controller (common.hpp): the blob is loaded unless it is the one the
// controller saved last, DynController::step(partials) runs — the
// library's host step, so the decisions are the C++ controller's bit for
// bit — and DynController::save_into writes the new blob. Every C++ error
// (a corrupted or mismatched state, a bad preset) comes back as an XLA FFI
// error with the library's message; nothing escapes as an exception.
//
// Cost per call in a training loop: a compare of the blob with the last one
// saved, the step, the save (the blob's checksum) and two copies of the
// blob; no allocation. A blob seen for the first time (a restore) is
// parsed and checked in full.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "common.hpp"
#include "host_step.hpp"
#include "gnmr/config.hpp"
#include "gnmr/io/state.hpp"
#include "gnmr/presets/make.hpp"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace gnmr_jax {

// Buffer types by name: a template's comma would split XLA's macro arguments.
using F32Vec = ffi::Buffer<ffi::F32, 1>;
using U8Vec = ffi::Buffer<ffi::U8, 1>;
using U32Vec = ffi::Buffer<ffi::U32, 1>;
using S32Vec = ffi::Buffer<ffi::S32, 1>;

namespace {

Pool<HostSlot>& host_pool() {
  static Pool<HostSlot> pool;  // never destroyed before the handlers' last call
  return pool;
}

std::unique_ptr<gnmr::DynController> make_controller(const std::string& preset, const std::string& options,
                                                     std::size_t n) {
  return gnmr::presets::make(preset, n, parse_options(options));
}

ffi::Error step_impl(F32Vec partials, U8Vec state, std::string_view preset_v, std::string_view options_v,
                     ffi::Result<U8Vec> state_out, ffi::Result<F32Vec> scale, ffi::Result<U32Vec> flags,
                     ffi::Result<S32Vec> counts, ffi::Result<F32Vec> values) {
  const std::size_t n = partials.element_count();
  if (n == 0) return ffi::Error::InvalidArgument("gnmr_jax: no units (an empty partials array)");
  if (scale->element_count() != n || flags->element_count() != n)
    return ffi::Error::InvalidArgument("gnmr_jax: the decision arrays must have one entry per unit");
  if (counts->element_count() != kCounts || values->element_count() != kValues)
    return ffi::Error::InvalidArgument("gnmr_jax: the summary arrays have the wrong size");
  if (state_out->element_count() != state.element_count())
    return ffi::Error::InvalidArgument("gnmr_jax: the output state must have the input state's size");
  try {
    // The key is built in a thread-local string: no allocation once it has
    // grown to this configuration's size.
    thread_local std::string key;
    pool_key_into(key, preset_v, options_v, n);
    Lease<HostSlot> slot(host_pool(), key, host_pool().take(key, [&] {
      return std::unique_ptr<HostSlot>(
          new HostSlot(make_controller(std::string(preset_v), std::string(options_v), n)));
    }));
    host_step(*slot, partials.typed_data(), n, state.typed_data(), state_out->typed_data(), state.element_count(),
              scale->typed_data(), flags->typed_data(), counts->typed_data(), values->typed_data());
  } catch (const gnmr::StateError& e) {
    return ffi::Error::InvalidArgument(std::string("gnmr_jax: the guard's state: ") + e.what());
  } catch (const std::invalid_argument& e) {
    return ffi::Error::InvalidArgument(e.what());
  } catch (const std::exception& e) {
    return ffi::Error::Internal(std::string("gnmr_jax: ") + e.what());
  }
  return ffi::Error::Success();
}

// Copies `s` into the caller's buffer (NUL-terminated, truncated to cap);
// returns the length the full text needs.
long put_text(const std::string& s, char* out, std::size_t cap) {
  if (out != nullptr && cap > 0) {
    const std::size_t k = std::min(s.size(), cap - 1);
    std::memcpy(out, s.data(), k);
    out[k] = '\0';
  }
  return static_cast<long>(s.size());
}

}  // namespace
}  // namespace gnmr_jax

// Exported although the library is built with -fvisibility=hidden: the
// Python side takes its address (jax.ffi.pycapsule).
extern "C" __attribute__((visibility("default"))) XLA_FFI_Error* GnmrJaxStep(XLA_FFI_CallFrame* call_frame);

XLA_FFI_DEFINE_HANDLER_SYMBOL(GnmrJaxStep, gnmr_jax::step_impl,
                              ffi::Ffi::Bind()
                                  .Arg<gnmr_jax::F32Vec>()
                                  .Arg<gnmr_jax::U8Vec>()
                                  .Attr<std::string_view>("preset")
                                  .Attr<std::string_view>("options")
                                  .Ret<gnmr_jax::U8Vec>()
                                  .Ret<gnmr_jax::F32Vec>()
                                  .Ret<gnmr_jax::U32Vec>()
                                  .Ret<gnmr_jax::S32Vec>()
                                  .Ret<gnmr_jax::F32Vec>());

// ------------------------------------------------------------- the C API ----
// For ctypes (gnmr_jax/_ffi.py). Each returns >= 0 on success and -1 on an
// error, whose message is written to err (NUL-terminated, at most errcap).
extern "C" {

__attribute__((visibility("default"))) long gnmr_jax_version(char* out, std::size_t cap) {
  return gnmr_jax::put_text(std::to_string(GNMR_VERSION_MAJOR) + "." + std::to_string(GNMR_VERSION_MINOR) + "." +
                                std::to_string(GNMR_VERSION_PATCH),
                            out, cap);
}

// The preset names, one a line (gnmr::presets::names(): "default" last).
__attribute__((visibility("default"))) long gnmr_jax_presets(char* out, std::size_t cap) {
  std::string s;
  for (const auto& n : gnmr::presets::names()) s += n + "\n";
  return gnmr_jax::put_text(s, out, cap);
}

// The overrides `preset` takes, one a line, and whether its rule is global.
__attribute__((visibility("default"))) long gnmr_jax_preset_info(const char* preset, int* is_global, char* out,
                                                                 std::size_t cap, char* err, std::size_t errcap) {
  try {
    *is_global = gnmr::presets::is_global(preset) ? 1 : 0;
    std::string s;
    for (const auto& k : gnmr::presets::overrides_of(preset)) s += k + "\n";
    return gnmr_jax::put_text(s, out, cap);
  } catch (const std::exception& e) {
    gnmr_jax::put_text(e.what(), err, errcap);
    return -1;
  }
}

// One flag bit by name ("skip" -> kSkip), or -1.
__attribute__((visibility("default"))) long gnmr_jax_flag(const char* name) {
  static const struct {
    const char* name;
    std::uint32_t bit;
  } kFlags[] = {{"TRIGGERED", gnmr::kTriggered}, {"GRANTED", gnmr::kGranted},   {"IN_RECOVERY", gnmr::kInRecovery},
                {"DENIED", gnmr::kDenied},       {"COOLDOWN", gnmr::kCooldown}, {"NONFINITE", gnmr::kNonFinite},
                {"SKIP", gnmr::kSkip},           {"RESET_MOMENTS", gnmr::kResetMoments},
                {"PROMOTE", gnmr::kPromote},     {"RELEASED", gnmr::kReleased}, {"WARMUP", gnmr::kWarmup},
                {"ZERO_NORM", gnmr::kZeroNorm},  {"SYSTEMIC", gnmr::kSystemic}, {"RESTART", gnmr::kRestart}};
  for (const auto& f : kFlags)
    if (std::strcmp(f.name, name) == 0) return static_cast<long>(f.bit);
  return -1;
}

// The fresh state blob of `preset` over n units with `options` (the
// controller's save() at construction) into out, if cap allows; returns its
// size. Validates the preset and the overrides (the C++ message on error).
// The controller built goes to the handler's pool, so the first step in a
// compiled program does not build one.
__attribute__((visibility("default"))) long gnmr_jax_init_state(const char* preset, const char* options,
                                                                std::size_t n, std::uint8_t* out,
                                                                std::size_t cap, char* err, std::size_t errcap) {
  try {
    if (n == 0) throw std::invalid_argument("gnmr: a controller needs at least one unit");
    auto ctl = gnmr_jax::make_controller(preset, options, n);
    // gnmr-noise-floor steps on each unit's quantization noise too
    // (step_with_aux), which the JAX step does not carry: refused here, at
    // trace time, rather than by the handler inside a compiled step.
    if (ctl->needs_aux())
      throw std::invalid_argument(std::string("gnmr_jax: preset '") + preset +
                                  "' needs each unit's noise with every step, which the JAX step does not take "
                                  "(use it from C++, CUDA or Python: docs/presets.md, gnmr-noise-floor)");
    std::unique_ptr<gnmr_jax::HostSlot> slot(new gnmr_jax::HostSlot(std::move(ctl)));
    const std::size_t bytes = slot->last.size();
    if (out != nullptr && cap >= bytes) std::memcpy(out, slot->last.data(), bytes);
    gnmr_jax::host_pool().give_back(gnmr_jax::pool_key(preset, options, n), std::move(slot));
    return static_cast<long>(bytes);
  } catch (const std::exception& e) {
    gnmr_jax::put_text(e.what(), err, errcap);
    return -1;
  }
}

// Whether `blob` loads into a controller of `preset` over n units with
// `options` (0) or not (-1, the library's message in err); its step count
// in *steps_done. Nothing is kept.
__attribute__((visibility("default"))) long gnmr_jax_check_state(const char* preset, const char* options,
                                                                 std::size_t n, const std::uint8_t* blob,
                                                                 std::size_t size, long long* steps_done,
                                                                 char* err, std::size_t errcap) {
  try {
    auto ctl = gnmr_jax::make_controller(preset, options, n);
    ctl->load(blob, size);
    *steps_done = static_cast<long long>(ctl->steps_done());
    return 0;
  } catch (const std::exception& e) {
    gnmr_jax::put_text(e.what(), err, errcap);
    return -1;
  }
}

}  // extern "C"
