"""gnmr.optim.AdamW and gnmr.Controller in everyday torch 2.x use: groups added
mid-run, frozen parameters, torch.optim.AdamW's flags, optimizer hooks,
copy.deepcopy, a full checkpoint under torch.load's weights_only default and
torch.compile. Each defect found trying the package as a new user has a test
here that failed before its fix.
"""
from __future__ import annotations

import copy
import io

import pytest
import torch
import torch.nn.functional as F

import gnmr
from conftest import batch, make_model, train


def _plain_steps(model, opt, steps, start=0):
    for t in range(start, start + steps):
        x, y = batch(t)
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()


def _twins(seed=21):
    a, b = make_model(seed), make_model(seed)
    b.load_state_dict(a.state_dict())
    return a, b


def test_add_param_group_mid_run_keeps_the_steps():
    """After 20 steps, a new group: the old groups continue at step 21, as in
    torch.optim.AdamW (before the fix they restarted their bias correction
    at step 1), and the new one starts at 1."""
    mine, ref = _twins()
    extra_m = torch.nn.Parameter(torch.randn(4, 4, generator=torch.Generator().manual_seed(3)))
    extra_r = torch.nn.Parameter(extra_m.detach().clone())
    units = dict(mine.named_parameters(), extra=extra_m)
    ctl = gnmr.Controller(units, "none")
    params = [p for n, p in mine.named_parameters()]
    opt = gnmr.optim.AdamW(params, lr=3e-3, weight_decay=0.01, controller=ctl)
    topt = torch.optim.AdamW(ref.parameters(), lr=3e-3, weight_decay=0.01)
    _plain_steps(mine, opt, 20)
    _plain_steps(ref, topt, 20)
    opt.add_param_group({"params": [extra_m], "lr": 1e-3})
    topt.add_param_group({"params": [extra_r], "lr": 1e-3})
    for t in range(20, 23):
        for model, o, e in ((mine, opt, extra_m), (ref, topt, extra_r)):
            x, y = batch(t)
            o.zero_grad()
            (F.mse_loss(model(x), y) + e.square().sum()).backward()
            o.step()
    for p, q in zip(mine.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=2e-5, atol=2e-6)
    torch.testing.assert_close(extra_m, extra_r, rtol=2e-5, atol=2e-6)
    sd = opt.state_dict()
    assert sd["state"][0]["step"] == 23
    assert sd["state"][len(params)]["step"] == 3
    # A round trip through state_dict restores the live steps, not stale ones.
    opt.load_state_dict(copy.deepcopy(sd))
    assert opt.state_dict()["state"][0]["step"] == 23


def test_frozen_parameter_is_accepted_like_torch():
    """torch.optim.AdamW accepts model.parameters() with a frozen tensor;
    so does gnmr's (before: ValueError naming no tensor). The frozen tensor
    is never touched."""
    model = make_model(5)
    model.fc1.bias.requires_grad_(False)
    frozen = model.fc1.bias.detach().clone()
    ctl = gnmr.Controller(model)
    assert "fc1.bias" not in ctl.unit_names
    opt = gnmr.optim.AdamW(model.parameters(), lr=3e-3, controller=ctl)
    train(model, ctl, opt, 30, guarded=True, faults={})
    assert torch.equal(model.fc1.bias, frozen)
    assert 1 not in opt.state_dict()["state"]  # no moments for the frozen tensor
    # Unfrozen later without a new controller: a clear error, nothing changed.
    model.fc1.bias.requires_grad_(True)
    x, y = batch(99)
    opt.zero_grad()
    F.mse_loss(model(x), y).backward()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=r"parameter 1 of group 0 \(shape \[32\]\) has a gradient"):
        opt.step()
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))


def test_unwatched_parameter_is_named():
    model = make_model(5)
    ctl = gnmr.Controller({"fc1": model.fc1})
    with pytest.raises(ValueError, match=r"parameter 2 of group 0 \(shape \[32, 32\]\) requires grad "
                                         r"but is not watched"):
        gnmr.optim.AdamW(model.parameters(), controller=ctl)


def test_a_refused_param_group_changes_nothing():
    model = make_model(5)
    ctl = gnmr.Controller({"fc1": model.fc1})
    opt = gnmr.optim.AdamW(model.fc1.parameters(), lr=1e-3, controller=ctl)
    with pytest.raises(ValueError, match="not watched"):
        opt.add_param_group({"params": list(model.fc2.parameters())})
    assert len(opt.param_groups) == 1
    with pytest.raises(ValueError, match="amsgrad"):
        opt.add_param_group({"params": [], "amsgrad": True})
    assert len(opt.param_groups) == 1


def test_torch_adamw_flags_are_accepted_or_refused():
    model = make_model(1)
    ctl = gnmr.Controller(model)
    opt = gnmr.optim.AdamW(model.parameters(), lr=1e-3, controller=ctl, foreach=True, fused=None,
                           capturable=False)
    assert opt.param_groups[0]["foreach"] is True and opt.param_groups[0]["amsgrad"] is False
    for flag in ("amsgrad", "maximize", "differentiable"):
        with pytest.raises(ValueError, match=flag):
            gnmr.optim.AdamW(model.parameters(), controller=ctl, **{flag: True})
    # A torch.optim.AdamW state dict (every flag in its groups) loads.
    ref = torch.optim.AdamW(make_model(1).parameters(), lr=1e-3)
    opt.load_state_dict(ref.state_dict())
    sd = ref.state_dict()
    sd["param_groups"][0]["amsgrad"] = True
    with pytest.raises(ValueError, match="amsgrad"):
        opt.load_state_dict(sd)


