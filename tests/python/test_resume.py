"""Resume is exact: a run stopped at a checkpoint and resumed ends with the
uninterrupted run's weights and controller state, bit for bit, for every
preset, layered ones and the default included, through every path that
saves state: gnmr.Controller.state_dict, gnmr.optim.AdamW's state dict
(alone, as the Hugging Face Trainer and Lightning save it), the Trainer's
and Lightning's callbacks, and torch.distributed.checkpoint.

The state that must travel: every mean, ratio window and lock of the inner
(GNMR) rule, the outer rule's running statistics (the stabilizer's), the
calibrated trigger's statistics, the step counter, and the optimizer's
moments and per-unit bias-correction steps.
"""
from __future__ import annotations

import glob
import os
import pickle

import pytest
import torch
import torch.nn.functional as F

import gnmr
from conftest import batch, make_model

OUTERS = ("clip", "zclip", "adagc", "spam", "skip-step", "stabilizer")
INNERS = ("gnmr", "gnmr-ladder", "gnmr-promote", "gnmr-clip", "gnmr-systemic", "gnmr-calibrated")
LAYERED = [f"{o}+{i}" for o in OUTERS for i in INNERS]
# One layered preset per outer rule, every inner rule once among them (the
# framework tests below run these; the controller-level test runs all 36).
LAYERED_SAMPLE = ["clip+gnmr-promote", "zclip+gnmr", "adagc+gnmr-ladder", "spam+gnmr-clip",
                  "skip-step+gnmr-systemic", "stabilizer+gnmr-calibrated"]


def _spiky_grads(model, t):
    """Gradient faults a guard must act on: x1000 on one tensor at some
    steps, a NaN at one, from step 3 on (while the calibrated trigger is
    still calibrating)."""
    if t in (3, 9, 17, 26):
        model.fc2.weight.grad.mul_(1000.0)
    if t == 21:
        model.fc1.bias.grad.view(-1)[0] = float("nan")


def _train(model, opt, ctl, steps, guarded):
    for t in steps:
        x, y = batch(t)
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        _spiky_grads(model, t)
        if not guarded:
            ctl.step(opt)
        opt.step()


def _same_weights(a, b):
    bad = [n for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()) if not torch.equal(p, q)]
    assert not bad, f"{len(bad)} tensors differ after resume: {bad[:4]}"


# gnmr-noise-floor steps on each unit's noise too: test_noise_floor.py resumes it.
@pytest.mark.parametrize("preset", [p for p in gnmr.presets() if p != "gnmr-noise-floor"] + LAYERED)
def test_every_preset_resumes_bit_for_bit_through_state_dicts(preset, tmp_path):
    """Controller + torch AdamW, and gnmr.optim.AdamW whose own state dict
    carries the controller: stop at step 16 (torch.save / torch.load with
    weights_only), resume, and end at the straight run's bits."""
    for guarded in (False, True):
        def build():
            model = make_model(3)
            ctl = gnmr.Controller(model, preset)
            opt = (gnmr.optim.AdamW(model.parameters(), lr=3e-3, controller=ctl) if guarded
                   else torch.optim.AdamW(model.parameters(), lr=3e-3))
            return model, ctl, opt

        m1, c1, o1 = build()
        _train(m1, o1, c1, range(1, 33), guarded)
        m2, c2, o2 = build()
        _train(m2, o2, c2, range(1, 17), guarded)
        path = tmp_path / f"ckpt-{guarded}.pt"
        state = {"model": m2.state_dict(), "optim": o2.state_dict()}
        if not guarded:
            state["gnmr"] = c2.state_dict()
        torch.save(state, path)
        m3, c3, o3 = build()
        state = torch.load(path, weights_only=True)
        m3.load_state_dict(state["model"])
        o3.load_state_dict(state["optim"])  # gnmr.optim.AdamW: the controller too
        if not guarded:
            c3.load_state_dict(state["gnmr"])
        assert c3.steps_done == 16
        _train(m3, o3, c3, range(17, 33), guarded)
        _same_weights(m1, m3)
        assert torch.equal(c1.state_dict()["blob"], c3.state_dict()["blob"]), (preset, guarded)


