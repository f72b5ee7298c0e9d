"""The FFI step and the guard's surface: names and flags from the C++
library, the state's layout, in-place updates, vmap, threads, and every
kind of bad input (a clear error or the documented decision, never a
crash).
"""
from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gnmr_jax
from gnmr_jax import Flag


def step_fn(preset="gnmr", options=""):
    return jax.jit(lambda s, p: gnmr_jax.controller_step(s, p, preset, options))


def test_names_and_flags_come_from_the_library():
    names = gnmr_jax.presets()
    assert names[-1] == "default" and "gnmr" in names and "zclip" in names and len(names) >= 14
    assert gnmr_jax.is_global("clip") and not gnmr_jax.is_global("default")
    assert "tau" in gnmr_jax.preset_overrides("gnmr") and "rate" in gnmr_jax.preset_overrides("default")
    assert all(int(f) > 0 for f in Flag) and len({int(f) for f in Flag}) == len(Flag)
    assert int(Flag.SKIP) == 1 << 6 and int(Flag.PROMOTE) == 1 << 8
    assert gnmr_jax.__version__.count(".") == 2 and not gnmr_jax.cuda_built()
    with pytest.raises(ValueError, match="unknown"):
        gnmr_jax.is_global("nope")

    # The noise floor needs each unit's noise with every step: refused with
    # the reason, before anything is compiled.
    assert "gnmr-noise-floor" in names
    with pytest.raises(ValueError, match="noise"):
        gnmr_jax.fresh_state("gnmr-noise-floor", "", 3)


def test_the_state_is_the_cpp_blob_and_is_updated_in_place():
    s0 = gnmr_jax.fresh_state("gnmr", "", 3)
    assert bytes(np.asarray(s0.blob))[:8] == b"GNMRSTAT" and s0.blob.dtype == jnp.uint8
    assert gnmr_jax.steps_done(s0, "gnmr") == 0
    f = jax.jit(lambda s, p: gnmr_jax.controller_step(s, p, "gnmr", ""), donate_argnums=0)
    ptr = s0.blob.unsafe_buffer_pointer()
    s1 = f(s0, jnp.ones(3))
    assert s1.blob.unsafe_buffer_pointer() == ptr  # aliased and donated: written in place
    assert gnmr_jax.steps_done(s1, "gnmr") == 1 and int(s1.summary()["step"]) == 1
    assert s1.summary().keys() == set(gnmr_jax.COUNT_FIELDS) | set(gnmr_jax.VALUE_FIELDS)


def test_vmap_and_threads_step_independent_controllers():
    s = gnmr_jax.fresh_state("gnmr", "", 4)
    batch = jax.tree_util.tree_map(lambda x: jnp.stack([x] * 3), s)
    parts = jnp.asarray(np.random.default_rng(0).uniform(1, 2, (3, 4)), jnp.float32)
    out = jax.vmap(lambda s, p: gnmr_jax.controller_step(s, p, "gnmr", ""))(batch, parts)
    one = [step_fn()(s, parts[i]) for i in range(3)]
    for i in range(3):
        assert np.array_equal(np.asarray(out.blob[i]), np.asarray(one[i].blob))
    # Concurrent calls each get a pooled controller of their own.
    results = [None] * 8
    f = step_fn()

    def work(i):
        st = s
        for _ in range(20):
            st = f(st, parts[i % 3])
        results[i] = np.asarray(st.blob)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for i in range(8):
        assert np.array_equal(results[i], results[i % 3])


def test_interleaved_states_through_one_controller_step_as_if_alone():
    # The handler skips the load when it is given the blob it saved last (a
    # loop); two runs interleaved through one compiled step, and a restore of
    # an older state, must each give what they give alone.
    rng = np.random.default_rng(3)
    parts = jnp.asarray(rng.uniform(1, 2, (40, 5)) * (1 + 30 * (rng.random((40, 5)) < 0.05)), jnp.float32)
    f = step_fn("default")
    alone = []
    for k in range(2):
        st = gnmr_jax.fresh_state("default", "", 5)
        for t in range(20):
            st = f(st, parts[2 * t + k])
        alone.append(np.asarray(st.blob))
    a = b = gnmr_jax.fresh_state("default", "", 5)
    kept = None
    for t in range(20):
        a = f(a, parts[2 * t])
        b = f(b, parts[2 * t + 1])
        if t == 9:
            kept = a
    assert np.array_equal(np.asarray(a.blob), alone[0]) and np.array_equal(np.asarray(b.blob), alone[1])
    for t in range(10, 20):
        kept = f(kept, parts[2 * t])
    assert np.array_equal(np.asarray(kept.blob), alone[0])


def test_a_corrupted_or_foreign_state_is_an_error_with_the_message():
    s = gnmr_jax.fresh_state("gnmr", "", 3)
    bad = s._replace(blob=s.blob.at[100].add(1))
    with pytest.raises(Exception, match="checksum mismatch"):
        step_fn()(bad, jnp.ones(3)).blob.block_until_ready()
    with pytest.raises(ValueError, match="checksum mismatch"):
        gnmr_jax.steps_done(bad, "gnmr")
    other = gnmr_jax.fresh_state("zclip", "", 3)  # another preset, another size
    with pytest.raises(Exception, match="gnmr_jax"):
        step_fn()(other._replace(scale=s.scale, flags=s.flags), jnp.ones(3)).blob.block_until_ready()
    same_size = gnmr_jax.fresh_state("gnmr-clip", "", 3)
    if same_size.blob.shape == s.blob.shape:
        with pytest.raises(Exception, match="load_state"):
            step_fn()(same_size, jnp.ones(3)).blob.block_until_ready()
    # The process is still fine: a good state steps.
    assert int(step_fn()(s, jnp.ones(3)).counts[0]) == 1


