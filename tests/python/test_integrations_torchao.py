"""gnmr.integrations.torchao: GNMR's promotion on torchao's Float8Linear, on
the CPU (torch 2.13's float8 _scaled_mm). A gradient spike on one operator
gets it granted; for the lock it computes in high precision (its output is
exactly F.linear's), then returns to float8; the other operators never leave
float8. Skipped without torchao (tests/python/requirements-extras.txt).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("torchao.float8")
from torchao.float8 import convert_to_float8_training  # noqa: E402

import gnmr  # noqa: E402
from gnmr.integrations import torchao as gnmr_ao  # noqa: E402


def make(seed=0):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 64),
                            torch.nn.GELU(), torch.nn.Linear(64, 16), torch.nn.LayerNorm(16))
    convert_to_float8_training(m)
    return m


def test_operator_units_and_refusals():
    m = make()
    units = gnmr_ao.operator_units(m)
    assert list(units) == ["0", "2", "4", "5.weight", "5.bias"]
    assert [len(v) for v in units.values()] == [2, 2, 2, 1, 1]
    with pytest.raises(ValueError, match="not a unit of the controller"):
        gnmr_ao.enable_promotion(m, gnmr.Controller(m))  # per-parameter units


def test_a_granted_operator_runs_in_high_precision_for_its_lock():
    m = make(1)
    ctl = gnmr.Controller(gnmr_ao.operator_units(m), "gnmr", warmup=5, lock=4)
    assert gnmr_ao.enable_promotion(m, ctl) == ["0", "2", "4"]
    opt = gnmr.optim.AdamW(m.parameters(), lr=1e-3, controller=ctl)
    layers = gnmr_ao.float8_modules(m)
    spike_at, promoted_steps = 30, {}
    g = torch.Generator().manual_seed(5)
    for t in range(45):
        x = torch.randn(16, 32, generator=g)
        y = torch.randn(16, 16, generator=g)
        # Which path each layer takes this step, checked against both paths.
        for name, mod in layers.items():
            inp = torch.randn(4, mod.in_features, generator=g)
            out = mod(inp)
            hp = F.linear(inp, mod.weight, mod.bias)
            fp8 = type(mod).forward(mod, inp)
            if gnmr_ao.is_promoted(mod):
                promoted_steps.setdefault(name, []).append(t)
                assert torch.equal(out, hp)
            else:
                assert torch.equal(out, fp8)
        opt.zero_grad()
        F.mse_loss(m(x), y).backward()
        if t == spike_at:
            m[2].weight.grad.mul_(1000.0)
        opt.step()
    # Granted at the spike's step: high precision from the next step, for the lock.
    assert promoted_steps.get("2") == list(range(spike_at + 1, spike_at + 5))
    assert "0" not in promoted_steps and "4" not in promoted_steps
    assert all(torch.isfinite(p).all() for p in m.parameters())
    gnmr_ao.disable_promotion(m)
    assert all(not gnmr_ao.is_promoted(mod) for mod in layers.values())
