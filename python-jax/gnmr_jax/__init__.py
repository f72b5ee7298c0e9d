"""gnmr for JAX: gnmr's controller as optax transformations, over the same
header-only C++ core as the torch package, running inside the compiled step
through XLA's FFI (docs/jax.md).

    import gnmr_jax, optax
    tx = optax.chain(gnmr_jax.guard(), optax.adamw(1e-3))     # any optimizer after it
    tx = gnmr_jax.adamw(1e-3)                                 # or the guarded AdamW (skips, resets moments)

Public names: guard, adamw, GuardState, AdamWState, find_state, steps_done,
presets, preset_overrides, is_global, Flag, controller_step, unit_partials,
cuda_built, __version__.
"""
from __future__ import annotations

from typing import Any, Tuple

import jax
import jax.numpy as jnp

from . import _ffi, _units
from ._ffi import COUNT_FIELDS, VALUE_FIELDS, Flag
from .adamw import AdamWState, adamw
from .guard import Guard, GuardState, controller_step, find_state, fresh_state, guard, steps_done

__version__ = _ffi.version()


def presets() -> Tuple[str, ...]:
    """Every preset name the C++ library knows (gnmr::presets::names(),
    "default" last)."""
    return _ffi.presets()


def preset_overrides(preset: str) -> Tuple[str, ...]:
    """The overrides `preset` takes; ValueError for an unknown name."""
    return _ffi.preset_info(preset)[1]


def is_global(preset: str) -> bool:
    """True for presets whose rule is on the global norm (clip, zclip,
    skip-step): their guard has one unit, "global", over every leaf."""
    return _ffi.preset_info(preset)[0]


def cuda_built() -> bool:
    """Whether the CUDA handler was built and registered (setup.py)."""
    return _ffi.CUDA_BUILT


def unit_partials(tree: Any, units: _units.Units = None, preset: str = "default", *,
                  axis_name: Any = None, param_specs: Any = None) -> jnp.ndarray:
    """float32[N]: each unit's sum of squares of `tree` (gradients), as the
    guard computes it (inside jit or not)."""
    layout = _units.resolve(tree, units, is_global(preset))
    leaves = jax.tree_util.tree_leaves(tree)
    return _units.unit_partials(layout, leaves, _units.leaf_axes(layout, axis_name, param_specs))


__all__ = ["guard", "adamw", "Guard", "GuardState", "AdamWState", "find_state", "steps_done", "presets",
           "preset_overrides", "is_global", "Flag", "controller_step", "fresh_state", "unit_partials",
           "cuda_built", "COUNT_FIELDS", "VALUE_FIELDS", "__version__"]
