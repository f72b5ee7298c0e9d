// The GPU tests' own expectations, checked on the host: a GPU test whose
// trace never exercises what it compares fails on the device for a reason
// a CPU machine can see (and GPU time is scarce). The traces are the GPU
// tests' (tests/support/trace_gen.hpp); the host controllers are the ones the
// device is compared against.
#include <catch2/catch.hpp>

#include <cstddef>
#include <string>
#include <vector>

#include "../support/trace_gen.hpp"
#include "gnmr/presets/make.hpp"
#include "../support/aux_steps.hpp"
#include "../support/make_once.hpp"

TEST_CASE("preset GPU test trace makes every preset act within the quick step count",
          "[cuda-logic][traces]") {
  // tests/cuda/test_presets.cu: 130 steps quick (sanitizer runs), 160 full;
  // it requires triggered + skip_step > 0 for every preset but "none".
  for (const std::string& name : gnmr::presets::names()) {
    if (name == "none") continue;
    const std::size_t n = gnmr::presets::is_global(name) ? 1 : 257;
    auto host = gnmr_test::make(name, n);
    std::vector<float> in(n);
    std::size_t acted = 0;
    for (int s = 1; s <= 130; ++s) {
      tracegen::preset_partials(s, in);
      auxsteps::step(*host, in.data(), n);
      acted += host->summary().triggered + host->summary().skip_step;
    }
    INFO("preset " << name);
    CHECK(acted > 0u);
  }
}
