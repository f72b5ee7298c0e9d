"""Every bad input raises a Python exception with a clear message (the C++
library's where it has one) and changes nothing."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import gnmr
from conftest import batch, make_model


def backward(model, t=0):
    x, y = batch(t)
    model.zero_grad(set_to_none=True)
    F.mse_loss(model(x), y).backward()


@pytest.mark.parametrize("preset,over,exc,msg", [
    ("nope", {}, ValueError, "unknown preset 'nope'; valid presets: none, clip"),
    ("gnmr", {"taus": 2.0}, ValueError, "unknown override 'taus'; valid overrides: tau, delta"),
    ("zclip", {"tau": 2.0}, ValueError, "override 'tau' does not apply to preset 'zclip'"),
    ("gnmr", {"max_o": -1}, ValueError, "MaxO: max_o must be >= 1"),
    ("gnmr", {"max_o": 2 ** 40}, ValueError, "override 'max_o' must be in"),
    ("gnmr", {"tau": -1.0}, ValueError, "tau"),
    ("gnmr", {"mean": "median"}, ValueError, "'mean' must be one of ema, cumulative, window"),
    ("gnmr", {"window": 8}, ValueError, "'window' needs mean=window"),
    ("skip-step", {"window": 500}, ValueError, "'window' must be in"),
    ("gnmr", {"tau": "3"}, TypeError, "'tau' must be a number, got str"),
    ("gnmr", {"warmup": 1.5}, TypeError, "'warmup' must be an int, got float"),
    ("gnmr", {"warmup": True}, TypeError, "'warmup' must be an int, got bool"),
    ("gnmr", {"mean": 1}, TypeError, "'mean' must be a str"),
    ("gnmr", {"lock": 2 ** 70}, ValueError, "out of the 64-bit range"),
])
def test_bad_preset_or_override(preset, over, exc, msg):
    with pytest.raises(exc, match=msg):
        gnmr.Controller(make_model(), preset, **over)


def test_bad_units():
    m = make_model()
    w = m.fc1.weight
    cases = [
        ([], ValueError, "no units"),
        ({}, ValueError, "no units"),
        (w, TypeError, "for one tensor pass"),
        (42, TypeError, "units must be"),
        ("fc1", TypeError, "units must be"),
        ([w, {"params": [w]}], TypeError, "only parameter groups"),
        ([{"name": "a"}], ValueError, "has no 'params'"),
        ({"a": w, "b": [w]}, ValueError, "a tensor belongs to one unit"),
        ([{"params": [w], "name": "x"}, {"params": [m.fc2.weight], "name": "x"}], ValueError,
         "duplicate unit name 'x'"),
        ({"a,b": w}, ValueError, "must be non-empty, without ','"),
        ({" a": w}, ValueError, "surrounding blanks"),
        ({"": w}, ValueError, "non-empty"),
        ({3: w}, TypeError, "unit names are str"),
        ({"a": []}, ValueError, "unit 'a' has no tensor"),
        ({"a": [1.0]}, TypeError, "not a tensor"),
        ({"a": w * 2}, ValueError, "must be a leaf that requires grad"),
        ({"a": torch.zeros(3)}, ValueError, "must be a leaf that requires grad"),
        ({"a": torch.zeros(3, dtype=torch.float64, requires_grad=True)}, ValueError, "float64"),
        ({"a": w, "b": torch.zeros(3, device="meta", requires_grad=True)}, ValueError, "one device"),
        ({"a": torch.zeros(3, device="meta", requires_grad=True)}, ValueError, "not supported"),
        (torch.nn.Linear(2, 2).requires_grad_(False), ValueError, "no parameter that requires grad"),
    ]
    for units, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            gnmr.Controller(units)
    with pytest.raises(TypeError, match="preset must be a str"):
        gnmr.Controller(m, 3)


def test_bad_gradients_raise_before_anything_changes():
    m = make_model()
    ctl = gnmr.Controller(m)
    backward(m)
    ctl.step()
    blob = bytes(ctl.state_dict()["blob"].tolist())

    backward(m, 1)
    good = m.fc2.weight.grad.clone()
    # A strided view with gaps: not one dense array.
    m.fc2.weight.grad = torch.zeros(32, 64)[:, ::2]
    with pytest.raises(ValueError, match="fc2.weight: gradient is not dense"):
        ctl.step()
    # A sparse gradient.
    m.fc2.weight.grad = good.to_sparse()
    with pytest.raises(ValueError, match="fc2.weight: sparse gradients are not supported"):
        ctl.step()
    m.fc2.weight.grad = good
    # Nothing changed: not the controller, not the other gradients.
    assert bytes(ctl.state_dict()["blob"].tolist()) == blob and ctl.steps_done == 1
    assert torch.equal(m.fc2.weight.grad, good)
    ctl.step()
    assert ctl.steps_done == 2


def test_bad_optimizer_arguments():
    m = make_model()
    ctl = gnmr.Controller(m)
    with pytest.raises(TypeError, match="controller=gnmr.Controller"):
        gnmr.optim.AdamW(m.parameters(), controller=None)
    with pytest.raises(TypeError):
        gnmr.optim.AdamW(m.parameters())  # controller is required
    for kw, msg in [({"lr": -1.0}, "AdamW: lr must be finite and >= 0"),
                    ({"betas": (1.0, 0.999)}, "AdamW: beta1 must be in \\[0, 1\\)"),
                    ({"betas": (0.9, -0.1)}, "AdamW: beta2 must be in"),
                    ({"eps": 0.0}, "AdamW: eps must be finite and > 0"),
                    ({"weight_decay": float("nan")}, "AdamW: weight_decay must be finite")]:
        with pytest.raises(ValueError, match=msg):
            gnmr.optim.AdamW(m.parameters(), controller=ctl, **kw)
    other = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="not watched by the controller"):
        gnmr.optim.AdamW(other.parameters(), controller=ctl)
    half = torch.nn.Linear(2, 2).half()
    with pytest.raises(ValueError, match="AdamW keeps fp32 weights"):
        gnmr.optim.AdamW(half.parameters(), controller=gnmr.Controller(half))
    opt = gnmr.optim.AdamW(m.parameters(), controller=ctl)
    with pytest.raises(ValueError, match="not watched"):
        opt.add_param_group({"params": other.parameters()})


def test_a_bad_group_after_construction_changes_nothing():
    m = make_model()
    ctl = gnmr.Controller(m)
    opt = gnmr.optim.AdamW(m.parameters(), lr=1e-2, controller=ctl)
    backward(m)
    opt.step()
    before = [p.detach().clone() for p in m.parameters()]
    backward(m, 1)
    opt.param_groups[0]["lr"] = -1.0
    with pytest.raises(ValueError, match="lr must be finite and >= 0"):
        opt.step()
    assert ctl.steps_done == 1
    assert all(torch.equal(p, b) for p, b in zip(m.parameters(), before))
    opt.param_groups[0]["lr"] = 1e-2
    opt.step()
    assert ctl.steps_done == 2


def test_bad_calls(tmp_path):
    m = make_model()
    ctl = gnmr.Controller(m)
    with pytest.raises(KeyError, match="no unit named 'nope'"):
        ctl.promoted("nope")
    with pytest.raises(ValueError, match="resets its own moments"):
        ctl.reset_moments(gnmr.optim.AdamW(m.parameters(), controller=ctl))
    with pytest.raises(TypeError, match="needs a torch.optim.Optimizer"):
        ctl.reset_moments("adam")
    backward(m)
    with pytest.raises(TypeError, match="needs a torch.optim.Optimizer"):
        ctl.step("adam")
    assert ctl.steps_done == 0 and m.fc1.weight.grad is not None
    with pytest.raises(OSError, match="events: cannot write"):
        ctl.events(tmp_path / "no" / "such" / "dir" / "ev.jsonl")
    with pytest.raises(OSError, match="trace: cannot write"):
        ctl.trace(tmp_path / "no" / "such" / "dir" / "t.csv")
    with pytest.raises(ValueError, match="not watched"):
        ctl.unit_of(torch.zeros(1))
    with pytest.raises(ValueError, match="unknown preset"):
        gnmr.preset_overrides("nope")
    with pytest.raises(ValueError, match="unknown preset"):
        gnmr.is_global("nope")


def test_loading_an_older_state_under_an_open_trace(tmp_path):
    m = make_model()
    ctl = gnmr.Controller(m)
    backward(m)
    ctl.step()
    early = ctl.state_dict()
    ctl.trace(tmp_path / "t.csv")
    for t in range(3):
        backward(m, t)
        ctl.step()
    with pytest.raises(ValueError, match="trace steps must increase"):
        ctl.load_state_dict(early)
    assert ctl.steps_done == 4
    ctl.trace(None)
    ctl.load_state_dict(early)
    assert ctl.steps_done == 1
