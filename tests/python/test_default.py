"""The default preset (issue 31): what a user gets without naming a preset.

gnmr.Controller, the HF and Lightning callbacks and torchtitan's container
default to "default", which stands for the stabilizer with the calibrated
promotion inside it ("stabilizer+gnmr-calibrated", gnmr::presets::
kDefaultPreset); its decisions equal the C++ library's in test_reference.py.
Here: the names, the overrides it takes, and that it is the layered
controller, decision for decision.
"""
from __future__ import annotations

import inspect

import pytest
import torch

import gnmr
from conftest import FAULTS, make_model, train


def test_default_is_a_name_and_the_default():
    assert "default" in gnmr.presets() and "gnmr-calibrated" in gnmr.presets()
    assert not gnmr.is_global("default")
    assert gnmr.preset_overrides("default") == gnmr.preset_overrides("stabilizer+gnmr-calibrated")
    assert "rate" in gnmr.preset_overrides("default") and "tau" not in gnmr.preset_overrides("default")
    ctl = gnmr.Controller(make_model())
    assert ctl.preset == "default"
    with pytest.raises(ValueError, match="applies to neither"):
        gnmr.Controller(make_model(), tau=2.0)
    with pytest.raises(ValueError, match="rate"):
        gnmr.Controller(make_model(), rate=0.9)


def test_integrations_default_to_default():
    from gnmr.integrations import hf, lightning
    for cls in (hf.GnmrCallback, lightning.GnmrCallback):
        assert inspect.signature(cls.__init__).parameters["preset"].default == "default"


def test_default_decides_as_the_layered_controller():
    a, b = make_model(3), make_model(3)
    ca = gnmr.Controller(a)
    cb = gnmr.Controller(b, "stabilizer+gnmr-calibrated")
    oa = gnmr.optim.AdamW(a.parameters(), lr=3e-3, controller=ca)
    ob = gnmr.optim.AdamW(b.parameters(), lr=3e-3, controller=cb)
    train(a, ca, oa, 60, guarded=True, faults=FAULTS)
    train(b, cb, ob, 60, guarded=True, faults=FAULTS)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
        assert torch.isfinite(pa).all()
    assert torch.equal(ca.decisions().flags, cb.decisions().flags)


def _mlp(seed=0):
    torch.manual_seed(seed)
    layers = []
    for _ in range(5):
        layers += [torch.nn.Linear(32, 32), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers)


@pytest.mark.parametrize("preset", ["gnmr-calibrated", "default"])
@pytest.mark.parametrize("at", [2, 3, 8, 15, 20, 22])
def test_the_calibrated_trigger_guards_from_step_two(preset, at):
    """A five-layer MLP with steady gradients; at step `at` half of one
    weight's rows get x1000 gradients (ratio ~700). Before the fix the
    calibrated trigger was blind for its first 20 samples: this step passed
    with scale 1 and entered the unit's mean. Now the ceiling catches it:
    triggered, granted, reported, the gradient clipped; and a second spike
    15 steps later still reads as a spike (the first never entered the mean)."""
    model = _mlp()
    ctl = gnmr.Controller(model, preset)
    g = torch.Generator().manual_seed(5)
    x0 = torch.randn(64, 32, generator=g)
    w = model[4].weight  # the third Linear
    u = ctl.unit_of(w)
    for t in range(1, at + 17):
        model.zero_grad()
        model(x0 + 0.01 * torch.randn(64, 32, generator=g)).pow(2).mean().backward()
        spike = t in (at, at + 15)
        if spike:
            w.grad[:16] *= 1000.0
        before = w.grad.norm().item()
        s = ctl.step()
        rep = ctl.reports()
        if spike:
            assert int(rep["flags"][u]) & gnmr.Flag.TRIGGERED, f"step {t}: not triggered"
            assert s.triggered >= 1
            assert float(rep["ratio"][u]) > 300.0
            assert w.grad.norm().item() < 0.01 * before  # clipped (and normalised by the stabilizer)
            assert int(ctl.decisions().flags[u]) & gnmr.Flag.PROMOTE


def test_a_spike_in_one_ranks_shard_during_calibration_is_triggered_on_every_rank(tmp_path):
    """FSDP2 on two ranks, the default preset: at step 5 (the calibrated
    trigger still calibrating) only rank 1's shard of one weight's gradient
    is x1000. The sharded norm sees it; both ranks report the unit
    triggered, granted and promoted, with the same flags everywhere."""
    import pickle

    import torch.distributed as dist
    import torch.multiprocessing as mp
    import sharded_runs as R

    if not dist.is_available() or not dist.is_gloo_available() or not gnmr.sharded.DTensor:
        pytest.skip("needs torch.distributed with gloo and DTensor")
    mp.spawn(R.spike_run, args=(2, R.free_port(), str(tmp_path), "default", 5, 12), nprocs=2, join=True)
    runs = [pickle.load(open(tmp_path / f"spike{r}.pkl", "rb")) for r in range(2)]
    assert [s["flags"] for s in runs[0]] == [s["flags"] for s in runs[1]]
    rec = runs[0][4]
    assert rec["step"] == 5
    f = rec["flags"][rec["unit"]]
    assert f & gnmr.Flag.TRIGGERED and f & gnmr.Flag.GRANTED and f & gnmr.Flag.PROMOTE
    assert rec["summary"]["triggered"] >= 1
