"""gnmr.integrations.torchtitan: the optimizer container torchtitan's
Trainer builds from ``config.optimizer.build(model_parts=...)``, driven here
as the Trainer drives it (torchtitan 0.3.0's Trainer itself needs CUDA:
docs/python.md, "At scale"; bench/torchtitan_gpu.sh runs it).
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("torchtitan.components.optimizer", reason="torchtitan not installed")

import gnmr  # noqa: E402
from conftest import batch, make_model  # noqa: E402
from gnmr.integrations.torchtitan import GnmrOptimizersContainer, gnmr_adamw  # noqa: E402

SPIKES = {12: 1e3, 13: 1e3}
OVERRIDES = dict(tau=2.5, warmup=5)


def train(model, step_fn, zero_fn, steps) -> None:
    for t in steps:
        x, y = batch(t)
        zero_fn()
        loss = F.mse_loss(model(x), y) * SPIKES.get(t, 1.0)
        loss.backward()
        step_fn()


def test_container_is_the_guarded_adamw():
    """The container's step equals gnmr.optim.AdamW with torchtitan's
    default_adamw hyperparameters under a controller over the same units,
    bit for bit; the spikes are acted on."""
    a, b = make_model(3), make_model(3)
    opts = gnmr_adamw(lr=3e-3, preset="gnmr", overrides=OVERRIDES).build(model_parts=[a])
    assert isinstance(opts, GnmrOptimizersContainer)
    ctl = gnmr.Controller(b, "gnmr", **OVERRIDES)
    ref = gnmr.optim.AdamW(b.parameters(), lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                           controller=ctl)
    assert opts.controller.unit_names == ctl.unit_names
    acted = []
    for t in range(20):
        train(a, opts.step, opts.zero_grad, [t])
        train(b, ref.step, ref.zero_grad, [t])
        assert torch.equal(opts.controller.decisions().flags, ctl.decisions().flags)
        acted.append(opts.controller.last_summary.granted)
    assert any(acted[12:14])
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)


def test_state_dict_carries_the_controller():
    model = make_model(3)
    opts = gnmr_adamw(lr=3e-3, preset="gnmr", overrides=OVERRIDES).build(model_parts=[model])
    train(model, opts.step, opts.zero_grad, range(12))
    sd = opts.state_dict()
    assert any(k.startswith("gnmr.controller.") for k in sd)
    twin_model = make_model(3)
    twin_model.load_state_dict(model.state_dict())
    twin = gnmr_adamw(lr=3e-3, preset="gnmr", overrides=OVERRIDES).build(model_parts=[twin_model])
    # A copy, as a checkpoint would hand over: torch's load_state_dict keeps
    # the given tensors, and the two optimizers must not share moments.
    twin.load_state_dict(copy.deepcopy(sd))
    assert twin.controller.steps_done == opts.controller.steps_done == 12
    train(model, opts.step, opts.zero_grad, range(12, 20))
    train(twin_model, twin.step, twin.zero_grad, range(12, 20))
    for p, q in zip(model.parameters(), twin_model.parameters()):
        assert torch.equal(p, q)


def test_fresh_state_dict_does_not_step():
    """torchtitan's init_optim_state runs a zero-gradient step on an empty
    optimizer state; gnmr.optim.AdamW's state is never empty, so saving a
    fresh container leaves its controller at step 0."""
    model = make_model(3)
    opts = gnmr_adamw(lr=3e-3).build(model_parts=[model])
    opts.state_dict()
    assert opts.controller.steps_done == 0


def test_refusals():
    from torchtitan.components.optimizer.optimizer import ParamGroupConfig

    cfg = GnmrOptimizersContainer.Config(param_groups=[
        ParamGroupConfig(pattern=".*", optimizer_name="Adam", optimizer_kwargs={"lr": 1e-3})])
    with pytest.raises(ValueError, match="AdamW groups only"):
        cfg.build(model_parts=[make_model(3)])
    with pytest.raises(ValueError, match="pipeline parallelism"):
        gnmr_adamw().build(model_parts=[make_model(3), make_model(4)])


def test_float8_converter_gets_operator_units_and_promotion():
    ao = pytest.importorskip("torchao.float8", reason="torchao not installed")
    model = make_model(3)
    ao.convert_to_float8_training(model)  # what torchtitan's float8 converter calls
    opts = gnmr_adamw(lr=3e-3, preset="gnmr", overrides=OVERRIDES).build(model_parts=[model])
    assert opts.controller.unit_names == ["fc1", "fc2", "out"]
    promoted = []
    for t in range(16):
        train(model, opts.step, opts.zero_grad, [t])
        promoted += opts.controller.promoted_units()
    assert promoted, "a spike on a float8 operator is granted promotion"
