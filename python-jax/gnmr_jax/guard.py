"""gnmr_jax.guard: the controller as an optax gradient transformation.

    tx = optax.chain(gnmr_jax.guard(), optax.adamw(1e-3))

Inside the same jit as the rest of the update: each unit's sum of squares
(_units.py), one controller step (the C++ core through XLA's FFI,
_ffi.py), and the decisions applied to the gradients by a select: a
skipped unit's gradient becomes zeros (its NaN is never read, never
multiplied by 0), a clipped one is scaled. Its state (GuardState) is a
pytree of arrays whose `blob` holds exactly the C++ controller's save()
bytes, so a checkpoint of it is a C++ state blob.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from . import _ffi, _units
from ._ffi import COUNT_FIELDS, VALUE_FIELDS, Flag

DEFAULT_PRESET = "default"


class GuardState(NamedTuple):
    """The guard's state: arrays only (jit, donation, orbax).

    blob:   uint8[B], the C++ controller's state blob (DynController::save():
            every mean, statistic, lock and the step count).
    scale:  float32[N], the latest step's decisions: each unit's gradient scale;
    flags:  uint32[N], and its flags (Flag; PROMOTE: run its operator in high
            precision at the next forward).
    counts: int32[10], the latest summary's counts (COUNT_FIELDS);
    values: float32[4], and its floats (VALUE_FIELDS);
    partials: float32[N], the partial sums that step decided on (each unit's
            sum of squares: sqrt gives the norms a gnmr-replay trace holds).
    """
    blob: jax.Array
    scale: jax.Array
    flags: jax.Array
    counts: jax.Array
    values: jax.Array
    partials: jax.Array

    def summary(self) -> dict:
        """The latest step's summary as a dict of scalar arrays (step,
        triggered, granted, ..., max_ratio, total_norm): usable under jit."""
        out = {k: self.counts[i] for i, k in enumerate(COUNT_FIELDS)}
        out.update({k: self.values[i] for i, k in enumerate(VALUE_FIELDS)})
        return out

    def promoted(self) -> jax.Array:
        """bool[N]: the units granted high precision by the latest step."""
        return (self.flags & jnp.uint32(Flag.PROMOTE)) != 0

    def skipped(self) -> jax.Array:
        """bool[N]: the units whose update the latest step skipped (their
        own SKIP flag, or the step's suggested global skip)."""
        return ((self.flags & jnp.uint32(Flag.SKIP)) != 0) | (self.counts[COUNT_FIELDS.index("skip_step")] != 0)


class Guard(optax.GradientTransformationExtraArgs):
    """An optax GradientTransformationExtraArgs (init, update) with the
    guard's configuration: `preset`, `overrides`, and `layout(tree)`, the
    units of a parameter tree (their names: `layout(params).names`)."""

    def layout(self, tree: Any) -> _units.Layout:
        return _units.resolve(tree, self._units, self._global)

    def unit_names(self, tree: Any) -> Tuple[str, ...]:
        return self.layout(tree).names


def fresh_state(preset: str, options: str, num_units: int) -> GuardState:
    blob = np.frombuffer(_ffi.initial_state(preset, options, num_units), dtype=np.uint8)
    return GuardState(blob=jnp.asarray(blob), scale=jnp.ones((num_units,), jnp.float32),
                      flags=jnp.zeros((num_units,), jnp.uint32),
                      counts=jnp.zeros((len(COUNT_FIELDS),), jnp.int32).at[COUNT_FIELDS.index("max_ratio_unit")].set(-1),
                      values=jnp.zeros((len(VALUE_FIELDS),), jnp.float32).at[VALUE_FIELDS.index("systemic_scale")].set(1.0),
                      partials=jnp.zeros((num_units,), jnp.float32))


def controller_step(state: GuardState, partials: jax.Array, preset: str, options: str) -> GuardState:
    """One controller step on per-unit partials (float32[N]) inside a traced
    program. NaN, Inf and 0 are inputs (the unit is flagged NONFINITE and
    skipped, or ZERO_NORM), not errors."""
    partials = jnp.asarray(partials)
    if partials.dtype != jnp.float32 or partials.ndim != 1 or partials.shape[0] != state.scale.shape[0]:
        raise ValueError(f"gnmr_jax: partials must be float32[{state.scale.shape[0]}], got "
                         f"{partials.dtype}{list(partials.shape)}")
    if state.blob.dtype != jnp.uint8 or state.blob.ndim != 1:
        raise ValueError(f"gnmr_jax: the state blob must be uint8[B], got {state.blob.dtype}{list(state.blob.shape)}")
    out = _ffi.step(partials, state.blob, preset, options)
    return GuardState(*out, partials=partials)


def apply_decisions(layout: _units.Layout, leaves: Sequence[Any], state: GuardState) -> list:
    """The gradients after the decisions: zeros for a skipped unit (a
    select: a NaN there is never read), g * scale otherwise (g itself where
    the scale is 1, as x * 1 == x)."""
    skip = state.skipped()
    out = []
    for g, u in zip(leaves, layout.leaf_unit):
        # The product in (at least) float32, rounded once to the gradient's dtype.
        wide = jnp.promote_types(g.dtype, jnp.float32)
        scaled = (g.astype(wide) * state.scale[u].astype(wide)).astype(g.dtype)
        out.append(jnp.where(skip[u], jnp.zeros_like(g), scaled))
    return out


def _check_preset(preset: str, overrides: dict) -> Tuple[bool, str]:
    if not isinstance(preset, str):
        raise TypeError(f"gnmr_jax: preset must be a str, got {type(preset).__name__}")
    is_global, _ = _ffi.preset_info(preset)
    options = _ffi.options_text(overrides)
    _ffi.initial_state(preset, options, 1)  # the C++ checks: unknown override, bad value
    return is_global, options


def guard(preset: str = DEFAULT_PRESET, *, units: _units.Units = None, axis_name: Any = None,
          param_specs: Any = None, **overrides: Any) -> Guard:
    """gnmr's controller as the first link of an optax chain.

    Args:
        preset: a name of gnmr_jax.presets() ("default": the stabilizer with
            GNMR's calibrated promotion inside it; docs/presets.md).
        units: None (one unit per leaf), a mapping unit name -> path
            pattern(s), or a callable path -> unit name (gnmr_jax._units).
        axis_name: inside shard_map, the mesh axis (or axes) over which every
            leaf is sharded: the partial sums are psum'ed over them before
            the step, so every device decides the same. Not needed under
            jit with sharded arrays (XLA sums over the shards itself), nor
            for leaves replicated over the data axes after a pmean.
        param_specs: instead of axis_name, the PartitionSpec of each leaf
            (the shard_map in_specs of the parameters): each leaf's partial
            is summed over the axes its spec names.
        **overrides: the preset's overrides (tau=2.5, max_o=2, rate=1e-3, ...;
            gnmr_jax.preset_overrides(preset)).

    Returns a Guard: init(params) -> GuardState; update(grads, state,
    params=None) -> (guarded grads, GuardState). A plain optax optimizer
    after it sees a skipped unit's gradient as zeros; gnmr_jax.adamw leaves
    a skipped unit's weights and moments untouched and resets moments.

    Raises ValueError (unknown preset or override, a value its policies
    reject) or TypeError here; ValueError/TypeError from init/update for a
    tree that does not match the units or has non-float leaves.
    """
    is_global, options = _check_preset(preset, overrides)
    leaf_axes_cache: dict = {}

    def init_fn(params: Any) -> GuardState:
        layout = _units.resolve(params, units, is_global)
        return fresh_state(preset, options, len(layout.names))

    def update_fn(updates: Any, state: GuardState, params: Optional[Any] = None, **extra: Any):
        del params, extra
        if not isinstance(state, GuardState):
            raise TypeError(f"gnmr_jax: the guard's state must be a GuardState, got {type(state).__name__}")
        layout = _units.resolve(updates, units, is_global)
        if len(layout.names) != state.scale.shape[0]:
            raise ValueError(f"gnmr_jax: the updates have {len(layout.names)} units, the state "
                             f"{state.scale.shape[0]} (a state of another tree or units)")
        leaves = jax.tree_util.tree_leaves(updates)
        key = layout.treedef
        if key not in leaf_axes_cache:
            leaf_axes_cache[key] = _units.leaf_axes(layout, axis_name, param_specs)
        partials = _units.unit_partials(layout, leaves, leaf_axes_cache[key])
        new_state = controller_step(state, partials, preset, options)
        guarded = apply_decisions(layout, leaves, new_state)
        return jax.tree_util.tree_unflatten(layout.treedef, guarded), new_state

    g = Guard(init_fn, update_fn)
    g.preset, g.overrides, g._units, g._global = preset, dict(overrides), units, is_global
    g.options = options
    return g


def find_state(opt_state: Any) -> GuardState:
    """The GuardState inside an optimizer state (a chain's tuple, a
    gnmr_jax.adamw state, optax wrappers); ValueError if there is none or
    several."""
    found = [s for s in jax.tree_util.tree_leaves(opt_state, is_leaf=lambda x: isinstance(x, GuardState))
             if isinstance(s, GuardState)]
    if len(found) != 1:
        raise ValueError(f"gnmr_jax: the optimizer state holds {len(found)} guard states (one expected)")
    return found[0]


def steps_done(state: GuardState, guard_or_preset: Any, **overrides: Any) -> int:
    """Checks a (restored) state blob on the host against a guard and returns
    its step count; ValueError with the library's message for a truncated,
    corrupted or mismatched blob (the handler would fail the same way)."""
    if isinstance(guard_or_preset, Guard):
        preset, options = guard_or_preset.preset, guard_or_preset.options
    else:
        preset, options = guard_or_preset, _ffi.options_text(overrides)
    return _ffi.check_state(preset, options, int(state.scale.shape[0]), np.asarray(state.blob))
