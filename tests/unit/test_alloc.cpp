// The "a step allocates nothing" promises of host_unit_partials and of the
// controllers (docs), checked by counting operator new calls, and the
// counting operator new itself: it replaces the global one for the whole
// test executable (tests/support/alloc_counter.hpp declares the counter;
// test_telemetry.cpp uses it for the event log's promise).
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <new>
#include <vector>

#include "../support/alloc_counter.hpp"
#include "gnmr/host/controller.hpp"
#include "gnmr/host/unit_norms.hpp"
#include "gnmr/presets/make.hpp"
#include "../support/make_once.hpp"
#include "../../python-jax/gnmr_jax/csrc/host_step.hpp"

#if GNMR_TEST_COUNT_ALLOCS
// GCC 12 sees free() on memory from "operator new" once the replacement is
// inlined and calls it a mismatch; both sides are this file's malloc/free.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
namespace alloc_counter {
bool g_count_allocs = false;
std::size_t g_allocs = 0;
}  // namespace alloc_counter
void* operator new(std::size_t n) {
  if (alloc_counter::g_count_allocs) ++alloc_counter::g_allocs;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

using alloc_counter::g_allocs;
using alloc_counter::g_count_allocs;

namespace {
const float kNaN = std::numeric_limits<float>::quiet_NaN();
}  // namespace

// Once the thread's scratch has grown, a call on a valid layout allocates
// nothing (the segment checks included).
TEST_CASE("host_unit_partials allocates nothing per step", "[telemetry][norms]") {
  using namespace gnmr;
  const std::uint32_t units = 40;
  std::vector<float> g(64, 0.5f);
  std::vector<Segment> segs;
  for (std::uint32_t i = 0; i < 300; ++i) segs.push_back({g.data(), g.size(), DType::kF32, i % units});
  std::vector<float> partials(units, -1.0f);
  host_unit_partials(segs, partials);  // warm: the thread_local scratch grows once
  g_allocs = 0;
  g_count_allocs = true;
  for (int t = 0; t < 50; ++t) host_unit_partials(segs, partials);
  g_count_allocs = false;
  CHECK(g_allocs == 0);
  // 300 / 40 units: units 0..19 own 8 segments, 20..39 own 7; each adds 64 * 0.25.
  CHECK(partials[0] == 8 * 16.0f);
  CHECK(partials[39] == 7 * 16.0f);
}

// The controller's guarantee (docs): every buffer is allocated at
// construction, a step allocates nothing — with grants, denials, locks,
// non-finite norms and zero norms happening during the counted steps.
TEST_CASE("GnmrController and presets allocate nothing per step", "[telemetry][alloc]") {
  using namespace gnmr;
  const std::size_t units = 64;
  std::vector<float> norms(units);
  auto fill = [&](int t) {
    for (std::size_t i = 0; i < units; ++i) {
      norms[i] = 1.0f + 0.01f * static_cast<float>((i * 7 + static_cast<std::size_t>(t)) % 13);
      if (t > 30 && (t % 9 == 0) && i % 3 == 0) norms[i] *= 20.0f;  // contention
      if (t % 17 == 0 && i == 5) norms[i] = kNaN;
      if (t % 13 == 0 && i == 6) norms[i] = 0.0f;
    }
  };
  GnmrController<> ctl(units);
  std::vector<std::unique_ptr<DynController>> dyn;
  for (const char* name : {"gnmr", "gnmr-ladder", "adagc", "spam", "stabilizer"})
    dyn.push_back(gnmr_test::make(name, units));
  std::uint64_t granted = 0, denied = 0;
  for (int t = 1; t <= 200; ++t) {
    fill(t);
    g_allocs = 0;
    g_count_allocs = true;
    const StepSummary& s = ctl.step_norms(norms);
    for (auto& d : dyn) d->step_norms(norms.data(), units);
    g_count_allocs = false;
    INFO("step " << t);
    REQUIRE(g_allocs == 0);
    granted += s.granted;
    denied += s.denied;
  }
  CHECK(granted > 0);  // the counted steps did exercise the budget
  CHECK(denied > 0);
}
// DynController::save_into, every preset and the default: a framework that
// keeps the state in its own buffer saves it every step without allocating.
// And gnmr_jax's CPU step (host_step.hpp) in a training loop: the blob fed
// back is the one saved, so no load and no allocation.
TEST_CASE("save_into and gnmr_jax's host step allocate nothing per step", "[alloc][state]") {
  using namespace gnmr;
  const std::size_t units = 12;
  std::vector<float> norms(units), partials(units);
  auto fill = [&](int t) {
    for (std::size_t i = 0; i < units; ++i) {
      norms[i] = 1.0f + 0.01f * static_cast<float>((i * 5 + static_cast<std::size_t>(t)) % 11);
      if (t > 20 && t % 7 == 0 && i % 4 == 0) norms[i] *= 30.0f;
      if (t % 19 == 0 && i == 3) norms[i] = kNaN;
      partials[i] = norms[i] * norms[i];
    }
  };
  std::vector<std::unique_ptr<DynController>> ctls;
  for (const auto& name : presets::names())
    if (!presets::is_global(name) && name != "gnmr-noise-floor") ctls.push_back(gnmr_test::make(name, units));
  ctls.push_back(gnmr_test::make_default(units));
  for (auto& c : ctls) {
    INFO(c->name());
    std::vector<std::uint8_t> blob(c->state_bytes());
    for (int t = 1; t <= 60; ++t) {
      fill(t);
      g_allocs = 0;
      g_count_allocs = true;
      c->step(partials.data(), units);
      c->save_into(blob.data(), blob.size());
      g_count_allocs = false;
      INFO("step " << t);
      REQUIRE(g_allocs == 0);
    }
  }

  // host_step in a loop: the blob fed back is the one saved, so no load and
  // no allocation (its decisions: tests/unit/test_host_step.cpp).
  gnmr_jax::HostSlot slot(gnmr_test::make_default(units));
  std::vector<std::uint8_t> state = slot.last;
  std::vector<float> scale(units);
  std::vector<std::uint32_t> flags(units);
  std::int32_t counts[gnmr_jax::kCounts];
  float values[gnmr_jax::kValues];
  for (int t = 1; t <= 80; ++t) {
    fill(t);
    g_allocs = 0;
    g_count_allocs = true;
    gnmr_jax::host_step(slot, partials.data(), units, state.data(), state.data(), state.size(), scale.data(),
                        flags.data(), counts, values);
    g_count_allocs = false;
    INFO("step " << t);
    REQUIRE(g_allocs == 0);
  }
}
#endif
