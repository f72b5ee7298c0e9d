"""gnmr_jax.adamw: optax's AdamW with the guard inside its update, so that a
unit's decision reaches its moments (what a chain cannot do: a
transformation after the guard only sees gradients).

As gnmr.optim.AdamW and gnmr::HostAdamW (include/gnmr/optim/adamw.hpp):
  SKIP           the unit's update is zero and its moments and its
                 bias-correction count stay as they were (selects: a NaN
                 gradient there reaches nothing);
  RESET_MOMENTS  its moments restart from zero and its count from 0, as a
                 fresh optimizer's;
  scale          multiplies the gradient before both moments.
Everything else is optax.adamw's arithmetic, expression for expression
(scale_by_adam, add_decayed_weights, scale_by_learning_rate), with the
bias-correction count kept per unit: when the guard does not act the
updates are optax.adamw's (tests/jax/test_adamw.py).
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
import optax

from . import _units
from ._ffi import Flag
from .guard import DEFAULT_PRESET, Guard, GuardState, _check_preset, controller_step, fresh_state

ScalarOrSchedule = Union[float, Callable[[jax.Array], jax.Array]]


class AdamWState(NamedTuple):
    """gnmr_jax.adamw's state: arrays only.

    guard: the controller's GuardState (blob, latest decisions, summary);
    count: int32[N], each unit's bias-correction step (optax keeps one for all);
    mu, nu: the moments, trees like the parameters;
    step:  int32[], updates taken (the learning-rate schedule's argument).
    """
    guard: GuardState
    count: jax.Array
    mu: Any
    nu: Any
    step: jax.Array


def adamw(learning_rate: ScalarOrSchedule, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
          eps_root: float = 0.0, weight_decay: ScalarOrSchedule = 1e-4,
          mask: Optional[Union[Any, Callable[[Any], Any]]] = None, *, preset: str = DEFAULT_PRESET,
          units: _units.Units = None, axis_name: Any = None, param_specs: Any = None,
          **overrides: Any) -> Guard:
    """optax.adamw's signature and defaults, guarded by gnmr's controller.

    learning_rate, b1, b2, eps, eps_root, weight_decay, mask: optax.adamw's
    (a schedule is called with the number of updates taken). preset, units,
    axis_name, param_specs, **overrides: gnmr_jax.guard's.

    The parameters must be given to update() (weight decay, as optax's).
    Returns a Guard whose state is an AdamWState.
    """
    is_global, options = _check_preset(preset, overrides)
    if not 0.0 <= b1 < 1.0 or not 0.0 <= b2 < 1.0 or eps < 0:
        raise ValueError(f"gnmr_jax.adamw: need 0 <= b1, b2 < 1 and eps >= 0 (b1={b1}, b2={b2}, eps={eps})")
    axes_cache: dict = {}

    def init_fn(params: Any) -> AdamWState:
        layout = _units.resolve(params, units, is_global)
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        return AdamWState(guard=fresh_state(preset, options, len(layout.names)),
                          count=jnp.zeros((len(layout.names),), jnp.int32), mu=zeros,
                          nu=jax.tree_util.tree_map(jnp.zeros_like, params), step=jnp.zeros((), jnp.int32))

    def update_fn(updates: Any, state: AdamWState, params: Optional[Any] = None, **extra: Any):
        del extra
        if not isinstance(state, AdamWState):
            raise TypeError(f"gnmr_jax.adamw: the state must be an AdamWState, got {type(state).__name__}")
        if params is None:
            raise ValueError("gnmr_jax.adamw: update() needs the parameters (weight decay), as optax.adamw's")
        layout = _units.resolve(updates, units, is_global)
        if len(layout.names) != state.count.shape[0]:
            raise ValueError(f"gnmr_jax.adamw: the updates have {len(layout.names)} units, the state "
                             f"{state.count.shape[0]}")
        g_leaves = jax.tree_util.tree_leaves(updates)
        p_leaves = _units.check_tree(layout, params, "params")
        mu_leaves = _units.check_tree(layout, state.mu, "first moment")
        nu_leaves = _units.check_tree(layout, state.nu, "second moment")
        if layout.treedef not in axes_cache:
            axes_cache[layout.treedef] = _units.leaf_axes(layout, axis_name, param_specs)
        partials = _units.unit_partials(layout, g_leaves, axes_cache[layout.treedef])
        gs = controller_step(state.guard, partials, preset, options)

        skip = gs.skipped()
        reset = (gs.flags & jnp.uint32(Flag.RESET_MOMENTS)) != 0
        base = jnp.where(reset, jnp.zeros_like(state.count), state.count)
        count = jnp.where(skip, state.count, optax.safe_increment(base))
        lr = learning_rate(state.step) if callable(learning_rate) else learning_rate
        wd = weight_decay(state.step) if callable(weight_decay) else weight_decay
        decay_mask = mask(params) if callable(mask) else mask
        m_leaves = ([True] * len(p_leaves) if decay_mask is None
                    else _units.check_tree(layout, decay_mask, "weight-decay mask"))

        # A skipped unit keeps its moments without a select on them (a select
        # between the old and the new moments makes XLA's CPU fusions about
        # twice as slow): its gradient is selected to 0 and its moments'
        # coefficients to (0, 1), so m' = 0 * 0 + 1 * m = m exactly (a -0.0
        # moment comes back +0.0: the same value). The
        # other units get optax's constants, as float32, unchanged.
        c1 = jnp.where(skip, jnp.float32(0.0), jnp.float32(1 - b1))
        d1 = jnp.where(skip, jnp.float32(1.0), jnp.float32(b1))
        c2 = jnp.where(skip, jnp.float32(0.0), jnp.float32(1 - b2))
        d2 = jnp.where(skip, jnp.float32(1.0), jnp.float32(b2))
        zero_moments = reset & ~skip  # a skip wins: nothing of the unit changes
        out, mus, nus = [], [], []
        for g, p, m, v, u, use_wd in zip(g_leaves, p_leaves, mu_leaves, nu_leaves, layout.leaf_unit, m_leaves):
            # The gradient in the moments' dtype, scaled (x * 1 == x: calm
            # units are optax's bits), and 0 where skipped: its NaN is never read.
            g = jnp.where(skip[u], jnp.zeros_like(m), g.astype(m.dtype) * gs.scale[u].astype(m.dtype))
            m0 = jnp.where(zero_moments[u], jnp.zeros_like(m), m)
            v0 = jnp.where(zero_moments[u], jnp.zeros_like(v), v)
            # optax.tree.update_moment / update_moment_per_elem_norm (order 2).
            m1 = c1[u].astype(m.dtype) * g + d1[u].astype(m.dtype) * m0
            v1 = c2[u].astype(v.dtype) * (g.conj() * g).real + d2[u].astype(v.dtype) * v0
            # optax.tree.bias_correction, with this unit's count.
            m_hat = m1 / (1 - b1 ** count[u]).astype(m1.dtype)
            v_hat = v1 / (1 - b2 ** count[u]).astype(v1.dtype)
            upd = m_hat / (jnp.sqrt(v_hat + eps_root) + eps)
            if use_wd:
                upd = upd + wd * p                    # optax.add_decayed_weights
            upd = (-1 * lr) * upd                     # optax.scale_by_learning_rate
            upd = upd.astype(p.dtype)
            out.append(jnp.where(skip[u], jnp.zeros_like(upd), upd))
            mus.append(m1)
            nus.append(v1)
        unflat = lambda xs: jax.tree_util.tree_unflatten(layout.treedef, xs)  # noqa: E731
        return unflat(out), AdamWState(guard=gs, count=count, mu=unflat(mus), nu=unflat(nus),
                                       step=optax.safe_increment(state.step))

    tx = Guard(init_fn, update_fn)
    tx.preset, tx.overrides, tx._units, tx._global = preset, dict(overrides), units, is_global
    tx.options = options
    return tx
