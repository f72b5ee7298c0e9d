"""A Flax MLP whose two linears run an fp8 (float8_e4m3fn) matmul, guarded
by gnmr_jax: one unit per operator, and an operator the controller grants
high precision (its PROMOTE flag) runs in bfloat16 at the next steps, by a
lax.cond per operator inside the jitted step.

    python examples/jax/flax_fp8_promotion.py [--steps 80]

A one-step burst of activation outliers at step 50 spikes fc1's gradient:
the controller promotes fc1 for its lock (and clips it); the run prints the
steps each operator spent in bfloat16 and checks that no NaN reached a
weight. tests/jax/test_examples.py runs it.
"""
from __future__ import annotations

import argparse

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import gnmr_jax

F8 = jnp.float8_e4m3fn
F8_MAX = 448.0


def fp8_matmul(x, w):
    """Per-tensor scaled float8 matmul, accumulated in float32."""
    sx = jnp.max(jnp.abs(x)) / F8_MAX + 1e-12
    sw = jnp.max(jnp.abs(w)) / F8_MAX + 1e-12
    y = jnp.dot((x / sx).astype(F8), (w / sw).astype(F8), preferred_element_type=jnp.float32)
    return y * (sx * sw)


def bf16_matmul(x, w):
    return jnp.dot(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16), preferred_element_type=jnp.float32)


class Fp8Dense(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x, promote):
        w = self.param("kernel", nn.initializers.lecun_normal(), (x.shape[-1], self.features))
        b = self.param("bias", nn.initializers.zeros, (self.features,))
        # The granted operator's high-precision path: only one branch runs.
        return jax.lax.cond(promote, bf16_matmul, fp8_matmul, x, w) + b


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x, promote):  # promote: bool[2], one per operator unit
        h = nn.gelu(Fp8Dense(128, name="fc1")(x, promote[0]))
        return Fp8Dense(32, name="fc2")(h, promote[1])


UNITS = {"fc1": "params/fc1/*", "fc2": "params/fc2/*"}  # a unit per operator, in this order


def main(steps: int = 80) -> dict:
    model = MLP()
    key = jax.random.PRNGKey(0)
    x0 = jnp.zeros((64, 32))
    params = model.init(key, x0, jnp.zeros(2, bool))
    tx = gnmr_jax.adamw(1e-3, preset="gnmr-promote", units=UNITS, warmup=10)
    opt_state = tx.init(params)
    assert tx.unit_names(params) == ("fc1", "fc2")
    teacher = jax.random.normal(jax.random.PRNGKey(1), (32, 32))

    @jax.jit
    def train_step(params, opt_state, x):
        promote = gnmr_jax.find_state(opt_state).promoted()  # decided at the previous step

        def loss_fn(p):
            return jnp.mean((model.apply(p, x, promote) - x @ teacher) ** 2)
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return jax.tree_util.tree_map(jnp.add, params, updates), opt_state, loss

    rng = np.random.default_rng(0)
    high = {"fc1": 0, "fc2": 0}
    for step in range(steps):
        x = rng.standard_normal((64, 32)).astype(np.float32)
        if step == 50:
            x[:, 3] *= 300.0  # activation outliers for one step
        params, opt_state, loss = train_step(params, opt_state, jnp.asarray(x))
        promoted = np.asarray(gnmr_jax.find_state(opt_state).promoted())
        for i, name in enumerate(UNITS):
            high[name] += int(promoted[i])
    assert all(np.all(np.isfinite(np.asarray(p))) for p in jax.tree_util.tree_leaves(params))
    print(f"final loss {float(loss):.4f}; steps granted bfloat16 per operator: {high}")
    return high


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=80)
    high = main(ap.parse_args().steps)
    assert high["fc1"] > 0, "the outliers did not promote fc1"
