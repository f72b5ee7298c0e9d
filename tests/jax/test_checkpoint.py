"""Checkpoints: the optimizer state is a pytree of arrays, so orbax saves
and restores it like the parameters, and a run stopped, checkpointed,
restored into fresh objects and continued ends bit for bit where the
uninterrupted run does (parameters, moments, the guard's blob, decisions).
The guard's blob in the checkpoint is the C++ controller's state blob.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

import gnmr_jax

STEPS = 30


def params0():
    rng = np.random.default_rng(2)
    return {"dense": {"kernel": jnp.asarray(rng.standard_normal((12, 6)), jnp.float32),
                      "bias": jnp.zeros(6, jnp.float32)},
            "out": {"kernel": jnp.asarray(rng.standard_normal((6, 3)), jnp.float32)}}


def grads_at(t, params):
    rng = np.random.default_rng(900 + t)
    g = jax.tree_util.tree_map(lambda p: np.asarray(0.05 * rng.standard_normal(p.shape), np.float32), params)
    if t in (8, 21):
        g["out"]["kernel"][0, 0] = np.nan if t == 8 else 1e4
    if t == 17:
        g["dense"]["kernel"] *= 300
    return g


def make_tx(kind):
    """(the transformation, the Guard whose state it holds)."""
    if kind == "adamw":
        tx = gnmr_jax.adamw(3e-3, weight_decay=0.01, preset="default", units={"dense": "dense/*", "out": "out/*"})
        return tx, tx
    guard = gnmr_jax.guard("gnmr", tau=2.0)
    return optax.chain(guard, optax.adamw(3e-3)), guard


def train(tx, params, st, start, stop):
    @jax.jit
    def step(params, st, g):
        u, st = tx.update(g, st, params)
        return optax.apply_updates(params, u), st
    for t in range(start, stop):
        params, st = step(params, st, grads_at(t, params))
    return params, st


@pytest.mark.parametrize("kind", ["adamw", "chain"])
def test_a_resumed_run_equals_the_uninterrupted_one(tmp_path, kind):
    tx, _ = make_tx(kind)
    full_p, full_s = train(tx, params0(), tx.init(params0()), 0, STEPS)

    half = STEPS // 2
    p, s = train(tx, params0(), tx.init(params0()), 0, half)
    ckpt = ocp.StandardCheckpointer()
    ckpt.save(tmp_path / "ckpt", {"params": p, "opt_state": s})
    ckpt.wait_until_finished()
    del p, s

    tx2, guard2 = make_tx(kind)  # a fresh process would build everything anew
    abstract = jax.eval_shape(lambda: {"params": params0(), "opt_state": tx2.init(params0())})
    restored = ocp.StandardCheckpointer().restore(tmp_path / "ckpt", abstract)
    gs = gnmr_jax.find_state(restored["opt_state"])
    assert gnmr_jax.steps_done(gs, guard2) == half
    p, s = train(tx2, restored["params"], restored["opt_state"], half, STEPS)

    for a, b in zip(jax.tree_util.tree_leaves((full_p, full_s)), jax.tree_util.tree_leaves((p, s))):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    g = gnmr_jax.find_state(s)
    # The C++ blob: a state blob ("GNMRSTAT"), or a layered controller's
    # pair of them ("GNML", the default preset).
    assert int(g.summary()["step"]) == STEPS and bytes(np.asarray(g.blob))[:4] in (b"GNMR", b"GNML")


def test_a_checkpoint_of_another_preset_is_refused_on_the_host():
    tx, _ = make_tx("chain")
    st = gnmr_jax.find_state(tx.init(params0()))
    assert gnmr_jax.steps_done(st, "gnmr", tau=3.0) == 0  # other overrides: a retune on resume
    with pytest.raises(ValueError, match="load_state"):
        gnmr_jax.steps_done(st, "gnmr-ladder")
