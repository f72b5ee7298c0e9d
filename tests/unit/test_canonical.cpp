// Canonical state blobs (gnmr/detail/canonical.hpp, gnmr/io/state.hpp): the
// same state gives the same bytes. Two checks:
//  - with g++ (>= 11), the compiler's own padding map
//    (__builtin_clear_padding) says which bytes of each library state hold
//    no value; they are filled with garbage, and canonical_copy must write
//    them as zero and every other byte as it was. This covers every policy
//    State the library ships and the UnitState of every typed preset: a new
//    state with an implicit hole fails here;
//  - with any compiler, a run stopped, saved, loaded into a fresh controller
//    and resumed saves the very blob of the run that never stopped, for
//    every preset name and every layered pair.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gnmr/detail/canonical.hpp"
#include "gnmr/presets/make.hpp"
#include "gnmr/presets/typed.hpp"
#include "gnmr/step/systemic.hpp"

#include "../support/dyn_runs.hpp"
#include "../support/make_once.hpp"

namespace {

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
constexpr bool kHavePaddingMap = true;

// The canonical bytes of `value` with its padding filled with garbage first.
template <class T>
void check_canonical(const T& value, const char* what) {
  INFO(what << " (" << sizeof(T) << " bytes)");
  unsigned char map[sizeof(T)];
  {
    T probe;
    std::memset(static_cast<void*>(&probe), 0xFF, sizeof(T));
    __builtin_clear_padding(&probe);
    std::memcpy(map, &probe, sizeof(T));
  }
  unsigned char raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));
  int holes = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i)
    if (map[i] == 0) {
      raw[i] = 0xA5;  // garbage where no value lives
      ++holes;
    }
  T dirty;
  std::memcpy(static_cast<void*>(&dirty), raw, sizeof(T));
  unsigned char out[sizeof(T)] = {};
  gnmr::detail::canonical_copy(dirty, out);
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    INFO("byte " << i << (map[i] == 0 ? " (padding)" : " (value)"));
    if (map[i] == 0) {
      REQUIRE(out[i] == 0);
    } else {
      // A value byte that happens to be 0 in the map (a float's zero byte
      // is a value, the map was 0xFF) cannot occur: clear_padding only
      // clears padding.
      REQUIRE(out[i] == raw[i]);
    }
  }
  (void)holes;
}

template <class C>
void check_controller(const char* name) {
  using U = typename C::UnitState;
  U u = C::Policies::init_unit();
  check_canonical(u, name);
}
#else
constexpr bool kHavePaddingMap = false;
#endif

}  // namespace

TEST_CASE("every library state is written canonically: padding and empty states as zero", "[state][canonical]") {
  if (!kHavePaddingMap) {
    WARN("no __builtin_clear_padding in this compiler (g++ >= 11 has it): padding map not checked here");
    return;
  }
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
  using namespace gnmr;
  using namespace gnmr::presets;
  check_canonical(init_global(), "GlobalState");
  check_canonical(EmaMean::init(), "EmaMean::State");
  check_canonical(CumulativeMean::init(), "CumulativeMean::State");
  check_canonical(WindowMean<64>::init(), "WindowMean<64>::State");
  check_canonical(WindowMean<128>::init(), "WindowMean<128>::State");
  check_canonical(NoMean::init(), "NoMean::State");
  check_canonical(EmaMeanVar::init(), "EmaMeanVar::State");
  check_canonical(MinSeededEma::init(), "MinSeededEma::State");
  check_canonical(EmaSquareMean::init(), "EmaSquareMean::State");
  check_canonical(GnmrTrigger::init(), "GnmrTrigger::State");
  check_canonical(CalibratedTrigger::init(), "CalibratedTrigger::State");
  check_canonical(Ladder::init(), "Ladder::State");
  check_canonical(NormReplace::init(), "NormReplace::State");
  check_canonical(Compose<ClipToMean, PromotePrecision>::init(), "Compose<ClipToMean, PromotePrecision>::State");
  check_canonical(MaxO::init(), "MaxO::State");
  check_canonical(Unlimited::init(), "Unlimited::State");
  check_controller<GlobalClip>("GlobalClip");
  check_controller<ZClip>("ZClip");
  check_controller<AdaGC>("AdaGC");
  check_controller<Spam>("Spam");
  check_controller<SkipStep>("SkipStep");
  check_controller<Stabilizer>("Stabilizer");
  check_controller<GnmrLadder>("GnmrLadder");
  check_controller<GnmrPromote>("GnmrPromote");
  check_controller<GnmrPromoteOnly>("GnmrPromoteOnly");
  check_controller<GnmrClip>("GnmrClip");
  check_controller<GnmrCalibrated>("GnmrCalibrated");
  check_controller<GnmrController<L2Norm, CumulativeMean>>("GnmrController<CumulativeMean>");
  check_controller<GnmrController<L2Norm, WindowMean<64>>>("GnmrController<WindowMean<64>>");
#endif
}

TEST_CASE("a resumed run saves the very blob of the run that never stopped", "[state][canonical]") {
  namespace presets = gnmr::presets;
  std::vector<std::string> names = presets::names();
  for (const char* o : {"clip", "zclip", "adagc", "spam", "skip-step", "stabilizer"})
    for (const char* i : {"gnmr", "gnmr-ladder", "gnmr-promote", "gnmr-clip", "gnmr-systemic", "gnmr-calibrated"})
      names.push_back(std::string(o) + "+" + i);
  for (const auto& name : names) {
    INFO(name);
    const std::size_t n = presets::is_layered(name) ? 5 : dyntest::units_for(name);
    const auto tr = dyntest::rows(77, n, 120);
    auto straight = gnmr_test::make(name, n);
    auto first = gnmr_test::make(name, n);
    for (int t = 0; t < 120; ++t) auxsteps::step_norms(*straight, tr[static_cast<std::size_t>(t)]);
    for (int t = 0; t < 60; ++t) auxsteps::step_norms(*first, tr[static_cast<std::size_t>(t)]);
    auto resumed = gnmr_test::make(name, n);
    resumed->load(first->save());
    for (int t = 60; t < 120; ++t) auxsteps::step_norms(*resumed, tr[static_cast<std::size_t>(t)]);
    REQUIRE(resumed->save() == straight->save());
  }
}
