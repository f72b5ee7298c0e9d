"""gnmr_jax.adamw: optax.adamw's updates when the guard does not act; a
skipped unit's weights, moments and count untouched; a reset unit restarts
from zero moments and count 1, as a fresh optimizer.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gnmr_jax
from gnmr_jax import Flag


def params0():
    rng = np.random.default_rng(0)
    return {"a": jnp.asarray(rng.standard_normal((8, 5)), jnp.float32),
            "b": jnp.asarray(rng.standard_normal(5), jnp.float32),
            "c": jnp.asarray(rng.standard_normal((5, 3)), jnp.float32)}


def grads_at(t, params):
    rng = np.random.default_rng(100 + t)
    return jax.tree_util.tree_map(lambda p: jnp.asarray(0.1 * rng.standard_normal(p.shape), jnp.float32), params)


def run(tx, steps, faults=None):
    params = params0()
    st = tx.init(params)

    @jax.jit
    def step(params, st, g):
        u, st = tx.update(g, st, params)
        return optax.apply_updates(params, u), st, u
    hist = []
    for t in range(steps):
        g = grads_at(t, params)
        if faults and t in faults:
            g = faults[t](g)
        params, st, u = step(params, st, g)
        hist.append((params, st, u))
    return hist


@pytest.mark.parametrize("preset", ["none", "gnmr"])
def test_calm_steps_are_optax_adamw(preset):
    kw = dict(learning_rate=3e-3, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1)
    ours = run(gnmr_jax.adamw(**kw, preset=preset), 25)
    ref = run(optax.adamw(**kw), 25)
    for (p1, s1, u1), (p2, _, u2) in zip(ours, ref):
        # Within fp32 rounding: the arithmetic is optax's expression for
        # expression, but XLA fuses the two programs differently and may
        # contract a*b+c into an FMA in one and not the other; an update is
        # a difference of two terms (Adam's and the decay's), so its
        # relative error can reach a few ulps of the larger term.
        for x, y in zip(jax.tree_util.tree_leaves(u1), jax.tree_util.tree_leaves(u2)):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=3e-3 * 1e-6)
        for x, y in zip(jax.tree_util.tree_leaves(p1), jax.tree_util.tree_leaves(p2)):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-7)
        assert int(np.asarray(s1.guard.flags).max() & (Flag.SKIP | Flag.TRIGGERED)) == 0


def test_a_schedule_and_a_mask_are_optax_adamw_too():
    sched = optax.linear_schedule(1e-2, 1e-3, 10)
    mask = {"a": True, "b": False, "c": True}
    ours = run(gnmr_jax.adamw(sched, weight_decay=0.05, mask=mask, preset="none"), 12)
    ref = run(optax.adamw(sched, weight_decay=0.05, mask=mask), 12)
    for x, y in zip(jax.tree_util.tree_leaves(ours[-1][0]), jax.tree_util.tree_leaves(ref[-1][0])):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6)


def test_a_skipped_unit_is_untouched_and_nan_reaches_nothing():
    nan_b = lambda g: {**g, "b": g["b"].at[2].set(jnp.nan)}  # noqa: E731
    hist = run(gnmr_jax.adamw(1e-2, preset="gnmr"), 8, faults={5: nan_b})
    (p4, s4, _), (p5, s5, u5) = hist[4], hist[5]
    names = ("a", "b", "c")
    assert int(s5.guard.flags[names.index("b")]) & Flag.SKIP
    assert np.array_equal(p5["b"], p4["b"]) and np.array_equal(s5.mu["b"], s4.mu["b"])
    assert np.array_equal(s5.nu["b"], s4.nu["b"]) and np.all(np.asarray(u5["b"]) == 0)
    assert int(s5.count[1]) == int(s4.count[1]) and int(s5.count[0]) == int(s4.count[0]) + 1
    assert not np.array_equal(p5["a"], p4["a"])
    for p, s, u in hist:
        for x in jax.tree_util.tree_leaves((p, s.mu, s.nu, u)):
            assert np.all(np.isfinite(np.asarray(x)))


def test_a_reset_unit_restarts_as_a_fresh_optimizer():
    # spam's timer resets every unit's moments on its restart steps.
    hist = run(gnmr_jax.adamw(1e-2, b1=0.9, b2=0.99, preset="spam", restart_every=6, warmup=2), 9)
    resets = [t for t, (_, s, _) in enumerate(hist) if int(s.guard.flags[0]) & Flag.RESET_MOMENTS]
    assert resets, "the timer reset nothing"
    t = resets[0]
    prev, (_, s, _) = hist[t - 1][1], hist[t]
    g = grads_at(t, hist[t - 1][0])
    scale = float(s.guard.scale[0])
    assert int(s.count[0]) == 1 and int(prev.count[0]) > 1
    np.testing.assert_allclose(np.asarray(s.mu["a"]), (1 - 0.9) * np.asarray(g["a"]) * scale, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(s.nu["a"]), (1 - 0.99) * (np.asarray(g["a"]) * scale) ** 2, rtol=1e-5)


def test_adamw_needs_params_and_a_matching_state():
    tx = gnmr_jax.adamw(1e-3)
    st = tx.init(params0())
    with pytest.raises(ValueError, match="needs the parameters"):
        tx.update(params0(), st)
    with pytest.raises(ValueError):
        gnmr_jax.adamw(1e-3, b1=1.5)
    with pytest.raises(ValueError, match="params tree does not match"):
        tx.update(params0(), st, {"a": params0()["a"], "b": params0()["b"], "d": params0()["c"]})
