// gnmr/gnmr.hpp — the whole host side in one include.
//
// Policies, the host GnmrController, peer presets and the runtime facade,
// host norms, the state blob, the event log, the trace format and the
// no-op Reducer. Needs neither CUDA nor MPI: the CUDA backend is
// gnmr/cuda/all.cuh, the MPI reducer gnmr/comm/mpi.hpp.
#pragma once

#include "gnmr/comm/reducer.hpp"
#include "gnmr/config.hpp"
#include "gnmr/core/types.hpp"
#include "gnmr/host/controller.hpp"
#include "gnmr/host/dyn_controller.hpp"
#include "gnmr/host/layered.hpp"
#include "gnmr/host/unit_norms.hpp"
#include "gnmr/io/state.hpp"
#include "gnmr/io/telemetry.hpp"
#include "gnmr/io/trace.hpp"
#include "gnmr/policy/budget.hpp"
#include "gnmr/policy/mean.hpp"
#include "gnmr/policy/mean_peers.hpp"
#include "gnmr/policy/norm.hpp"
#include "gnmr/policy/recovery.hpp"
#include "gnmr/policy/recovery_ladder.hpp"
#include "gnmr/policy/recovery_norm_replace.hpp"
#include "gnmr/policy/trigger.hpp"
#include "gnmr/policy/trigger_zscore.hpp"
#include "gnmr/presets/make.hpp"
