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
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gnmr/host/dyn_controller.hpp"
#include "gnmr/host/state_image.hpp"
#include "gnmr/presets/options.hpp"

namespace gnmr_test {

std::unique_ptr<gnmr::DynController> make(const std::string& name, std::size_t num_units,
                                          const gnmr::presets::Options& o = {});
// gnmr::make_default, the same way.
std::unique_ptr<gnmr::DynController> make_default(std::size_t num_units, const gnmr::presets::Options& o = {});

// A typed preset's (not a layered name's) controller after steps on `rows`
// (one norm per unit each; a preset that needs aux gets norm / 4): its state
// image codec (gnmr/host/state_image.hpp), the image of its state copied
// from unit_states(), global_state() and steps_done(), and save_state's blob.
struct ImageOf {
  std::unique_ptr<gnmr::StateImage> image;
  std::vector<std::uint8_t> bytes;
  std::vector<std::uint8_t> blob;
};
ImageOf image_of(const std::string& name, std::size_t num_units, const std::vector<std::vector<float>>& rows,
                 const gnmr::presets::Options& o = {});

}  // namespace gnmr_test
