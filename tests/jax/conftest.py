"""Shared pieces of gnmr_jax's tests: four CPU devices for the sharding
tests, the C++ reference programs the decisions are compared with, and the
parsing of their output.

XLA_FLAGS must be set before jax is first imported, hence here, at the
top of the conftest (pytest imports it before any test module).
"""
from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()

import struct  # noqa: E402
import subprocess  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Dict, List, Optional, Tuple  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _tool(env: str, rel: str) -> Optional[str]:
    p = os.environ.get(env)
    if p:
        if not os.path.exists(p):
            pytest.fail(f"{env}={p} does not exist")
        return p
    cand = ROOT / rel
    return str(cand) if cand.exists() else None


@pytest.fixture(scope="session")
def jax_reference() -> str:
    """gnmr_jax_reference (tests/jax/reference.cpp): the C++ controller on
    raw partials. run_pytest.sh builds it when CTest did not."""
    p = _tool("GNMR_JAX_REFERENCE", "python-jax/build/gnmr_jax_reference")
    if p is None:
        pytest.fail("gnmr_jax_reference is not built (run tests/jax/run_pytest.sh, which builds it)")
    return p


@pytest.fixture(scope="session")
def py_reference() -> str:
    """gnmr_py_reference (tests/python/reference.cpp): the C++ controller on
    a norm trace, as the torch package's tests use it."""
    p = _tool("GNMR_PY_REFERENCE", "build/tests/python/gnmr_py_reference")
    if p is None:
        pytest.skip("gnmr_py_reference not built (CTest sets GNMR_PY_REFERENCE)")
    return p


@pytest.fixture(scope="session")
def replay_exe() -> str:
    p = _tool("GNMR_REPLAY", "build/tools/gnmr-replay")
    if p is None:
        pytest.skip("gnmr-replay not built (CTest sets GNMR_REPLAY)")
    return p


@pytest.fixture(scope="session")
def gen_trace_exe() -> str:
    p = _tool("GNMR_GEN_TRACE", "build/tools/gnmr-gen-trace")
    if p is None:
        pytest.skip("gnmr-gen-trace not built (CTest sets GNMR_GEN_TRACE)")
    return p


def read_trace(path: Path) -> np.ndarray:
    """The norms of a trace CSV (gnmr/io/trace.hpp) as float32[steps, units]."""
    rows = []
    for line in open(path):
        line = line.strip()
        if not line or line.startswith("#") or line.startswith("step"):
            continue
        rows.append([np.float32(float(c)) for c in line.split(",")[1:]])
    return np.asarray(rows, np.float32)


def f32_bits(x) -> int:
    return struct.unpack("<I", struct.pack("<f", float(x)))[0]


# One step: (summary fields as ints, scale bits per unit, flags per unit).
Record = Tuple[Dict[str, int], List[int], List[int]]
SUMMARY = ("step", "triggered", "granted", "in_recovery", "denied", "nonfinite", "released", "max_ratio",
           "max_ratio_unit", "skip_step", "systemic", "systemic_scale", "total_norm", "total_mean")


def parse_reference(out: str) -> Tuple[List[Record], Optional[bytes]]:
    """The S/D lines of gnmr_jax_reference / gnmr_py_reference, and the
    final blob (B line) when there is one."""
    steps: List[Record] = []
    blob = None
    for line in out.splitlines():
        f = line.split(",")
        if f[0] == "S":
            s = {k: int(v, 16) if k in ("max_ratio", "systemic_scale", "total_norm", "total_mean") else int(v)
                 for k, v in zip(SUMMARY, f[1:])}
            steps.append((s, [], []))
        elif f[0] == "D":
            steps[-1][1].append(int(f[3], 16))
            steps[-1][2].append(int(f[4]))
        elif f[0] == "B":
            blob = bytes.fromhex(f[1])
    return steps, blob


def run_jax_reference(exe: str, partials: np.ndarray, preset: str, overrides: Dict[str, object],
                      tmp: Path) -> Tuple[List[Record], bytes]:
    path = tmp / "partials.f32"
    np.ascontiguousarray(partials, dtype="<f4").tofile(path)
    args = [exe, str(path), str(partials.shape[1]), preset] + [f"{k}={_text(v)}" for k, v in overrides.items()]
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    steps, blob = parse_reference(r.stdout)
    assert blob is not None
    return steps, blob


def _text(v: object) -> str:
    return repr(float(v)) if isinstance(v, float) else str(v)


def write_trace(path: Path, norms: np.ndarray) -> None:
    """A norm trace (gnmr/io/trace.hpp) of float32 norms, "%.9g" (exact)."""
    with open(path, "w") as f:
        f.write("step," + ",".join(f"u{i}" for i in range(norms.shape[1])) + "\n")
        for t, row in enumerate(norms, start=1):
            f.write(f"{t}," + ",".join(_cell(x) for x in row) + "\n")


def _cell(x: np.float32) -> str:
    if np.isnan(x):
        return "nan"
    if np.isinf(x):
        return "inf" if x > 0 else "-inf"
    return "%.9g" % float(x)


REPLAY_FLAGS = {"tau": "--tau", "delta": "--delta", "warmup": "--warmup", "window": "--window",
                "delta_window": "--delta-window", "beta": "--beta", "max_o": "--maxo",
                "lock": "--lock", "cooldown": "--cooldown", "kappa": "--kappa",
                "max_norm": "--max-norm", "z": "--z", "clip_factor": "--clip-factor",
                "mean": "--mean", "systemic_action": "--systemic-action",
                "systemic_share": "--systemic-share", "systemic_maxo": "--systemic-maxo",
                "systemic_kappa": "--systemic-kappa", "systemic_beta": "--systemic-beta",
                "systemic_max_grants": "--systemic-max-grants",
                "deny_action": "--deny-action", "deny_kappa": "--deny-kappa", "restart_every": "--restart-every",
                "rate": "--rate", "floor": "--floor", "ceiling": "--ceiling"}
