"""Checkpoints: torch.save({"model", "optim", "gnmr"}) mid-run, then load
into fresh objects and continue: the weights and every decision are
bit-identical to a run that never stopped. A corrupt or mismatched state
raises ValueError and changes nothing.
"""
from __future__ import annotations

import copy
import io

import pytest
import torch

import gnmr
from conftest import make_model, train


def build(guarded, preset="gnmr-ladder", **over):
    model = make_model(11)
    ctl = gnmr.Controller(model, preset, tau=2.5, **over)
    if guarded:
        opt = gnmr.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01, controller=ctl)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    return model, ctl, opt


TORCH2 = int(torch.__version__.split(".")[0]) >= 2


def load(buf):
    buf.seek(0)
    # weights_only=True is torch >= 2.6's default; torch 1.13's version of
    # it cannot read a float (so not even torch's own optimizer state).
    return torch.load(buf, weights_only=True) if TORCH2 else torch.load(buf)


@pytest.mark.parametrize("guarded", [True, False], ids=["gnmr-adamw", "torch-adamw"])
def test_round_trip_mid_run_changes_nothing(guarded):
    model, ctl, opt = build(guarded)
    straight = train(model, ctl, opt, 200, guarded=guarded)
    final = [p.detach().clone() for p in model.parameters()]

    model, ctl, opt = build(guarded)
    first = train(model, ctl, opt, 100, guarded=guarded)
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "optim": opt.state_dict(), "gnmr": ctl.state_dict()}, buf)
    del model, ctl, opt

    model, ctl, opt = build(guarded)
    ck = load(buf)
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["optim"])
    ctl.load_state_dict(ck["gnmr"])
    assert ctl.steps_done == 100
    rest = train(model, ctl, opt, 100, guarded=guarded, start=100)

    assert first + rest == straight
    for p, q in zip(model.parameters(), final):
        assert torch.equal(p, q)
    # The resumed half had decisions to carry over (a lock, a mean).
    assert any(s["granted"] or s["nonfinite"] for s, _, _ in rest)


def test_state_dict_layout():
    model, ctl, _ = build(False)
    sd = ctl.state_dict()
    assert sd["format"] == "gnmr.Controller" and sd["version"] == 1
    assert sd["preset"] == "gnmr-ladder" and sd["overrides"] == {"tau": 2.5}
    assert sd["unit_names"] == ctl.unit_names
    blob = sd["blob"]
    assert blob.dtype == torch.uint8 and blob.dim() == 1
    assert bytes(blob[:8].tolist()) == b"GNMRSTAT"
    assert sd["state_version"] == int.from_bytes(bytes(blob[8:12].tolist()), "little")


def test_a_corrupt_or_mismatched_state_raises_and_changes_nothing():
    model, ctl, opt = build(False)
    train(model, ctl, opt, 60, guarded=False)
    good = ctl.state_dict()
    twin_model, twin, twin_opt = build(False)
    train(twin_model, twin, twin_opt, 60, guarded=False)

    def bad(**changes):
        sd = dict(good)
        sd.update(changes)
        return sd

    flipped = good["blob"].clone()
    flipped[70] ^= 1
    cases = [
        (bad(blob=flipped), "checksum mismatch"),
        (bad(blob=good["blob"][:-1].clone()), "truncated blob"),
        (bad(blob=torch.cat([good["blob"], good["blob"][:1]])), "trailing bytes"),
        (bad(blob=torch.zeros(100, dtype=torch.uint8)), "bad magic"),
        (bad(blob=good["blob"].to(torch.int32)), "1-D uint8 tensor"),
        (bad(blob="GNMRSTAT"), "uint8 tensor or bytes"),
        (bad(preset="gnmr"), "saved by preset 'gnmr'"),
        (bad(unit_names=good["unit_names"][:-1]), "unit names differ"),
        (bad(unit_names=list(reversed(good["unit_names"]))), "unit names differ"),
        (bad(format="something else"), "not a gnmr.Controller state"),
        (bad(version=2), "not a gnmr.Controller state"),
        ({k: v for k, v in good.items() if k != "blob"}, "missing key 'blob'"),
    ]
    before = bytes(ctl.state_dict()["blob"].tolist())
    for sd, msg in cases:
        with pytest.raises(ValueError, match=msg):
            ctl.load_state_dict(sd)
        assert bytes(ctl.state_dict()["blob"].tolist()) == before
    with pytest.raises(TypeError):
        ctl.load_state_dict([("blob", good["blob"])])

    # Another controller layout (other policies, same units): the C++
    # fingerprint check, with its message.
    other = gnmr.Controller(model, "gnmr-ladder", mean="window")
    with pytest.raises(ValueError, match="policy mismatch: the blob was saved by .*; this controller is "):
        other.load_state_dict(good)
    # And the failed loads changed nothing: both runs go on identically.
    a = train(model, ctl, opt, 40, guarded=False, start=60)
    b = train(twin_model, twin, twin_opt, 40, guarded=False, start=60)
    assert a == b


def test_cpu_state_retuned_on_resume():
    """Other overrides than at saving are allowed: the state stays valid."""
    model, ctl, opt = build(False)
    train(model, ctl, opt, 30, guarded=False)
    retuned = gnmr.Controller(model, "gnmr-ladder", tau=4.0, max_o=2)
    retuned.load_state_dict(ctl.state_dict())
    assert retuned.steps_done == 30


def test_torch_adamw_state_loads_into_gnmr_adamw():
    """A run started with torch.optim.AdamW continues under gnmr's AdamW: the
    per-tensor steps become the units' steps, beta powers recomputed."""
    model = make_model(12)
    plain = torch.optim.AdamW(model.parameters(), lr=3e-3)
    ctl = gnmr.Controller(model, "none")
    train(model, ctl, plain, 20, guarded=False, faults={})
    twin = make_model(12)
    twin.load_state_dict(model.state_dict())
    twin_opt = torch.optim.AdamW(twin.parameters(), lr=3e-3)
    # A copy: torch 2.x's load_state_dict keeps the very moment tensors it is
    # given (1.13 deep-copied them), so twin_opt and opt would share them and
    # both would step them.
    twin_opt.load_state_dict(copy.deepcopy(plain.state_dict()))

    opt = gnmr.optim.AdamW(model.parameters(), lr=3e-3, controller=ctl)
    opt.load_state_dict(plain.state_dict())
    train(model, ctl, opt, 10, guarded=True, faults={}, start=20)
    twin_ctl = gnmr.Controller(twin, "none")
    train(twin, twin_ctl, twin_opt, 10, guarded=False, faults={}, start=20)
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p, q, rtol=2e-5, atol=2e-6)
    assert opt.state_dict()["state"][0]["step"] == 30
