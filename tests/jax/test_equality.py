"""On the same partial sums, the JAX step decides exactly as the C++ library.

For every preset (gnmr_jax.presets(), from the C++ names()) and a set of
overrides, random per-unit partials with injected faults (x1000 gradient
spikes, NaN, +Inf, zeros, a step where most units spike at once) run
through the FFI step in a jitted lax.scan. Then:
  - gnmr_jax_reference (tests/jax/reference.cpp: presets::make + step() on
    the raw partials, no XLA) gives the same summary, the same scale bits
    and flags for every unit on every step, and the same final state blob,
    byte for byte;
  - gnmr_py_reference (tests/python/reference.cpp: step_norms() over the
    norm trace, what the torch package is checked with) gives the same
    records;
  - gnmr-replay over that trace writes the event log the JAX flags imply
    (every release, nonfinite, trigger, grant, deny, systemic and global
    skip line, with its action).
"""
from __future__ import annotations

import json
import subprocess

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gnmr_jax
from conftest import (REPLAY_FLAGS, SUMMARY, f32_bits, parse_reference, read_trace, run_jax_reference,
                      write_trace)

STEPS = 200
UNITS = 6

# gnmr-noise-floor steps on each unit's noise, which the JAX step does not
# take (test_ffi.py checks the refusal), and gnmr-replay cannot replay it.
CASES = [(p, {}) for p in gnmr_jax.presets() if p != "gnmr-noise-floor"] + [
    ("gnmr", {"tau": 2.0, "delta": 1.0, "max_o": 1, "lock": 4, "kappa": 0.5}),
    ("gnmr", {"mean": "window", "window": 8, "warmup": 5, "cooldown": 3}),
    ("gnmr", {"systemic_action": "global-clip", "systemic_share": 0.2, "tau": 2.0, "deny_kappa": 1.0}),
    ("gnmr-systemic", {"max_o": 1, "systemic_share": 0.2, "tau": 2.0}),
    ("zclip", {"warmup": 10, "z": 2.0}),
    ("spam", {"tau": 4.0, "warmup": 5}),
    ("clip+gnmr-promote", {"max_norm": 0.5, "max_o": 2}),
    ("default", {"rate": 1e-2, "systemic_max_grants": 2}),
    ("default", {"rate": 1e-2, "warmup": 5}),
]


def faulty_partials(seed: int, units: int) -> np.ndarray:
    """float32[STEPS, units] sums of squares with faults."""
    rng = np.random.default_rng(seed)
    level = rng.uniform(0.5, 50.0, size=units)
    p = level * (1.0 + 0.15 * rng.standard_normal((STEPS, units))) ** 2
    p = p.astype(np.float32)
    for t in rng.choice(np.arange(30, STEPS), size=12, replace=False):
        u = rng.integers(units)
        kind = rng.integers(4)
        p[t, u] = [p[t, u] * np.float32(1e6), np.nan, np.inf, 0.0][kind]  # x1000 on the gradient
    t = int(rng.integers(60, STEPS))
    p[t, : max(1, units - 1)] *= np.float32(1e4)  # most units at once: the systemic rule
    return p


def run_jax(partials: np.ndarray, preset: str, overrides: dict):
    options = gnmr_jax._ffi.options_text(overrides)
    state = gnmr_jax.fresh_state(preset, options, partials.shape[1])

    @jax.jit
    def run(state, xs):
        def body(s, x):
            s = gnmr_jax.controller_step(s, x, preset, options)
            return s, (s.scale, s.flags, s.counts, s.values)
        return jax.lax.scan(body, state, xs)

    final, (scale, flags, counts, values) = run(state, jnp.asarray(partials))
    records = []
    for t in range(partials.shape[0]):
        c, v = np.asarray(counts[t]), np.asarray(values[t])
        s = {k: int(c[gnmr_jax.COUNT_FIELDS.index(k)]) for k in gnmr_jax.COUNT_FIELDS}
        for k in gnmr_jax.VALUE_FIELDS:
            s[k] = f32_bits(v[gnmr_jax.VALUE_FIELDS.index(k)])
        s = {k: s[k] for k in SUMMARY}
        records.append((s, [f32_bits(x) for x in np.asarray(scale[t])], [int(f) for f in np.asarray(flags[t])]))
    return records, bytes(np.asarray(final.blob))


@pytest.mark.parametrize("preset,overrides", CASES, ids=[f"{p}-{i}" for i, (p, _) in enumerate(CASES)])
def test_decisions_equal_the_cpp_controller(tmp_path, jax_reference, preset, overrides):
    units = 1 if gnmr_jax.is_global(preset) else UNITS
    partials = faulty_partials(len(preset) * 7919 + len(overrides), units)
    got, blob = run_jax(partials, preset, overrides)
    want, want_blob = run_jax_reference(jax_reference, partials, preset, overrides, tmp_path)
    assert len(got) == len(want) == STEPS
    for t, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"step {t + 1} differs"
    assert blob == want_blob  # the checkpoint bytes are the C++ blob's
    # The faults were seen: every non-finite partial is a skip of its unit.
    for t in range(STEPS):
        for u in range(units):
            if not np.isfinite(partials[t, u]):
                assert got[t][2][u] & gnmr_jax.Flag.NONFINITE and got[t][2][u] & gnmr_jax.Flag.SKIP
    if preset in ("gnmr", "default") and not overrides:
        assert sum(s["triggered"] for s, _, _ in got) > 0


