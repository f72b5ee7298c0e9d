"""Units, norms, decisions applied to gradients, promotion and logs, checked
against values computed here in float64 or by hand."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

import gnmr
from conftest import batch, f32_bits, make_model


def backward(model, t=0):
    x, y = batch(t)
    model.zero_grad(set_to_none=True)
    F.mse_loss(model(x), y).backward()


def test_unit_forms_and_names():
    m = make_model()
    m.fc2.bias.requires_grad_(False)
    assert gnmr.Controller(m).unit_names == ["fc1.weight", "fc1.bias", "fc2.weight", "out.weight", "out.bias"]
    ctl = gnmr.Controller({"first": m.fc1, "w2": m.fc2.weight, "head": [m.out.weight, m.out.bias]})
    assert ctl.unit_names == ["first", "w2", "head"] and ctl.num_units == 3
    assert [ctl.unit_of(p) for p in (m.fc1.weight, m.fc1.bias, m.fc2.weight, m.out.bias)] == [0, 0, 1, 2]
    groups = [{"params": [m.fc1.weight], "name": "a"}, {"params": m.out.parameters()}]
    assert gnmr.Controller(groups).unit_names == ["a", "group1"]
    assert gnmr.Controller([m.fc1.weight, m.out.bias]).unit_names == ["param0", "param1"]
    assert gnmr.Controller(m, "zclip").unit_names == ["global"]
    assert gnmr.Controller(m, "zclip").num_units == 1
    assert len(list(gnmr.Controller(m).parameters())) == 5


def test_norms_are_the_units_l2_norms():
    m = make_model()
    ctl = gnmr.Controller({"a": m.fc1, "b": [m.fc2.weight], "c": [m.fc2.bias, m.out.weight, m.out.bias]})
    backward(m)
    members = [[m.fc1.weight, m.fc1.bias], [m.fc2.weight], [m.fc2.bias, m.out.weight, m.out.bias]]
    # before the step: the default preset's stabilizer rescales .grad in place
    wants = [torch.sqrt(sum((p.grad.double() ** 2).sum() for p in ps)).item() for ps in members]
    ctl.step()
    norms = ctl.reports()["norm"]
    for u, want in enumerate(wants):
        assert norms[u].item() == pytest.approx(want, rel=2e-7)  # one fp32 rounding
    glob = gnmr.Controller(m, "clip")  # torch's clip_grad_norm_(max_norm=1) on one global unit
    want = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in m.parameters())).item()
    assert want > 1.5
    glob.step()
    assert glob.reports()["norm"][0].item() == pytest.approx(want, rel=2e-7)
    clipped = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in m.parameters())).item()
    assert clipped == pytest.approx(1.0 / (1.0 + 1e-6 / want), rel=1e-6)


def test_decisions_apply_to_every_tensor_of_a_unit():
    m = make_model()
    # GNMR's own rule ("gnmr"): the spike below is granted after its warm-up
    ctl = gnmr.Controller({"a": m.fc1, "b": m.fc2, "c": m.out}, "gnmr", warmup=3)
    for t in range(6):
        backward(m, t)
        ctl.step()
    # A spike in one tensor of unit "b": both of its tensors are clipped by
    # the same scale; a NaN in one tensor of unit "c": both are dropped.
    backward(m, 6)
    m.fc2.weight.grad.mul_(100)
    m.out.bias.grad[0] = float("nan")
    before = {n: p.grad.clone() for n, p in m.named_parameters()}
    s = ctl.step()
    d = ctl.decisions()
    assert s.granted == 1 and s.nonfinite == 1
    scale = d.scale[1].item()
    assert 0 < scale < 1 and int(d.flags[1]) & gnmr.Flag.GRANTED
    for n in ("fc2.weight", "fc2.bias"):
        got = dict(m.named_parameters())[n].grad
        assert torch.equal(got, before[n] * torch.tensor(scale, dtype=torch.float32))
    assert m.out.weight.grad is None and m.out.bias.grad is None
    assert int(d.flags[2]) == gnmr.Flag.NONFINITE | gnmr.Flag.SKIP
    assert torch.equal(m.fc1.weight.grad, before["fc1.weight"]) and d.scale[0].item() == 1.0


def test_a_unit_without_gradient_is_not_a_sample():
    m = make_model()
    ctl = gnmr.Controller({"a": m.fc1, "b": m.fc2, "c": [m.out.weight, m.out.bias]}, "gnmr")
    backward(m)
    m.fc2.weight.grad = None
    m.fc2.bias.grad = None
    m.out.bias.grad = None  # half of unit c: its norm is the other half's
    ctl.step()
    r = ctl.reports()
    assert int(r["flags"][1]) & gnmr.Flag.ZERO_NORM and r["norm"][1].item() == 0.0
    assert r["norm"][2].item() == pytest.approx(m.out.weight.grad.double().norm().item(), rel=2e-7)


def test_global_skip_drops_every_gradient():
    m = make_model()
    ctl = gnmr.Controller(m, "skip-step", z=2.0, warmup=5)
    for t in range(8):
        backward(m, t)
        ctl.step()
    backward(m, 8)
    for p in m.parameters():
        p.grad.mul_(50)
    s = ctl.step()
    assert s.skip_step and all(p.grad is None for p in m.parameters())


def test_reset_moments_of_a_torch_optimizer():
    m = make_model()
    ctl = gnmr.Controller(m, "spam", tau=1.0, warmup=1)  # resets on every trigger
    opt = torch.optim.Adam(m.parameters(), lr=1e-3, amsgrad=True)
    backward(m)
    ctl.step(opt)
    opt.step()
    backward(m, 1)
    m.fc1.weight.grad.mul_(10)
    ctl.step()
    flags = ctl.decisions().flags
    u = ctl.unit_names.index("fc1.weight")
    assert int(flags[u]) & gnmr.Flag.RESET_MOMENTS
    n = ctl.reset_moments(opt)
    assert n == sum(1 for f in flags.tolist() if f & gnmr.Flag.RESET_MOMENTS)
    st = opt.state[m.fc1.weight]
    assert float(st["step"]) == 0
    for k in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
        assert not st[k].any()
    sgd = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    for p in m.parameters():
        p.grad = torch.ones_like(p)
    sgd.step()
    assert ctl.reset_moments(sgd) == n and sgd.state[m.fc1.weight]["momentum_buffer"] is None


@pytest.mark.skipif("gnmr-promote" not in gnmr.presets(), reason="no promoting preset in this build")
def test_promoted_units_follow_the_promote_flag():
    m = make_model()
    ctl = gnmr.Controller(m, "gnmr-promote", warmup=3)
    for t in range(5):
        backward(m, t)
        ctl.step()
        assert ctl.promoted_units() == []
    backward(m, 5)
    m.fc2.weight.grad.mul_(100)
    ctl.step()
    assert ctl.promoted_units() == ["fc2.weight"] and ctl.promoted("fc2.weight")
    assert not ctl.promoted("fc1.weight")


def test_promoted_reads_the_flags():
    """Without a promoting preset nothing is promoted, whatever triggers."""
    m = make_model()
    ctl = gnmr.Controller(m, "gnmr-clip", warmup=3)
    for t in range(6):
        backward(m, t)
        if t == 5:
            m.fc2.weight.grad.mul_(100)
        ctl.step()
    assert ctl.last_summary.granted == 1
    assert ctl.promoted_units() == [] and not ctl.promoted("fc2.weight")


def test_flag_bits_are_the_cpp_ones():
    # gnmr/core/types.hpp, by hand.
    assert [int(f) for f in (gnmr.Flag.TRIGGERED, gnmr.Flag.GRANTED, gnmr.Flag.IN_RECOVERY,
                             gnmr.Flag.DENIED, gnmr.Flag.COOLDOWN, gnmr.Flag.NONFINITE,
                             gnmr.Flag.SKIP, gnmr.Flag.RESET_MOMENTS, gnmr.Flag.PROMOTE,
                             gnmr.Flag.RELEASED, gnmr.Flag.WARMUP, gnmr.Flag.ZERO_NORM,
                             gnmr.Flag.SYSTEMIC)] == \
        [1 << k for k in range(13)]


def test_presets_api():
    names = gnmr.presets()
    assert names[:9] == ["none", "clip", "zclip", "adagc", "spam", "skip-step", "stabilizer", "gnmr",
                         "gnmr-ladder"]
    assert [p for p in names if gnmr.is_global(p)] == ["clip", "zclip", "skip-step"]
    assert gnmr.preset_overrides("zclip") == ["z", "warmup", "beta", "max_norm", "clip_factor"]
    assert "tau" in gnmr.preset_overrides("gnmr")
    assert gnmr.preset_overrides("stabilizer") == ["restart_every"]
    assert gnmr.preset_overrides("spam") == ["tau", "beta", "warmup", "restart_every"]
    assert gnmr.preset_overrides("adagc") == ["tau", "beta", "warmup", "max_norm"]


def test_stabilizer_restart_every_resets_every_unit_on_its_steps():
    # Stable-SPAM's restart (docs/presets.md, stabilizer): on steps 5 and 10
    # every unit's moments are reset; never without the override.
    m = make_model()
    on = gnmr.Controller(m, "stabilizer", restart_every=5)
    off = gnmr.Controller(m, "stabilizer")
    for t in range(1, 12):
        backward(m, t)
        on._step(apply=False)
        off._step(apply=False)
        reset_on = [bool(f & gnmr.Flag.RESET_MOMENTS) for f in on.decisions().flags.tolist()]
        assert reset_on == [t % 5 == 0] * on.num_units, t
        assert not any(f & gnmr.Flag.RESET_MOMENTS for f in off.decisions().flags.tolist())
    with pytest.raises(ValueError):
        gnmr.Controller(m, "gnmr", restart_every=5)  # not an override of gnmr


def test_summary_fields_and_counts():
    m = make_model()
    ctl = gnmr.Controller(m, warmup=2)
    for t in range(4):
        backward(m, t)
        s = ctl.step()
    assert s.ready and s.step == 4 == ctl.steps_done
    assert set(s.as_dict()) == {"step", "triggered", "granted", "in_recovery", "denied", "nonfinite",
                                "released", "max_ratio", "max_ratio_unit", "skip_step", "systemic",
                                "systemic_scale", "total_norm", "total_mean"}
    r = ctl.reports()
    assert s.max_ratio == r["ratio"].max().item() and s.max_ratio_unit == int(r["ratio"].argmax())
    ctl.reset()
    assert ctl.steps_done == 0 and ctl.last_summary is None


def test_event_log_and_trace_files(tmp_path):
    m = make_model()
    ctl = gnmr.Controller(m, warmup=3)
    with ctl:
        ctl.events(tmp_path / "ev.jsonl")
        ctl.trace(tmp_path / "t.csv")
        norms = []
        for t in range(8):
            backward(m, t)
            if t == 6:
                m.out.weight.grad.mul_(100)
            if t == 7:
                m.fc1.bias.grad[0] = float("inf")
            ctl.step()
            norms.append([f32_bits(v) for v in ctl.reports()["norm"].tolist()])
    rows = (tmp_path / "t.csv").read_text().splitlines()
    assert rows[0] == "step," + ",".join(ctl.unit_names)
    assert [int(r.split(",")[0]) for r in rows[1:]] == list(range(1, 9))
    assert [[f32_bits(float(c)) for c in r.split(",")[1:]] for r in rows[1:]] == norms
    events = [json.loads(line) for line in (tmp_path / "ev.jsonl").read_text().splitlines()]
    kinds = [(e["step"], e["name"], e["event"]) for e in events]
    assert (7, "out.weight", "trigger") in kinds and (7, "out.weight", "grant") in kinds
    assert (8, "fc1.bias", "nonfinite") in kinds
    assert next(e for e in events if e["event"] == "nonfinite")["action"] == "skip"


def test_systemic_rule_by_name():
    """gnmr-systemic, and the rule's overrides on gnmr: a step on which every
    unit jumps is systemic; each unserved unit is clipped to its own mean
    (clip-triggered) or every unit gets one scale (global-clip)."""
    for preset, over, action in [("gnmr-systemic", {}, 1),
                                 ("gnmr", {"systemic_action": "global-clip", "systemic_share": 0.25}, 2)]:
        m = make_model()
        ctl = gnmr.Controller(m, preset, warmup=3, max_o=1, **over)
        for t in range(6):
            backward(m, t)
            ctl.step()
            assert ctl.last_summary.systemic == 0
        backward(m, 6)
        for p in m.parameters():
            p.grad.mul_(100)
        s = ctl.step()
        assert s.systemic == action and s.granted == 1 and s.denied == 0
        flags = ctl.decisions().flags.tolist()
        assert sum(1 for f in flags if f & gnmr.Flag.SYSTEMIC) == (s.triggered - 1 if action == 1 else len(flags))
        if action == 2:
            assert 0.0 < s.systemic_scale < 1.0 and s.total_norm > s.total_mean > 0.0


def test_systemic_overrides_are_checked():
    with pytest.raises(ValueError, match="systemic_action' must be one of off, clip-triggered"):
        gnmr.Controller(make_model(), "gnmr", systemic_action="sometimes")
    with pytest.raises(ValueError, match="need the systemic rule on"):
        gnmr.Controller(make_model(), "gnmr-clip", systemic_share=0.3)
    with pytest.raises(TypeError, match="'systemic_action' must be a str"):
        gnmr.Controller(make_model(), "gnmr-systemic", systemic_action=1)