def test_a_gnmr_adamw_state_dict_carries_the_controller_and_a_bad_one_changes_nothing():
    model = make_model(1)
    ctl = gnmr.Controller(model)
    opt = gnmr.optim.AdamW(model.parameters(), lr=1e-3, controller=ctl)
    _train(model, opt, ctl, range(1, 6), True)
    sd = opt.state_dict()
    assert sd["gnmr"]["preset"] == "default" and sd["gnmr"]["format"] == "gnmr.Controller"
    # A state dict without the controller's part (torch.optim.AdamW's, DCP's
    # reduced one) loads the optimizer and leaves the controller alone.
    before = ctl.state_dict()["blob"]
    opt.load_state_dict({k: v for k, v in sd.items() if k != "gnmr"})
    assert torch.equal(ctl.state_dict()["blob"], before)
    # Another preset's controller state: refused, optimizer and controller unchanged.
    twin = make_model(1)
    other = gnmr.optim.AdamW(twin.parameters(), lr=1e-3, controller=gnmr.Controller(twin, "gnmr"))
    with pytest.raises(ValueError, match="preset"):
        opt.load_state_dict(other.state_dict())
    assert torch.equal(ctl.state_dict()["blob"], before)
    # A broken optimizer part after a good controller part: the controller is put back.
    moved = gnmr.optim.AdamW(model.parameters(), lr=1e-3, controller=ctl)
    _train(model, moved, ctl, range(6, 9), True)
    after = ctl.state_dict()["blob"]
    broken = dict(sd, param_groups=sd["param_groups"] + sd["param_groups"])
    with pytest.raises(ValueError):
        moved.load_state_dict(broken)
    assert torch.equal(ctl.state_dict()["blob"], after)
    assert int(moved.state_dict()["state"][0]["step"]) == 3  # its own three steps, not sd's five


