"""Shared pieces of gnmr's Python tests: a tiny model and its data, fault
injection, a training loop that records every step's decisions, and the
C++ references the decisions are compared with (gnmr_py_reference and
gnmr-replay, both the C++ library itself, not the binding).
"""
from __future__ import annotations

import os
import struct
import subprocess
from collections import OrderedDict
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest
import torch
import torch.nn.functional as F

import gnmr

ROOT = Path(__file__).resolve().parents[2]

# On CPUs with AVX512-FP16, torch 2.13 sends CPU float8 GEMMs
# (torch._scaled_mm) to oneDNN's reference kernel, about 300 ms for a small
# GEMM; without oneDNN the same call takes about 1 ms and returns the same
# bits. The float8 tests must not depend on which CPU CI lands on.
torch.backends.mkldnn.enabled = False


def _tool(env: str, rel: str) -> Optional[str]:
    p = os.environ.get(env)
    if p:
        if not os.path.exists(p):
            pytest.fail(f"{env}={p} does not exist (build it: cmake --build build)")
        return p
    cand = ROOT / "build" / rel
    return str(cand) if cand.exists() else None


@pytest.fixture(scope="session")
def reference_exe() -> str:
    p = _tool("GNMR_PY_REFERENCE", "tests/python/gnmr_py_reference")
    if p is None:
        pytest.skip("gnmr_py_reference not built (CTest sets GNMR_PY_REFERENCE)")
    return p


@pytest.fixture(scope="session")
def replay_exe() -> str:
    p = _tool("GNMR_REPLAY", "tools/gnmr-replay")
    if p is None:
        pytest.skip("gnmr-replay not built (CTest sets GNMR_REPLAY)")
    return p


def f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


# ------------------------------------------------------------ model, data ---
W_TRUE = torch.Generator().manual_seed(7)
W_TRUE = torch.randn(16, 4, generator=W_TRUE)


def make_model(seed: int = 0, device: str = "cpu") -> torch.nn.Module:
    torch.manual_seed(seed)
    m = torch.nn.Sequential(OrderedDict(
        fc1=torch.nn.Linear(16, 32), act1=torch.nn.Tanh(),
        fc2=torch.nn.Linear(32, 32), act2=torch.nn.Tanh(),
        out=torch.nn.Linear(32, 4)))
    return m.to(device)


def batch(step: int, device: str = "cpu") -> Tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(64, 16, generator=g)
    y = x @ W_TRUE + 0.05 * torch.randn(64, 4, generator=g)
    return x.to(device), y.to(device)


# Faults after backward, before the controller: (kind, parameter name).
FAULTS: Dict[int, Tuple[str, str]] = {
    30: ("nan", "fc1.weight"),
    55: ("inf", "fc2.bias"),
    80: ("x1000", "fc1.weight"),
    81: ("x1000", "fc1.weight"),
    120: ("x1000", "out.weight"),
    150: ("nan", "out.bias"),
    190: ("x1000", "fc2.weight"),
    240: ("inf", "out.weight"),
    241: ("x1000", "fc1.bias"),
}


def inject(model: torch.nn.Module, fault: Optional[Tuple[str, str]]) -> None:
    if fault is None:
        return
    kind, name = fault
    g = dict(model.named_parameters())[name].grad
    with torch.no_grad():
        if kind == "nan":
            g.view(-1)[0] = float("nan")
        elif kind == "inf":
            g.view(-1)[-1] = float("inf")
        else:
            g.mul_(1000.0)


Record = Tuple[Dict[str, object], List[int], List[int]]


def train(model: torch.nn.Module, ctl: gnmr.Controller, opt: torch.optim.Optimizer, steps: int,
          *, guarded: bool, faults: Dict[int, Tuple[str, str]] = FAULTS, start: int = 0,
          device: str = "cpu") -> List[Record]:
    """Trains `steps` steps from data step `start`; returns per step the
    summary and the decisions (scale bits, flags). guarded: opt is a
    gnmr.optim.AdamW (it runs the controller); otherwise ctl.step(opt) runs
    before opt.step(). Asserts that every weight stays finite."""
    out: List[Record] = []
    for t in range(start, start + steps):
        x, y = batch(t, device)
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        inject(model, faults.get(t))
        if guarded:
            opt.step()
            s = ctl.last_summary
        else:
            s = ctl.step(opt)
            opt.step()
        d = ctl.decisions()
        out.append((s.as_dict(), [f32_bits(v) for v in d.scale.tolist()], d.flags.tolist()))
        for n, p in model.named_parameters():
            assert torch.isfinite(p).all(), f"step {t}: a non-finite value reached {n}"
    return out


# -------------------------------------------------------------- reference ---
def reference(exe: str, trace: Path, preset: str, overrides: Dict[str, object]) -> List[Record]:
    """The C++ host controller's decisions on the trace (gnmr_py_reference)."""
    args = [exe, str(trace), preset] + [f"{k}={v}" for k, v in overrides.items()]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    steps: List[Record] = []
    for line in out.splitlines():
        f = line.split(",")
        if f[0] == "S":
            keys = ("step", "triggered", "granted", "in_recovery", "denied", "nonfinite", "released")
            s: Dict[str, object] = {k: int(v) for k, v in zip(keys, f[1:8])}
            s["max_ratio"] = int(f[8], 16)
            s["max_ratio_unit"] = int(f[9])
            s["skip_step"] = int(f[10])
            s["systemic"] = int(f[11])
            for i, k in enumerate(("systemic_scale", "total_norm", "total_mean")):
                s[k] = int(f[12 + i], 16)
            steps.append((s, [], []))
        else:
            steps[-1][1].append(int(f[3], 16))
            steps[-1][2].append(int(f[4]))
    return steps


def comparable(records: List[Record]) -> List[Record]:
    """The binding's records with max_ratio as bits, like reference()'s."""
    out = []
    for s, scale, flags in records:
        s = dict(s)
        s["max_ratio"] = f32_bits(s["max_ratio"])
        s["skip_step"] = int(s["skip_step"])
        for k in ("systemic_scale", "total_norm", "total_mean"):
            s[k] = f32_bits(s[k])
        out.append((s, scale, flags))
    return out


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


def replay_events(exe: str, trace: Path, preset: str, overrides: Dict[str, object],
                  out: Path) -> None:
    """gnmr-replay's event log for the trace."""
    args = [exe, str(trace), "--preset", preset, "--events", str(out), "--quiet"]
    for k, v in overrides.items():
        args += [REPLAY_FLAGS[k], str(v)]
    subprocess.run(args, check=True, capture_output=True, text=True)
