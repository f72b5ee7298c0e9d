// tests/unit/make_once.cpp — the one translation unit that compiles
// gnmr::presets::make for the unit tests (tests/support/make_once.hpp).
#include "../support/make_once.hpp"

#include <cstring>

#include "gnmr/presets/make.hpp"

namespace gnmr_test {

std::unique_ptr<gnmr::DynController> make(const std::string& name, std::size_t num_units,
                                          const gnmr::presets::Options& o) {
  return gnmr::presets::make(name, num_units, o);
}

std::unique_ptr<gnmr::DynController> make_default(std::size_t num_units, const gnmr::presets::Options& o) {
  return gnmr::make_default(num_units, o);
}

ImageOf image_of(const std::string& name, std::size_t num_units, const std::vector<std::vector<float>>& rows,
                 const gnmr::presets::Options& o) {
  return gnmr::presets::with_preset(name, num_units, o, [&](auto c) {
    using C = decltype(c);
    using PS = typename C::Policies;
    for (const auto& r : rows) {
      if constexpr (C::needs_aux()) {
        std::vector<float> aux(r);
        for (float& a : aux) a *= 0.25f;
        c.step_norms_with_aux(r.data(), aux.data(), r.size());
      } else {
        c.step_norms(r.data(), r.size());
      }
    }
    ImageOf out;
    auto im = std::make_unique<gnmr::TypedStateImage<PS>>(c.policies(), num_units);
    out.bytes.assign(im->image_bytes(), 0);
    const gnmr::GlobalState g = c.global_state();
    const std::int64_t step = c.steps_done();
    std::memcpy(out.bytes.data() + im->region(0).offset, c.unit_states().data(), im->region(0).bytes);
    std::memcpy(out.bytes.data() + im->region(1).offset, &g, im->region(1).bytes);
    std::memcpy(out.bytes.data() + im->region(2).offset, &step, im->region(2).bytes);
    out.blob = gnmr::save_state(c);
    out.image = std::move(im);
    return out;
  });
}

}  // namespace gnmr_test
