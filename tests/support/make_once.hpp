// tests/support/make_once.hpp — gnmr::presets::make for the unit tests,
// compiled in one translation unit (tests/unit/make_once.cpp).
//
// make() instantiates every preset's controller: about 20 s of g++ -O3 in
// each translation unit that calls it, most of the unit tests' build time
// when a dozen of them did. The tests that use it only as a factory call
// gnmr_test::make (and gnmr_test::make_default), which are those same
// functions compiled once; test_presets.cpp calls make directly.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "gnmr/host/dyn_controller.hpp"
#include "gnmr/presets/options.hpp"

namespace gnmr_test {

std::unique_ptr<gnmr::DynController> make(const std::string& name, std::size_t num_units,
                                          const gnmr::presets::Options& o = {});
// gnmr::make_default, the same way.
std::unique_ptr<gnmr::DynController> make_default(std::size_t num_units, const gnmr::presets::Options& o = {});

}  // namespace gnmr_test
