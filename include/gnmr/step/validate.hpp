// gnmr/step/validate.hpp — what a controller's constructor checks before any
// state exists: the unit count and every policy's and option's parameters.
//
// One definition for both backends, so GnmrController (gnmr/host/) and
// DeviceController (gnmr/cuda/) accept and refuse the same configurations
// with the same messages, and the device backend does not need the host
// controller to apply the host's rules. The unit limit keeps every unit
// index a valid StepSummary::max_ratio_unit (an int32, -1 meaning none).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include "gnmr/detail/check.hpp"
#include "gnmr/step/step.hpp"

namespace gnmr {
namespace detail {

// Throws std::invalid_argument with the first problem found: the unit count
// (named after `who`, the controller's class), then the policies in slot
// order, then the options. Host only: it runs at construction.
template <class Norm, class Mean, class Trigger, class Recovery, class Budget>
void validate_controller(const char* who, std::size_t num_units,
                         const PolicySet<Norm, Mean, Trigger, Recovery, Budget>& p) {
  if (num_units == 0) throw std::invalid_argument(std::string("gnmr: ") + who + " needs at least one unit");
  if (num_units > 0x7fffffffu)
    throw std::invalid_argument(std::string("gnmr: ") + who + " supports at most 2^31-1 units, got " +
                                std::to_string(num_units));
  const std::string msg = first_error({p.norm.check(), p.mean.check(), p.trigger.check(), p.recovery.check(),
                                       p.budget.check(), p.opt.check()});
  if (!msg.empty()) throw std::invalid_argument(msg);
}

}  // namespace detail
}  // namespace gnmr