def test_optimizer_hooks_run():
    model = make_model(2)
    ctl = gnmr.Controller(model)
    opt = gnmr.optim.AdamW(model.parameters(), lr=1e-3, controller=ctl)
    seen = []
    h1 = opt.register_step_pre_hook(lambda o, a, k: seen.append(("pre", ctl.steps_done)))
    h2 = opt.register_step_post_hook(lambda o, a, k: seen.append(("post", ctl.steps_done)))
    sd_seen = []
    opt.register_state_dict_post_hook(lambda o, sd: sd_seen.append(len(sd["state"])))
    _plain_steps(model, opt, 2)
    assert seen == [("pre", 0), ("post", 1), ("pre", 1), ("post", 2)]
    h1.remove(), h2.remove()
    _plain_steps(model, opt, 1, start=2)
    assert len(seen) == 4
    opt.state_dict()
    assert sd_seen == [6]


def test_deepcopy_controller_alone_and_with_its_model():
    model = make_model(8)
    ctl = gnmr.Controller(model, "gnmr", tau=2.5)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    train(model, ctl, opt, 40, guarded=False)
    # With its model in one deepcopy: the copy watches the copied tensors.
    twin_model, twin_ctl = copy.deepcopy((model, ctl))
    assert twin_ctl.steps_done == 40 and twin_ctl.unit_names == ctl.unit_names
    assert all(twin_ctl.unit_of(p) == ctl.unit_of(q)
               for p, q in zip(twin_model.parameters(), model.parameters()))
    twin_opt = torch.optim.AdamW(twin_model.parameters(), lr=3e-3)
    twin_opt.load_state_dict(copy.deepcopy(opt.state_dict()))
    a = train(model, ctl, opt, 40, guarded=False, start=40)
    b = train(twin_model, twin_ctl, twin_opt, 40, guarded=False, start=40)
    assert a == b
    # Alone: a controller over copies of the tensors, with the state.
    solo = copy.deepcopy(ctl)
    assert solo.steps_done == 80 and solo.state_dict()["blob"].equal(ctl.state_dict()["blob"])
    glob = copy.deepcopy(gnmr.Controller(model, "clip"))
    assert glob.unit_names == ["global"]


def test_full_checkpoint_loads_with_weights_only(tmp_path):
    """model + gnmr.optim.AdamW + controller, saved with torch.save, loaded
    with torch.load's default (weights_only=True from torch 2.6)."""
    model = make_model(4)
    ctl = gnmr.Controller(model)
    opt = gnmr.optim.AdamW(model.parameters(), lr=3e-3, controller=ctl)
    train(model, ctl, opt, 50, guarded=True)
    path = tmp_path / "ckpt.pt"
    torch.save({"model": model.state_dict(), "optim": opt.state_dict(), "gnmr": ctl.state_dict()}, path)
    ck = torch.load(path) if torch.__version__ >= "2.6" else torch.load(path, weights_only=True)
    m2 = make_model(0)
    c2 = gnmr.Controller(m2)
    o2 = gnmr.optim.AdamW(m2.parameters(), lr=3e-3, controller=c2)
    m2.load_state_dict(ck["model"])
    o2.load_state_dict(ck["optim"])
    c2.load_state_dict(ck["gnmr"])
    assert train(model, ctl, opt, 20, guarded=True, start=50) == \
        train(m2, c2, o2, 20, guarded=True, start=50)


def test_torch_compile_of_a_training_step():
    """A compiled training step that calls gnmr.optim.AdamW.step(): no crash,
    the same weights and controller steps as eager, and where the graph
    breaks. aot_eager keeps the test fast; inductor compiles the same graph."""
    import torch._dynamo as dynamo

    dynamo.reset()
    eager_model, comp_model = _twins(6)

    def make(model):
        ctl = gnmr.Controller(model)
        return ctl, gnmr.optim.AdamW(model.parameters(), lr=3e-3, controller=ctl)

    e_ctl, e_opt = make(eager_model)
    c_ctl, c_opt = make(comp_model)

    def step(model, opt, x, y):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    compiled = torch.compile(step, backend="aot_eager")
    for t in range(5):
        x, y = batch(t)
        step(eager_model, e_opt, x, y)
        compiled(comp_model, c_opt, x, y)
    for p, q in zip(eager_model.parameters(), comp_model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    assert c_ctl.steps_done == 5
    # Where dynamo stops (docs/python.md states it): at loss.backward(); the
    # optimizer step, with gnmr's C++ calls, then runs eagerly.
    explain = dynamo.explain(step)(comp_model, c_opt, *batch(5))
    assert any("backward" in r.reason for r in explain.break_reasons)
    dynamo.reset()
