// gnmr/gnmr.hpp — the whole host side in one include.
//
// Policies, the host GnmrController, peer presets and the runtime facade,
// host norms, the state blob, the event log, the trace format and the
// no-op Reducer. Needs neither CUDA nor MPI: the CUDA backend is
// gnmr/cuda/all.cuh, the MPI reducer gnmr/mpi/reducer.hpp.
#pragma once

#include "gnmr/config.hpp"
#include "gnmr/controller.hpp"
#include "gnmr/dyn.hpp"
#include "gnmr/host/norms.hpp"
#include "gnmr/policy/budget.hpp"
#include "gnmr/policy/ladder.hpp"
#include "gnmr/policy/mean.hpp"
#include "gnmr/policy/mean_var.hpp"
#include "gnmr/policy/norm.hpp"
#include "gnmr/policy/recovery.hpp"
#include "gnmr/policy/stabilizer.hpp"
#include "gnmr/policy/trigger.hpp"
#include "gnmr/policy/zscore.hpp"
#include "gnmr/presets.hpp"
#include "gnmr/reducer.hpp"
#include "gnmr/state.hpp"
#include "gnmr/telemetry.hpp"
#include "gnmr/trace.hpp"
#include "gnmr/types.hpp"
