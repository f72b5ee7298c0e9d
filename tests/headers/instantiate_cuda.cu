// tests/headers: the CUDA templates a user instantiates, compiled by nvcc
// under the strict warnings of the header check (-Werror all-warnings, the
// host flags through -Xcompiler): device controllers with every policy kind
// (which also instantiates their kernels and the policy_check.cuh probe),
// the norm kernels for every norm, the telemetry drain and the summary ring.
// Compiling a header alone checks a template's body only once it is
// instantiated. Not all.cuh: presets.cuh instantiates a device controller
// per preset, the costliest nvcc compile of the check, which
// headers.nvcc.gnmr/cuda/presets.cuh already pays once.
#include <gnmr/cuda/accessors.cuh>
#include <gnmr/cuda/adamw.cuh>
#include <gnmr/cuda/controller.cuh>
#include <gnmr/cuda/summary_ring.cuh>
#include <gnmr/cuda/telemetry.cuh>
#include <gnmr/cuda/unit_norms.cuh>
#include <gnmr/policy/mean_peers.hpp>
#include <gnmr/policy/recovery_ladder.hpp>
#include <gnmr/policy/recovery_norm_replace.hpp>
#include <gnmr/policy/trigger_calibrated.hpp>
#include <gnmr/policy/trigger_zscore.hpp>

template class gnmr::cuda::DeviceController<>;
template class gnmr::cuda::DeviceController<gnmr::RmsNorm, gnmr::WindowMean<32>,
                                            gnmr::ZScoreTrigger, gnmr::Ladder, gnmr::Unlimited>;
template class gnmr::cuda::DeviceController<gnmr::LinfNorm, gnmr::EmaMeanVar,
                                            gnmr::FixedThreshold,
                                            gnmr::Compose<gnmr::ClipToTarget, gnmr::ResetMoments>,
                                            gnmr::MaxO>;
template class gnmr::cuda::DeviceController<gnmr::L2Norm, gnmr::EmaMean, gnmr::CalibratedTriggerT<16>,
                                            gnmr::ClipToMean, gnmr::MaxO>;
template class gnmr::cuda::DeviceController<gnmr::L2Norm, gnmr::EmaSquareMean,
                                            gnmr::AlwaysTrigger, gnmr::NormReplace,
                                            gnmr::Unlimited>;
template cudaError_t gnmr::cuda::unit_partials<gnmr::L2Norm>(const gnmr::cuda::NormPlan&, float*,
                                                             cudaStream_t);
template cudaError_t gnmr::cuda::unit_partials<gnmr::RmsNorm>(const gnmr::cuda::NormPlan&, float*,
                                                              cudaStream_t);
template cudaError_t gnmr::cuda::unit_partials<gnmr::LinfNorm>(const gnmr::cuda::NormPlan&,
                                                               float*, cudaStream_t);
template class gnmr::cuda::SummaryRing<>;
template class gnmr::cuda::SummaryRing<gnmr::UnitReport>;
template void gnmr::cuda::TelemetryDrain::record<gnmr::cuda::DeviceController<>>(
    const gnmr::cuda::DeviceController<>&, gnmr::EventLog&, cudaStream_t, const std::string*);

int main() { return 0; }
