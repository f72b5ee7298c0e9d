// gnmr/cuda/all.cuh — the whole CUDA backend in one include: per-unit norms
// (unit_norms.cuh), the device controller (controller.cuh) and the presets
// by name on the device (presets.cuh), the guarded fused AdamW (adamw.cuh),
// the accessors for a user's own optimizer kernel (accessors.cuh), the
// sync-free telemetry drain (telemetry.cuh), the step summary read on the
// host without a sync (summary_ring.cuh), and the plumbing they share:
// errors (error.cuh), setup-time memory (memory.cuh), what crosses blocks
// and launches (grid.cuh) and the block-level collectives (block.cuh).
// Include from .cu files compiled by nvcc. (The NCCL reducer,
// gnmr/comm/nccl.cuh, needs nccl.h: include it on its own.)
#pragma once

#include "gnmr/cuda/accessors.cuh"
#include "gnmr/cuda/adamw.cuh"
#include "gnmr/cuda/block.cuh"
#include "gnmr/cuda/controller.cuh"
#include "gnmr/cuda/dyn_controller.cuh"
#include "gnmr/cuda/error.cuh"
#include "gnmr/cuda/fused_partials.cuh"
#include "gnmr/cuda/grid.cuh"
#include "gnmr/cuda/layered.cuh"
#include "gnmr/cuda/layered_fused.cuh"
#include "gnmr/cuda/memory.cuh"
#include "gnmr/cuda/presets.cuh"
#include "gnmr/cuda/state_stage.cuh"
#include "gnmr/cuda/summary_ring.cuh"
#include "gnmr/cuda/telemetry.cuh"
#include "gnmr/cuda/unit_norms.cuh"
