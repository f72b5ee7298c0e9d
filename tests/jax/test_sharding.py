"""Sharded parameters on four CPU devices (conftest.py sets
--xla_force_host_platform_device_count=4): every device decides the same,
and what it decides is the C++ controller's on the partials it summed.

- jit with NamedSharding: XLA sums each sharded leaf over its shards
  itself; the state comes out replicated and equal on every device.
- shard_map: each device holds its shards; the guard psums the partials
  over the axes each leaf is sharded on (param_specs) or over axis_name.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import gnmr_jax
from conftest import run_jax_reference, f32_bits

STEPS = 40
PRESET = "default"


def mesh(shape, names):
    return Mesh(np.array(jax.devices()[:4]).reshape(shape), names)


def params0():
    rng = np.random.default_rng(1)
    return {"w1": jnp.asarray(rng.standard_normal((16, 8)), jnp.float32),
            "b1": jnp.asarray(rng.standard_normal(8), jnp.float32),
            "w2": jnp.asarray(rng.standard_normal((8, 12)), jnp.float32)}


def grads_at(t, params):
    rng = np.random.default_rng(500 + t)
    g = jax.tree_util.tree_map(lambda p: np.asarray(0.1 * rng.standard_normal(p.shape), np.float32), params)
    if t == 25:
        g["w1"][3, 2] = np.nan
    if t == 31:
        g["w2"] *= 1000
    return g


def check_against_reference(states, tmp_path, jax_reference):
    """The decisions of each step equal the C++ controller's on the partials
    the step recorded."""
    partials = np.stack([np.asarray(s.partials) for s in states])
    want, blob = run_jax_reference(jax_reference, partials, PRESET, {}, tmp_path)
    for s, (w, scales, flags) in zip(states, want):
        assert [f32_bits(x) for x in np.asarray(s.scale)] == scales
        assert [int(f) for f in np.asarray(s.flags)] == flags
    assert bytes(np.asarray(states[-1].blob)) == blob
    assert any(f & gnmr_jax.Flag.SKIP for _, _, fl in want for f in fl)


def unsharded_partials():
    params = params0()
    return [np.asarray(gnmr_jax.unit_partials(grads_at(t, params))) for t in range(STEPS)]


def test_jit_with_named_sharding_decides_alike_everywhere(tmp_path, jax_reference):
    m = mesh((2, 2), ("data", "model"))
    shard = {"w1": NamedSharding(m, P("data", "model")), "b1": NamedSharding(m, P()),
             "w2": NamedSharding(m, P(None, "model"))}
    params = jax.device_put(params0(), shard)
    tx = gnmr_jax.adamw(1e-3, preset=PRESET)
    st = jax.jit(tx.init)(params)

    @jax.jit
    def step(params, st, g):
        u, st = tx.update(g, st, params)
        return optax.apply_updates(params, u), st
    states = []
    for t in range(STEPS):
        params, st = step(params, st, jax.device_put(grads_at(t, params0()), shard))
        gs = st.guard
        for leaf in gs:  # replicated, and the same bytes on every device
            shards = [np.asarray(s.data).tobytes() for s in leaf.addressable_shards]
            assert len(shards) == 4 and all(x == shards[0] for x in shards[1:])
        states.append(gs)
    assert params["w1"].sharding.spec == P("data", "model")
    check_against_reference(states, tmp_path, jax_reference)
    for s, want in zip(states, unsharded_partials()):
        np.testing.assert_allclose(np.asarray(s.partials), want, rtol=1e-5)
    for x in jax.tree_util.tree_leaves(params):
        assert np.all(np.isfinite(np.asarray(x)))


@pytest.mark.parametrize("how", ["param_specs", "axis_name"])
def test_shard_map_sums_the_partials_over_the_sharded_axes(tmp_path, jax_reference, how):
    if how == "axis_name":
        m = mesh((4,), ("data",))
        specs = {"w1": P("data"), "b1": P("data"), "w2": P("data")}
        kw = {"axis_name": "data"}
    else:
        m = mesh((2, 2), ("data", "model"))
        specs = {"w1": P("data", "model"), "b1": P(), "w2": P(None, "model")}
        kw = {"param_specs": specs}
    tx = optax.chain(gnmr_jax.guard(PRESET, **kw), optax.sgd(1e-2))
    params = jax.device_put(params0(), {k: NamedSharding(m, s) for k, s in specs.items()})
    st = tx.init(params0())

    def local(params, st, g):
        u, st = tx.update(g, st, params)
        gs = gnmr_jax.find_state(st)
        # Every device's copy of the new state, gathered to compare them.
        return optax.apply_updates(params, u), st, gs.blob[None], gs.flags[None]

    state_specs = jax.tree_util.tree_map(lambda _: P(), st)
    every = P(m.axis_names)
    fn = jax.jit(jax.shard_map(local, mesh=m, in_specs=(specs, state_specs, specs),
                               out_specs=(specs, state_specs, every, every)))
    states = []
    for t in range(STEPS):
        g = jax.device_put(grads_at(t, params0()), {k: NamedSharding(m, s) for k, s in specs.items()})
        params, st, blobs, flags = fn(params, st, g)
        blobs, flags = np.asarray(blobs), np.asarray(flags)
        assert blobs.shape[0] == 4 and all(np.array_equal(blobs[0], b) for b in blobs[1:])
        assert all(np.array_equal(flags[0], f) for f in flags[1:])
        states.append(gnmr_jax.find_state(st))
    check_against_reference(states, tmp_path, jax_reference)
    for s, want in zip(states, unsharded_partials()):
        np.testing.assert_allclose(np.asarray(s.partials), want, rtol=1e-5)


def test_param_specs_must_match_the_tree():
    with pytest.raises(ValueError, match="param_specs has 1 entries for 3 leaves"):
        gnmr_jax.guard(param_specs={"w1": P("data")}).update(params0(), gnmr_jax.guard().init(params0()))
    with pytest.raises(ValueError, match="not both"):
        gnmr_jax.guard(axis_name="data", param_specs={"a": P()}).update(params0(), gnmr_jax.guard().init(params0()))


def test_explicit_sharding_under_set_mesh():
    """JAX's explicit sharding mode (jax.make_mesh's default axis types,
    jax.set_mesh): the same step, the parameters keep their specs."""
    m = jax.make_mesh((4,), ("data",), devices=jax.devices()[:4])
    with jax.set_mesh(m):
        spec = {k: P("data") if k == "w1" else P() for k in params0()}
        params = {k: jax.device_put(v, spec[k]) for k, v in params0().items()}
        tx = gnmr_jax.adamw(1e-3, preset=PRESET)
        st = jax.jit(tx.init)(params)

        @jax.jit
        def step(params, st, g):
            u, st = tx.update(g, st, params)
            return optax.apply_updates(params, u), st
        for t in range(3):
            g = {k: jax.device_put(v, spec[k]) for k, v in grads_at(t, params0()).items()}  # as the params
            params, st = step(params, st, g)
    assert int(st.guard.counts[0]) == 3 and params["w1"].sharding.spec[0] == "data"
    np.testing.assert_allclose(np.asarray(st.guard.partials), unsharded_partials()[2], rtol=1e-5)
