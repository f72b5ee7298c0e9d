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


# ------------------------------------------------------------------- MXFP8 ---
def make_mx(seed=0, scale_mode="floor"):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 64),
                            torch.nn.GELU(), torch.nn.Linear(64, 32), torch.nn.LayerNorm(32))
    return gnmr_ao.convert_to_mxfp8_training(m, scale_mode=scale_mode)


def test_mxfp8_conversion_keeps_the_parameters_and_computes_in_mx():
    mx = pytest.importorskip("torchao.prototype.moe_training.mxfp8_linear")
    torch.manual_seed(3)
    plain = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Linear(64, 32), torch.nn.Linear(32, 8))
    params = [id(p) for p in plain.parameters()]
    gnmr_ao.convert_to_mxfp8_training(plain)
    assert [id(p) for p in plain.parameters()] == params  # optimizers and units stay valid
    assert [type(m).__name__ for m in plain] == ["MXFP8Linear", "MXFP8Linear", "Linear"]  # 8 is not a multiple of 32
    x = torch.randn(64, 32)
    out = plain[0](x)
    hp = F.linear(x, plain[0].weight, plain[0].bias)
    assert not torch.equal(out, hp) and torch.allclose(out, hp, rtol=0.1, atol=0.1)  # MX, close to fp32
    assert isinstance(plain[0], mx.MXFP8Linear)
    with pytest.raises(ValueError, match="scale_mode"):
        gnmr_ao.convert_to_mxfp8_training(torch.nn.Linear(32, 32), scale_mode="nearest")


@pytest.mark.parametrize("scale_mode", ["floor", "rceil"])
def test_a_granted_mxfp8_operator_runs_in_high_precision_for_its_lock(scale_mode):
    pytest.importorskip("torchao.prototype.moe_training.mxfp8_linear")
    m = make_mx(1, scale_mode)
    units = gnmr_ao.operator_units(m)
    assert list(units) == ["0", "2", "4", "5.weight", "5.bias"]
    ctl = gnmr.Controller(units, "gnmr", warmup=5, lock=4)
    assert gnmr_ao.enable_promotion(m, ctl) == ["0", "2", "4"]
    opt = gnmr.optim.AdamW(m.parameters(), lr=1e-3, controller=ctl)
    layers = gnmr_ao.low_precision_modules(m)
    spike_at, promoted_steps = 30, {}
    g = torch.Generator().manual_seed(5)
    for t in range(45):
        x = torch.randn(32, 32, generator=g)
        y = torch.randn(32, 32, generator=g)
        for name, mod in layers.items():
            inp = torch.randn(32, mod.in_features, generator=g)
            out = mod(inp)
            if gnmr_ao.is_promoted(mod):
                promoted_steps.setdefault(name, []).append(t)
                assert torch.equal(out, F.linear(inp, mod.weight, mod.bias))
            else:
                assert torch.equal(out, type(mod).forward(mod, inp))
        opt.zero_grad()
        F.mse_loss(m(x), y).backward()
        if t == spike_at:
            m[2].weight.grad.mul_(1000.0)
        opt.step()
    assert promoted_steps.get("2") == list(range(spike_at + 1, spike_at + 5))
    assert "0" not in promoted_steps and "4" not in promoted_steps
    assert all(torch.isfinite(p).all() for p in m.parameters())


def test_weight_wrapped_mxfp8_models_are_refused_with_a_message():
    cfg = pytest.importorskip("torchao.prototype.moe_training.config")
    from torchao.quantization import quantize_
    from torchao.quantization.quantize_.common.kernel_preference import KernelPreference

    m = torch.nn.Sequential(torch.nn.Linear(32, 32))
    quantize_(m, cfg.MXFP8TrainingOpConfig(kernel_preference=KernelPreference.EMULATED))
    with pytest.raises(ValueError, match="convert_to_mxfp8_training"):
        gnmr_ao.operator_units(m)