@pytest.mark.parametrize("preset", ["default", "gnmr", "spam", "stabilizer+gnmr"])
def test_decisions_on_a_recorded_trace(tmp_path, jax_reference, gen_trace_exe, preset):
    """gnmr-gen-trace's synthetic transformer trace (spikes, a burst, a
    drift, NaN and Inf cells): its norms squared are the partials."""
    trace = tmp_path / "gen.csv"
    subprocess.run([gen_trace_exe, "--steps", "300", "--layers", "2", "--seed", "7", "--out", str(trace)],
                   check=True, capture_output=True)
    partials = read_trace(trace) ** 2
    got, blob = run_jax(partials, preset, {})
    want, want_blob = run_jax_reference(jax_reference, partials, preset, {}, tmp_path)
    assert got == want and blob == want_blob
    assert sum(s["nonfinite"] for s, _, _ in got) > 0
    if preset in ("default", "gnmr"):
        assert sum(s["triggered"] for s, _, _ in got) > 0


def test_the_comparison_sees_a_difference(tmp_path, jax_reference):
    partials = faulty_partials(3, UNITS)
    got, _ = run_jax(partials, "gnmr", {})
    other, _ = run_jax_reference(jax_reference, partials, "gnmr", {"tau": 1.5}, tmp_path)
    assert got != other


NORM_CASES = [("gnmr", {}), ("default", {}), ("zclip", {"warmup": 10, "z": 2.0}), ("stabilizer", {}),
              ("gnmr", {"systemic_action": "global-clip", "systemic_share": 0.2, "tau": 2.0}),
              ("clip+gnmr-promote", {"max_norm": 0.5, "max_o": 2}), ("skip-step", {})]


def trace_case(tmp_path, preset, overrides):
    """The JAX records and the norm trace sqrt(partials) (what step()
    computes first: gnmr::math::sqrt is correctly rounded, as numpy's)."""
    units = 1 if gnmr_jax.is_global(preset) else UNITS
    partials = faulty_partials(11 + len(preset), units)
    got, _ = run_jax(partials, preset, overrides)
    trace = tmp_path / "trace.csv"
    write_trace(trace, np.sqrt(partials))
    return got, trace


@pytest.mark.parametrize("preset,overrides", NORM_CASES, ids=[f"{p}-{i}" for i, (p, _) in enumerate(NORM_CASES)])
def test_decisions_equal_gnmr_py_reference(tmp_path, py_reference, preset, overrides):
    """The torch package's reference: step_norms() over the norm trace."""
    got, trace = trace_case(tmp_path, preset, overrides)
    args = [py_reference, str(trace), preset] + [f"{k}={v}" for k, v in overrides.items()]
    want, _ = parse_reference(subprocess.run(args, check=True, capture_output=True, text=True).stdout)
    assert got == want


@pytest.mark.parametrize("preset,overrides", NORM_CASES, ids=[f"{p}-{i}" for i, (p, _) in enumerate(NORM_CASES)])
def test_events_equal_gnmr_replay(tmp_path, replay_exe, preset, overrides):
    """gnmr-replay over the same trace logs exactly the events the JAX
    decisions imply, with their actions."""
    got, trace = trace_case(tmp_path, preset, overrides)
    events = tmp_path / "events.jsonl"
    args = [replay_exe, str(trace), "--preset", preset, "--events", str(events), "--quiet"]
    for k, v in overrides.items():
        args += [REPLAY_FLAGS[k], str(v)]
    subprocess.run(args, check=True, capture_output=True, text=True)
    lines = replay_lines(events)
    assert lines == implied_lines(got)
    assert lines  # the faults made events


def _action(flags: int, scale_bits: int) -> tuple:
    parts = []
    if flags & gnmr_jax.Flag.SKIP:
        parts.append("skip")
    if flags & gnmr_jax.Flag.RESET_MOMENTS:
        parts.append("reset_moments")
    if flags & gnmr_jax.Flag.PROMOTE:
        parts.append("promote")
    if not flags & gnmr_jax.Flag.SKIP and scale_bits != f32_bits(1.0):
        parts.append(("clip", scale_bits))
    return tuple(parts) or ("none",)


def implied_lines(records) -> list:
    """The event log's (step, unit, event, action) lines the JAX decisions
    imply, in gnmr/io/telemetry.hpp's order."""
    F = gnmr_jax.Flag
    out = []
    for s, scales, flags in records:
        for u, (b, f) in enumerate(zip(scales, flags)):
            for bit, name in ((F.RELEASED, "release"), (F.NONFINITE, "nonfinite"), (F.TRIGGERED, "trigger"),
                              (F.GRANTED, "grant"), (F.DENIED, "deny")):
                if f & bit:
                    out.append((s["step"], u, name, _action(f, b)))
        if s["systemic"]:
            out.append((s["step"], -1, "systemic", None))
        if s["skip_step"]:
            out.append((s["step"], -1, "global_skip", None))
    return out


def replay_lines(path) -> list:
    out = []
    for line in open(path):
        e = json.loads(line)
        if e["unit"] < 0:
            out.append((e["step"], -1, e["event"], None))
            continue
        parts = []
        for a in e["action"].split("+"):
            parts.append(("clip", f32_bits(np.float32(float(a[5:])))) if a.startswith("clip:") else a)
        out.append((e["step"], e["unit"], e["event"], tuple(parts)))
    return out
