// tests/headers: the host controllers, the state blob, the event log and the
// reducer wrapper, instantiated with every shipped policy kind, compiled
// under the strict warnings of the header check (see instantiate_policies.cpp
// for why instantiation matters).
#include <gnmr/gnmr.hpp>

namespace {
using Default = gnmr::GnmrController<>;
using Other = gnmr::GnmrController<gnmr::RmsNorm, gnmr::WindowMean<32>, gnmr::ZScoreTrigger,
                                   gnmr::Ladder, gnmr::Unlimited>;
using Peer = gnmr::GnmrController<gnmr::LinfNorm, gnmr::EmaMeanVar, gnmr::FixedThreshold,
                                  gnmr::Compose<gnmr::ClipToTarget, gnmr::ResetMoments>,
                                  gnmr::MaxO>;
using Spam = gnmr::GnmrController<gnmr::L2Norm, gnmr::EmaSquareMean, gnmr::AlwaysTrigger,
                                  gnmr::NormReplace, gnmr::Unlimited>;
}  // namespace

template class gnmr::GnmrController<>;
template class gnmr::GnmrController<gnmr::RmsNorm, gnmr::WindowMean<32>, gnmr::ZScoreTrigger,
                                    gnmr::Ladder, gnmr::Unlimited>;
template class gnmr::GnmrController<gnmr::LinfNorm, gnmr::EmaMeanVar, gnmr::FixedThreshold,
                                    gnmr::Compose<gnmr::ClipToTarget, gnmr::ResetMoments>,
                                    gnmr::MaxO>;
template class gnmr::GnmrController<gnmr::L2Norm, gnmr::EmaSquareMean, gnmr::AlwaysTrigger,
                                    gnmr::NormReplace, gnmr::Unlimited>;
template class gnmr::GnmrController<gnmr::L2Norm, gnmr::MinSeededEma, gnmr::GnmrTrigger,
                                    gnmr::GlobalSkip, gnmr::Unlimited>;
template class gnmr::ReducedController<Default, gnmr::NoReduce>;
template std::vector<std::uint8_t> gnmr::save_state<Other>(const Other&);
template void gnmr::load_state<Peer>(Peer&, const std::vector<std::uint8_t>&);
template std::size_t gnmr::EventLog::write_from<Spam>(const Spam&, const std::vector<std::string>&);

int main() { return 0; }
