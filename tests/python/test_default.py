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
