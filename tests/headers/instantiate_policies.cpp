// tests/headers: the host templates a user instantiates, compiled under the
// strict warnings of the header check. Compiling a header alone parses its
// templates but checks their bodies only once they are instantiated, and
// that is where conversion warnings hide (controller.hpp:158 was found this
// way). Every shipped policy template, the host norms for every norm, the
// norm layout replays. The controllers are instantiate_controllers.cpp.
#include <gnmr/comm/reducer.hpp>
#include <gnmr/host/unit_norms.hpp>
#include <gnmr/io/trace.hpp>
#include <gnmr/plan/adamw_plan.hpp>
#include <gnmr/plan/norm_plan.hpp>
#include <gnmr/policy/budget.hpp>
#include <gnmr/policy/interface.hpp>
#include <gnmr/policy/mean.hpp>
#include <gnmr/policy/mean_peers.hpp>
#include <gnmr/policy/norm.hpp>
#include <gnmr/policy/recovery.hpp>
#include <gnmr/policy/recovery_ladder.hpp>
#include <gnmr/policy/recovery_norm_replace.hpp>
#include <gnmr/policy/trigger.hpp>
#include <gnmr/policy/trigger_calibrated.hpp>
#include <gnmr/policy/trigger_zscore.hpp>

template struct gnmr::WindowMean<1>;
template struct gnmr::WindowMean<32>;
template struct gnmr::WindowMean<4096>;
template struct gnmr::GnmrTriggerT<1>;
template struct gnmr::GnmrTriggerT<64>;
template struct gnmr::CalibratedTriggerT<1>;
template struct gnmr::CalibratedTriggerT<64>;
template struct gnmr::Compose<gnmr::ClipToMean, gnmr::ResetMoments>;
template struct gnmr::Compose<gnmr::SkipUnit, gnmr::PromotePrecision, gnmr::GlobalSkip>;
template struct gnmr::detail::LockRules<gnmr::MaxO>;
template struct gnmr::detail::LockRules<gnmr::Unlimited>;
template struct gnmr::detail::CheckPolicies<gnmr::RmsNorm, gnmr::WindowMean<16>,
                                            gnmr::ZScoreTrigger, gnmr::Ladder, gnmr::Unlimited>;

#define GNMR_INSTANTIATE_NORM(N)                                                               \
  template void gnmr::host_unit_partials<N, gnmr::SerialFor>(                                  \
      const gnmr::Segment*, std::size_t, float*, std::size_t, gnmr::Coverage, gnmr::SerialFor&&); \
  template std::vector<float> gnmr::host_unit_partials<N>(const std::vector<gnmr::Segment>&,   \
                                                          std::size_t, gnmr::Coverage);        \
  template std::vector<std::uint64_t> gnmr::unit_numel<N>(const std::vector<gnmr::Segment>&,   \
                                                          std::size_t);
GNMR_INSTANTIATE_NORM(gnmr::L2Norm)
GNMR_INSTANTIATE_NORM(gnmr::RmsNorm)
GNMR_INSTANTIATE_NORM(gnmr::LinfNorm)

int main() { return 0; }