def test_bad_partials_and_settings_are_clear_errors():
    s = gnmr_jax.fresh_state("gnmr", "", 3)
    with pytest.raises(ValueError, match="float32\\[3\\]"):
        step_fn()(s, jnp.ones(4))
    with pytest.raises(ValueError, match="float32"):
        step_fn()(s, jnp.ones(3, jnp.int32))
    with pytest.raises(ValueError, match="unknown"):
        gnmr_jax.guard("nope")
    with pytest.raises(ValueError, match="unknown override 'taux'"):
        gnmr_jax.guard("gnmr", taux=2.0)
    with pytest.raises(ValueError):
        gnmr_jax.guard("gnmr", tau=-1.0)
    with pytest.raises(ValueError):
        gnmr_jax.guard("zclip", tau=2.0)  # an override the preset has no use for
    with pytest.raises(TypeError):
        gnmr_jax.guard("gnmr", tau=True)


def test_non_finite_and_zero_partials_get_the_documented_decision():
    s = gnmr_jax.fresh_state("gnmr", "", 4)
    f = step_fn()
    for _ in range(5):
        s = f(s, jnp.ones(4))
    s = f(s, jnp.asarray([jnp.nan, jnp.inf, 0.0, -1.0], jnp.float32))
    flags = np.asarray(s.flags)
    for u in (0, 1, 3):  # NaN, Inf, and a negative partial (its sqrt is NaN)
        assert flags[u] & Flag.NONFINITE and flags[u] & Flag.SKIP
    assert flags[2] & Flag.ZERO_NORM and not flags[2] & Flag.SKIP
    assert int(s.summary()["nonfinite"]) == 3


def tree():
    return {"enc": {"w": jnp.ones((4, 3)), "b": jnp.ones(3)}, "dec": {"w": jnp.ones((3, 2))}}


def test_units_by_leaf_by_pattern_and_by_function():
    g = gnmr_jax.guard()
    assert g.unit_names(tree()) == ("dec/w", "enc/b", "enc/w")
    g = gnmr_jax.guard(units={"encoder": "enc/*", "rest": "*"})
    assert g.unit_names(tree()) == ("encoder", "rest")
    assert g.layout(tree()).leaf_unit == (1, 0, 0)
    g = gnmr_jax.guard(units=lambda p: p.split("/")[0])
    assert g.unit_names(tree()) == ("dec", "enc")
    assert gnmr_jax.guard("clip").unit_names(tree()) == ("global",)
    st = g.init(tree())
    assert st.scale.shape == (2,)


def test_trees_that_do_not_match_the_units_are_errors():
    with pytest.raises(ValueError, match="belong to no unit: dec/w"):
        gnmr_jax.guard(units={"encoder": "enc/*"}).init(tree())
    with pytest.raises(ValueError, match="units with no leaf: x"):
        gnmr_jax.guard(units={"x": "nothing/*", "all": "*"}).init(tree())
    g = gnmr_jax.guard()
    st = g.init(tree())
    smaller = {"enc": tree()["enc"]}
    with pytest.raises(ValueError, match="2 units, the state 3"):
        g.update(smaller, st)
    with pytest.raises(TypeError, match="int32"):
        g.init({"a": jnp.ones(3, jnp.int32)})
    with pytest.raises(ValueError, match="no array leaves"):
        g.init({})
    with pytest.raises(TypeError, match="GuardState"):
        g.update(tree(), (st,))


def test_a_skipped_unit_gets_zeros_by_a_select_and_nan_never_reaches_the_weights():
    params = tree()
    guard = gnmr_jax.guard("gnmr")
    tx = optax.chain(guard, optax.adamw(1e-2))
    st = tx.init(params)

    @jax.jit
    def step(params, st, grads):
        u, st = tx.update(grads, st, params)
        return optax.apply_updates(params, u), st, u
    grads = jax.tree_util.tree_map(lambda x: 0.1 * x, params)
    for _ in range(3):
        params, st, _ = step(params, st, grads)
    bad = {"enc": {"w": grads["enc"]["w"].at[0, 0].set(jnp.nan), "b": grads["enc"]["b"]}, "dec": grads["dec"]}
    g_out, _ = jax.jit(guard.update)(bad, st[0])       # the guard alone
    assert np.all(np.asarray(g_out["enc"]["w"]) == 0) and np.all(np.isfinite(np.asarray(g_out["enc"]["b"])))
    params, st, u = step(params, st, bad)
    # After the guard, optax.adamw moves a skipped unit by its momentum only:
    # finite (gnmr_jax.adamw leaves it still).
    assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree_util.tree_leaves(u))
    assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree_util.tree_leaves(params))
    gs = gnmr_jax.find_state(st)
    names = gnmr_jax.guard().unit_names(params)
    assert bool(gs.skipped()[names.index("enc/w")]) and not bool(gs.skipped()[names.index("enc/b")])


def test_low_precision_gradients_are_read_in_float32():
    params = {"w": jnp.ones((8,), jnp.bfloat16), "v": jnp.ones((4,), jnp.float16)}
    g = gnmr_jax.guard("gnmr")
    st = g.init(params)
    out, st = jax.jit(g.update)(params, st)
    assert out["w"].dtype == jnp.bfloat16 and out["v"].dtype == jnp.float16
    assert np.allclose(np.asarray(gnmr_jax.unit_partials(params)), [4.0, 8.0])
