"""gnmr.optim.AdamW against torch.optim.AdamW.

* When the controller never acts, the two give the same weights to fp32
  rounding, step after step, with two parameter groups (one without weight
  decay) and a learning-rate schedule.
* When it acts, every step equals a one-step torch AdamW applied to what the
  decisions say (the independent reference of skip, scale, moment reset and
  global skip): a skipped unit's weights and moments are bit-identical to
  before, the others match to fp32 rounding.
* The premise of Controller.step(): torch's optimizers leave a tensor whose
  grad is None untouched (single-tensor, foreach and, where this torch has
  it, fused paths).
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import gnmr
from conftest import FAULTS, batch, inject, make_model

# One step of rounding differences (the same AdamW, a different evaluation
# order of the same fp32 expressions), fed back through training.
RTOL, ATOL = 2e-5, 2e-6


def groups(model):
    decay = [p for n, p in model.named_parameters() if n.endswith("weight")]
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias")]
    return [{"params": decay}, {"params": no_decay, "weight_decay": 0.0, "lr": 2e-3}]


@pytest.mark.parametrize("preset", ["none", "gnmr"])
def test_equals_torch_adamw_when_the_controller_never_acts(preset):
    a = make_model(1)
    b = copy.deepcopy(a)
    ctl = gnmr.Controller(a, preset)
    opt_a = gnmr.optim.AdamW(groups(a), lr=5e-3, weight_decay=0.05, controller=ctl)
    opt_b = torch.optim.AdamW(groups(b), lr=5e-3, weight_decay=0.05)
    sched_a = torch.optim.lr_scheduler.StepLR(opt_a, step_size=20, gamma=0.5)
    sched_b = torch.optim.lr_scheduler.StepLR(opt_b, step_size=20, gamma=0.5)
    for t in range(60):
        for m, opt, sched in ((a, opt_a, sched_a), (b, opt_b, sched_b)):
            x, y = batch(t)
            opt.zero_grad()
            F.mse_loss(m(x), y).backward()
            opt.step()
            sched.step()
        assert ctl.last_summary.triggered == 0 and ctl.last_summary.nonfinite == 0
        for pa, pb in zip(a.parameters(), b.parameters()):
            torch.testing.assert_close(pa, pb, rtol=RTOL, atol=ATOL)
    state_a = opt_a.state_dict()["state"]  # packed in group order
    order_a = [p for g in opt_a.param_groups for p in g["params"]]
    order_b = [p for g in opt_b.param_groups for p in g["params"]]
    for k, (pa, pb) in enumerate(zip(order_a, order_b)):
        sa, sb = state_a[k], opt_b.state[pb]
        assert sa["step"] == int(sb["step"]) == 60
        torch.testing.assert_close(sa["exp_avg"], sb["exp_avg"], rtol=RTOL, atol=ATOL)
        torch.testing.assert_close(sa["exp_avg_sq"], sb["exp_avg_sq"], rtol=RTOL, atol=1e-9)
    # The updates are not trivially equal: the weights moved.
    assert (a.fc1.weight - make_model(1).fc1.weight).abs().max() > 1e-2


def torch_twin_step(params, grads, states, decisions, skip_step, lr, betas, eps, wd, unit_of):
    """One torch.optim.AdamW step on copies, doing what the decisions say:
    a skipped unit's tensors get no gradient, a clipped one a scaled
    gradient, a RESET_MOMENTS one a fresh state."""
    twins = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt = torch.optim.AdamW(twins, lr=lr, betas=betas, eps=eps, weight_decay=wd)
    for tw, g, st, u in zip(twins, grads, states, unit_of):
        scale, flags = float(decisions.scale[u]), int(decisions.flags[u])
        if skip_step or flags & gnmr.Flag.SKIP:
            tw.grad = None
            continue
        tw.grad = g * scale if scale != 1.0 else g.clone()
        if not flags & gnmr.Flag.RESET_MOMENTS and st["step"] > 0:
            opt.state[tw] = {"step": torch.tensor(float(st["step"])),
                             "exp_avg": st["exp_avg"].clone(), "exp_avg_sq": st["exp_avg_sq"].clone()}
    opt.step()
    return twins, opt


@pytest.mark.parametrize("preset,overrides", [("gnmr", {"tau": 2.0}), ("spam", {"tau": 4.0, "warmup": 5}),
                                              ("skip-step", {"z": 3.0, "warmup": 10}),
                                              ("stabilizer", {})])
def test_each_step_is_torch_adamw_on_what_the_decisions_say(preset, overrides):
    model = make_model(2)
    ctl = gnmr.Controller(model, preset, **overrides)
    lr, betas, eps, wd = 3e-3, (0.9, 0.99), 1e-8, 0.02
    opt = gnmr.optim.AdamW(model.parameters(), lr=lr, betas=betas, eps=eps, weight_decay=wd,
                           controller=ctl)
    params = list(model.parameters())
    unit_of = [ctl.unit_of(p) for p in params]
    seen = {"skip": 0, "scale": 0, "reset": 0, "global": 0}
    for t in range(200):
        x, y = batch(t)
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        inject(model, FAULTS.get(t))
        grads = [p.grad.clone() for p in params]
        before = [p.detach().clone() for p in params]
        packed = opt.state_dict()["state"]
        states = []
        for k in range(len(params)):
            st = packed.get(k, {})
            states.append({"step": st.get("step", 0),
                           "exp_avg": st["exp_avg"].clone() if "exp_avg" in st else None,
                           "exp_avg_sq": st["exp_avg_sq"].clone() if "exp_avg_sq" in st else None})
        opt.step()
        after = opt.state_dict()["state"]
        d, s = ctl.decisions(), ctl.last_summary
        twins, _ = torch_twin_step(before, grads, states, d, s.skip_step, lr, betas, eps, wd, unit_of)
        for k, (p, tw, b, st, u) in enumerate(zip(params, twins, before, states, unit_of)):
            flags = int(d.flags[u])
            if s.skip_step or flags & gnmr.Flag.SKIP:
                seen["global" if s.skip_step else "skip"] += 1
                assert torch.equal(p, b), f"step {t}: a skipped unit's weights changed"
                if st["exp_avg"] is not None:
                    assert torch.equal(opt.state[p]["exp_avg"], st["exp_avg"])
                    assert torch.equal(opt.state[p]["exp_avg_sq"], st["exp_avg_sq"])
                assert after[k]["step"] == st["step"]
                continue
            seen["scale"] += float(d.scale[u]) != 1.0
            seen["reset"] += bool(flags & gnmr.Flag.RESET_MOMENTS)
            torch.testing.assert_close(p, tw, rtol=1e-6, atol=1e-7)
    if preset == "gnmr":
        assert seen["skip"] > 0 and seen["scale"] > 0
    if preset == "spam":
        assert seen["reset"] > 0
    if preset == "skip-step":
        assert seen["global"] > 0
    if preset == "stabilizer":
        assert seen["scale"] > 0


@pytest.mark.parametrize("kind", ["AdamW", "SGD"])
@pytest.mark.parametrize("path", ["single", "foreach", "fused"])
def test_torch_optimizers_skip_a_tensor_whose_grad_is_none(kind, path):
    params = [torch.nn.Parameter(torch.randn(5, 3)) for _ in range(3)]
    kw = {"lr": 0.1}
    if kind == "SGD":
        kw["momentum"] = 0.9
    if path != "single":
        kw[path] = True
    try:
        opt = getattr(torch.optim, kind)(params, **kw)
    except (TypeError, RuntimeError, ValueError) as e:
        pytest.skip(f"torch {torch.__version__} has no {path} {kind} on the CPU: {e}")
    for p in params:
        p.grad = torch.randn_like(p)
    try:
        opt.step()  # every tensor gets state
    except RuntimeError as e:
        pytest.skip(f"torch {torch.__version__} cannot run {path} {kind} on the CPU: {e}")
    for p in params:
        p.grad = torch.randn_like(p)
    params[1].grad = None
    frozen = params[1].detach().clone()
    state = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in opt.state[params[1]].items()}
    moved = params[0].detach().clone()
    opt.step()
    assert torch.equal(params[1], frozen)
    for k, v in opt.state[params[1]].items():
        assert torch.equal(v, state[k]) if torch.is_tensor(v) else v == state[k]
    assert not torch.equal(params[0], moved)


def test_lr_tensor_and_groups_on_the_cpu():
    a = make_model(4)
    b = copy.deepcopy(a)
    ctl = gnmr.Controller(a, "none")
    opt_a = gnmr.optim.AdamW(a.parameters(), lr=torch.tensor(1e-2), controller=ctl)
    opt_b = torch.optim.AdamW(b.parameters(), lr=1e-2)
    for t in range(5):
        for m, opt in ((a, opt_a), (b, opt_b)):
            x, y = batch(t)
            opt.zero_grad()
            F.mse_loss(m(x), y).backward()
            opt.step()
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pa, pb, rtol=RTOL, atol=ATOL)


def test_a_parameter_without_grad_is_left_alone():
    model = make_model(5)
    ctl = gnmr.Controller(model)
    opt = gnmr.optim.AdamW(model.parameters(), lr=1e-2, controller=ctl)
    for t in range(3):
        x, y = batch(t)
        opt.zero_grad(set_to_none=True)
        F.mse_loss(model(x), y).backward()
        model.out.bias.grad = None
        before = model.out.bias.detach().clone()
        opt.step()
        assert torch.equal(model.out.bias, before)
        u = ctl.unit_names.index("out.bias")
        assert int(ctl.decisions().flags[u]) & gnmr.Flag.ZERO_NORM
    k = [n for n, _ in model.named_parameters()].index("out.bias")
    assert opt.state_dict()["state"][k]["step"] == 0
