// tests/unit/make_once.cpp — the one translation unit that compiles
// gnmr::presets::make for the unit tests (tests/support/make_once.hpp).
#include "../support/make_once.hpp"

#include "gnmr/presets/make.hpp"

namespace gnmr_test {

std::unique_ptr<gnmr::DynController> make(const std::string& name, std::size_t num_units,
                                          const gnmr::presets::Options& o) {
  return gnmr::presets::make(name, num_units, o);
}

std::unique_ptr<gnmr::DynController> make_default(std::size_t num_units, const gnmr::presets::Options& o) {
  return gnmr::make_default(num_units, o);
}

}  // namespace gnmr_test
