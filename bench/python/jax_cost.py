#!/usr/bin/env python3
"""What gnmr_jax costs a JAX training step (docs/jax.md, "What it costs").

A ~10M-parameter MLP (1024 -> 1792 -> 1792 -> 1792 -> 1024, GELU; 8 leaves)
on the CPU, every step jitted with the parameters and the optimizer state
donated. Variants, timed in one run, interleaved (each repetition runs every
variant in turn, so drifts of the machine hit them alike), medians reported:

  adamw        optax.adamw(1e-3)
  clip+adamw   optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3))
  guard+adamw  optax.chain(gnmr_jax.guard(), optax.adamw(1e-3))   (preset default)
  gnmr.adamw   gnmr_jax.adamw(1e-3)                               (preset default)

Two measurements: the optimizer update alone (given gradients: where the
guard's cost shows undiluted) and the whole training step (forward,
backward, update; batch --batch). The goal (issue "gnmr in JAX") is at most
1.1x the clipped chain.

    python bench/python/jax_cost.py [--reps 7] [--steps 5] [--batch 64]

Not a test: timings depend on the machine (docs/jax.md records the figure
with its date and machine).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import gnmr_jax

SIZES = (1024, 1792, 1792, 1792, 1024)


def init_params(key):
    params = {}
    for i, (a, b) in enumerate(zip(SIZES[:-1], SIZES[1:])):
        key, k = jax.random.split(key)
        params[f"layer{i}"] = {"kernel": jax.random.normal(k, (a, b), jnp.float32) / np.sqrt(a),
                               "bias": jnp.zeros((b,), jnp.float32)}
    return params


def forward(params, x):
    n = len(SIZES) - 1
    for i in range(n):
        x = x @ params[f"layer{i}"]["kernel"] + params[f"layer{i}"]["bias"]
        if i < n - 1:
            x = jax.nn.gelu(x)
    return x


def loss_fn(params, x, y):
    return jnp.mean((forward(params, x) - y) ** 2)


VARIANTS = {
    "adamw": lambda: optax.adamw(1e-3),
    "clip+adamw": lambda: optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3)),
    "guard+adamw": lambda: optax.chain(gnmr_jax.guard(), optax.adamw(1e-3)),
    "gnmr.adamw": lambda: gnmr_jax.adamw(1e-3),
}


def build(name, params):
    tx = VARIANTS[name]()

    def update(params, st, grads):
        u, st = tx.update(grads, st, params)
        return optax.apply_updates(params, u), st

    def train(params, st, x, y):
        grads = jax.grad(loss_fn)(params, x, y)
        return update(params, st, grads)

    st = tx.init(params)
    return (jax.jit(update, donate_argnums=(0, 1)), jax.jit(train, donate_argnums=(0, 1)), st)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=7, help="interleaved repetitions")
    ap.add_argument("--steps", type=int, default=5, help="steps per variant per repetition")
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()

    key = jax.random.PRNGKey(0)
    base = init_params(key)
    nparams = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(base))
    x = jax.random.normal(jax.random.PRNGKey(1), (args.batch, SIZES[0]))
    y = jax.random.normal(jax.random.PRNGKey(2), (args.batch, SIZES[-1]))
    grads = jax.grad(loss_fn)(base, x, y)
    print(f"jax {jax.__version__}, optax {optax.__version__}, gnmr_jax {gnmr_jax.__version__}; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; {nparams / 1e6:.2f}M parameters, "
          f"batch {args.batch}")

    state = {}
    for name in VARIANTS:
        upd, train, st = build(name, base)
        p = jax.tree_util.tree_map(jnp.copy, base)
        p, st = upd(p, st, grads)  # compile both, warm up
        p, st = train(p, st, x, y)
        jax.block_until_ready((p, st))
        state[name] = [upd, train, p, st]

    times = {(n, k): [] for n in VARIANTS for k in ("update", "step")}
    for _ in range(args.reps):
        for name in VARIANTS:
            upd, train, p, st = state[name]
            t0 = time.perf_counter()
            for _ in range(args.steps):
                p, st = upd(p, st, grads)
            jax.block_until_ready((p, st))
            t1 = time.perf_counter()
            for _ in range(args.steps):
                p, st = train(p, st, x, y)
            jax.block_until_ready((p, st))
            t2 = time.perf_counter()
            state[name][2:] = [p, st]
            times[(name, "update")].append((t1 - t0) / args.steps)
            times[(name, "step")].append((t2 - t1) / args.steps)

    for kind, what in (("update", "optimizer update alone"), ("step", "training step (fwd+bwd+update)")):
        med = {n: statistics.median(times[(n, kind)]) for n in VARIANTS}
        print(f"\n{what}, median of {args.reps} x {args.steps} steps:")
        for n in VARIANTS:
            print(f"  {n:12s} {med[n] * 1e3:8.2f} ms   x{med[n] / med['adamw']:.3f} adamw   "
                  f"x{med[n] / med['clip+adamw']:.3f} clip+adamw")


if __name__ == "__main__":
    main()
