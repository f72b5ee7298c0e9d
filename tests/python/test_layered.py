"""Layered controllers from Python: "outer+inner" names (a peer's rule with
a GNMR preset inside it, one step; gnmr/host/layered.hpp) through
gnmr.Controller and gnmr.optim.AdamW. The decisions equal the C++
library's bit for bit in test_reference.py; here: the names and overrides
API, the guarded optimizer, and that the layered decision is the two rules'
combination (scales multiply, skip from either, promotion from GNMR).
"""
from __future__ import annotations

import pytest
import torch

import gnmr
from conftest import FAULTS, make_model, train


def test_layered_names_and_overrides():
    assert not gnmr.is_global("clip+gnmr")
    keys = gnmr.preset_overrides("spam+gnmr")
    assert "restart_every" in keys and "max_o" in keys and "tau" in keys
    model = make_model()
    with pytest.raises(ValueError, match="outer rule"):
        gnmr.Controller(model, "gnmr+stabilizer")
    with pytest.raises(ValueError, match="inner rule"):
        gnmr.Controller(model, "stabilizer+zclip")
    with pytest.raises(ValueError, match="applies to neither"):
        gnmr.Controller(model, "stabilizer+gnmr", z=2.0)
    ctl = gnmr.Controller(model, "clip+gnmr", max_norm=0.5, max_o=2)
    assert ctl.preset == "clip+gnmr"
    assert ctl.num_units == len(list(model.parameters()))  # per-unit, never collapsed


def _decide(preset, steps=120, **over):
    """The controller's decisions on a fixed stream of gradients (no
    optimizer: the gradients do not depend on earlier decisions, so every
    preset sees the same stream): noisy, with x30 spikes and a NaN."""
    model = make_model()
    ctl = gnmr.Controller(model, preset, **over)
    params = list(model.parameters())
    g = torch.Generator().manual_seed(5)
    out = []
    for t in range(steps):
        for i, p in enumerate(params):
            x = torch.randn(p.shape, generator=g) * (1.0 + 0.1 * i)
            if t in (40, 41, 90) and i == 1:
                x = x * 30.0
            if t == 70 and i == 2:
                x.view(-1)[0] = float("nan")
            p.grad = x
        ctl.step()
        d = ctl.decisions()
        out.append((d.scale.clone(), d.flags.clone()))
    return out


def test_layered_is_the_combination_of_its_two_rules():
    """Per unit and step: the layered scale is the stabilizer's times
    gnmr's, SKIP comes from either, PROMOTE from gnmr alone."""
    stab, g, both = _decide("stabilizer"), _decide("gnmr"), _decide("stabilizer+gnmr")
    acted_outer = acted_inner = 0
    for (ss, fs), (sg, fg), (sb, fb) in zip(stab, g, both):
        assert torch.equal(sb, ss * sg)
        skip, promote = int(gnmr.Flag.SKIP), int(gnmr.Flag.PROMOTE)
        assert torch.equal(fb & skip, (fs | fg) & skip)
        assert torch.equal(fb & promote, fg & promote)
        acted_outer += int((ss < 1).sum())
        acted_inner += int((sg < 1).sum()) + int((fg & promote != 0).sum())
    assert acted_outer > 0 and acted_inner > 0


def test_guarded_adamw_with_a_layered_controller_keeps_the_weights_finite():
    model = make_model(3)
    ctl = gnmr.Controller(model, "stabilizer+gnmr", tau=2.5)
    opt = gnmr.optim.AdamW(model.parameters(), lr=3e-3, controller=ctl)
    recs = train(model, ctl, opt, 200, guarded=True)  # asserts finite weights each step
    # Every non-finite fault step skipped its unit.
    for t, (kind, name) in FAULTS.items():
        if kind != "x1000" and t < 200:
            u = ctl.unit_names.index(name)
            assert recs[t][2][u] & gnmr.Flag.SKIP
    assert sum(s["granted"] for s, _, _ in recs) > 0
    # The state round-trips through state_dict like any controller's.
    sd = ctl.state_dict()
    other = gnmr.Controller(make_model(3), "stabilizer+gnmr", tau=2.5)
    other.load_state_dict(sd)
    assert other.steps_done == ctl.steps_done