# ------------------------------------------------------- Hugging Face Trainer ---
def _hf_run(tmp, preset, route, resume=None):
    """A tiny Llama from a config under transformers.Trainer: bf16 autocast
    on the CPU, accumulation 2, max_grad_norm 1.0, linear schedule with
    warm-up, a checkpoint every 12 steps; x1000 spikes in one operator's
    gradient at steps 5, 14 and 19 and a NaN at step 16 (before and after
    the checkpoint: the resumed run must meet them with the controller's
    state as the straight run has it). route: "callback" (GnmrCallback,
    torch AdamW) or "optimizer" (gnmr.optim.AdamW, no callback)."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from test_integrations_hf import Tokens, tiny_llama
    from gnmr.integrations.hf import GnmrCallback

    class Faults(transformers.TrainerCallback):
        # Before the optimizer step, after backward: the gradients gnmr reads.
        def on_pre_optimizer_step(self, args, state, control, model=None, **kw):
            w = dict(model.named_parameters())["model.layers.0.mlp.down_proj.weight"]
            if state.global_step in (5, 14, 19):
                w.grad.mul_(1000.0)
            if state.global_step == 16:
                w.grad.view(-1)[3] = float("nan")

    model = tiny_llama(7)
    args = transformers.TrainingArguments(
        output_dir=str(tmp), max_steps=24, per_device_train_batch_size=4, gradient_accumulation_steps=2,
        learning_rate=3e-3, max_grad_norm=1.0, lr_scheduler_type="linear", warmup_steps=5, bf16=True,
        logging_steps=4, save_steps=12, save_strategy="steps", report_to=[], use_cpu=True, seed=0,
        data_seed=0, disable_tqdm=True, dataloader_num_workers=0)
    kw = {"callbacks": [Faults()]}
    if route == "callback":
        kw["callbacks"].append(GnmrCallback(preset=preset))
    else:
        ctl = gnmr.Controller(model, preset)
        opt = gnmr.optim.AdamW(model.parameters(), lr=3e-3, controller=ctl)
        kw["optimizers"] = (opt, transformers.get_linear_schedule_with_warmup(opt, 5, 24))
    transformers.Trainer(model=model, args=args, train_dataset=Tokens(), **kw).train(resume_from_checkpoint=resume)
    for p in model.parameters():
        assert torch.isfinite(p).all()  # the NaN never reached the weights
    return model


@pytest.mark.parametrize("preset,route", [("default", "callback"), ("default", "optimizer")] +
                         [(p, ("callback", "optimizer")[i % 2]) for i, p in enumerate(LAYERED_SAMPLE)])
def test_trainer_resume_is_bit_for_bit(tmp_path, preset, route):
    straight = _hf_run(tmp_path, preset, route)
    resumed = _hf_run(tmp_path, preset, route, resume=str(tmp_path / "checkpoint-12"))
    _same_weights(straight, resumed)


# ------------------------------------------------------------------ Lightning ---
def _lightning_fit(folder, preset, route, ckpt=None):
    L = pytest.importorskip("lightning.pytorch")
    from test_integrations_lightning import loader
    from gnmr.integrations.lightning import GnmrCallback

    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = make_model(4)

        def training_step(self, b, i):
            x, y = b
            return F.mse_loss(self.net(x), y)

        def on_after_backward(self):
            if self.trainer.global_step in (3, 11, 27):
                self.net.fc2.weight.grad.mul_(1000.0)

        def configure_optimizers(self):
            if route == "optimizer":
                return gnmr.optim.AdamW(self.parameters(), lr=3e-3,
                                        controller=gnmr.Controller(self.net, preset))
            return torch.optim.AdamW(self.parameters(), lr=3e-3)

    L.seed_everything(0, verbose=False)
    model = Net()
    cbs = [L.callbacks.ModelCheckpoint(dirpath=str(folder), every_n_train_steps=20, save_top_k=-1)]
    if route == "callback":
        cbs.append(GnmrCallback(preset=preset))
    tr = L.Trainer(max_steps=40, accelerator="cpu", devices=1, accumulate_grad_batches=2,
                   gradient_clip_val=1.0, callbacks=cbs, logger=False, enable_progress_bar=False,
                   enable_model_summary=False)
    tr.fit(model, loader(), ckpt_path=ckpt)
    return model


@pytest.mark.parametrize("preset,route", [("default", "callback"), ("default", "optimizer")] +
                         [(p, ("optimizer", "callback")[i % 2]) for i, p in enumerate(LAYERED_SAMPLE)])
def test_lightning_resume_is_bit_for_bit(tmp_path, preset, route):
    straight = _lightning_fit(tmp_path, preset, route)
    ckpts = sorted(glob.glob(os.path.join(tmp_path, "*step=20*.ckpt")))
    assert ckpts, os.listdir(tmp_path)
    resumed = _lightning_fit(tmp_path / "resumed", preset, route, ckpt=ckpts[0])
    _same_weights(straight, resumed)


# ------------------------------------------------ torch.distributed.checkpoint ---
@pytest.mark.parametrize("preset", ["default", "clip+gnmr-promote"])
def test_dcp_resume_on_the_same_ranks_is_bit_for_bit(tmp_path, preset):
    """FSDP2 on 2 ranks saves model, gnmr.optim.AdamW and the controller
    with DCP at step 14; a fresh pair of ranks loads it and trains on: the
    same flags, scales and weights as the uninterrupted run, bit for bit.
    (test_dcp.py reshards onto other rank counts, where the per-rank sums
    regroup and the scales agree to a tolerance.)"""
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import sharded_runs as R

    if not dist.is_available() or not dist.is_gloo_available() or not gnmr.sharded.DTensor:
        pytest.skip("needs torch.distributed with gloo and DTensor")
    got = {}
    for phase in ("save", "load"):
        mp.spawn(R.dcp_run, args=(2, R.free_port(), str(tmp_path), phase, str(tmp_path / "ckpt"), 14, 30, preset),
                 nprocs=2, join=True)
        with open(tmp_path / f"{phase}2_rank0.pkl", "rb") as f:
            got[phase] = pickle.load(f)
    a, b = got["save"], got["load"]
    assert b["resumed_at"] == 14
    assert [r["flags"] for r in a["rec"]] == [r["flags"] for r in b["rec"]]
    assert [r["scale"] for r in a["rec"]] == [r["scale"] for r in b["rec"]]
    for name, w in a["weights"].items():
        assert torch.equal(b["weights"][name], w), name
