"""gnmr.integrations.lightning.GnmrCallback in a real lightning.pytorch.Trainer
on the CPU: gradient accumulation, gradient_clip_val after gnmr's decisions,
logging, and ModelCheckpoint resume with the same decisions. Skipped without
lightning (tests/python/requirements-extras.txt).
"""
from __future__ import annotations

import glob
import os

import pytest
import torch
import torch.nn.functional as F

L = pytest.importorskip("lightning.pytorch")

import gnmr  # noqa: E402
from conftest import batch, make_model  # noqa: E402
from gnmr.integrations.lightning import GnmrCallback  # noqa: E402

SPIKES = {12: "x1e4", 25: "nan", 31: "x1e4"}


class Tiny(L.LightningModule):
    def __init__(self, guarded=False):
        super().__init__()
        self.net = make_model(4)
        self.guarded = guarded
        self.ctl = None
        self._hit = set()

    def training_step(self, b, i):
        x, y = b
        return F.mse_loss(self.net(x), y)

    def on_after_backward(self):
        # A fault once per optimizer step (on its first micro-batch), before
        # the callbacks' on_before_optimizer_step.
        t = self.trainer.global_step
        if t in SPIKES and t not in self._hit:
            self._hit.add(t)
            g = self.net.fc2.weight.grad
            if SPIKES[t] == "x1e4":
                g.mul_(1e4)
            else:
                g.view(-1)[0] = float("nan")

    def configure_optimizers(self):
        if self.guarded:
            self.ctl = gnmr.Controller(self.net, "gnmr")
            return gnmr.optim.AdamW(self.parameters(), lr=3e-3, controller=self.ctl)
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


def loader():
    # 40 micro-batches: one epoch is 20 optimizer steps, so the checkpoint at
    # step 20 ends an epoch (Lightning restarts a resumed epoch's data from
    # its beginning unless the loader is stateful).
    data = [batch(t) for t in range(10)]
    xs = torch.cat([x for x, _ in data]).split(16)
    ys = torch.cat([y for _, y in data]).split(16)
    return torch.utils.data.DataLoader(list(zip(xs, ys)), batch_size=None, shuffle=False)


def fit(folder, max_steps, ckpt=None, cb=None, guarded=False, model=None):
    L.seed_everything(0, verbose=False)
    model = model or Tiny(guarded)
    cb = cb or GnmrCallback(preset="gnmr", warmup=5)
    saver = L.callbacks.ModelCheckpoint(dirpath=str(folder), every_n_train_steps=20, save_top_k=-1)
    tr = L.Trainer(max_steps=max_steps, accelerator="cpu", devices=1, accumulate_grad_batches=2,
                   gradient_clip_val=1.0, callbacks=[cb, saver], logger=False, log_every_n_steps=1,
                   enable_progress_bar=False, enable_model_summary=False)
    tr.fit(model, loader(), ckpt_path=ckpt)
    return model, cb, tr


def test_lightning_acts_logs_and_resumes_identically(tmp_path):
    m1, c1, tr1 = fit(tmp_path, 40)
    ctl = c1.controller
    assert ctl.steps_done == 40  # once per optimizer step (accumulation 2)
    assert "gnmr/granted" in tr1.callback_metrics
    assert all(torch.isfinite(p).all() for p in m1.parameters())
    ckpts = sorted(glob.glob(os.path.join(tmp_path, "*step=20*.ckpt")))
    assert ckpts, os.listdir(tmp_path)
    m2, c2, _ = fit(tmp_path / "resumed", 40, ckpt=ckpts[0])
    assert c2.controller.steps_done == 40
    assert torch.equal(c1.controller.state_dict()["blob"], c2.controller.state_dict()["blob"])
    for p, q in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_lightning_acted_on_the_spikes(tmp_path):
    events = tmp_path / "events.jsonl"
    model = Tiny()
    ctl = gnmr.Controller(model.net, "gnmr", warmup=5)
    ctl.events(events)
    fit(tmp_path, 40, cb=GnmrCallback(ctl), model=model)
    ctl.close()
    text = events.read_text()
    assert '"nonfinite"' in text and '"grant"' in text


def test_lightning_with_gnmr_adamw(tmp_path):
    model, cb, tr = fit(tmp_path, 10, guarded=True, cb=GnmrCallback())
    assert cb.controller is model.ctl and model.ctl.steps_done == 10
    with pytest.raises(ValueError, match="another controller"):
        fit(tmp_path / "other", 10, guarded=True, cb=GnmrCallback(gnmr.Controller(make_model(0))))


def test_aux_feeds_a_noise_floor_controller_each_step(tmp_path):
    """gnmr-noise-floor reads each step's aux: the callback calls aux(module,
    controller) once per optimizer step, before the controller steps (the
    controller's finished aux norms are the square roots of what it gave),
    and refuses to start without it."""
    model = Tiny()
    ctl = gnmr.Controller(model.net, "gnmr-noise-floor", warmup=2)
    with pytest.raises(ValueError, match="aux="):
        fit(tmp_path / "no-aux", 2, cb=GnmrCallback(ctl), model=model)
    assert ctl.steps_done == 0
    given = []

    def aux(module, c):
        assert module is model and c is ctl
        a = torch.rand(len(c.unit_names)) + 0.5
        given.append(a)
        return a

    ctl.trace(tmp_path / "n.csv", aux=tmp_path / "a.csv")
    fit(tmp_path / "run", 6, cb=GnmrCallback(ctl, aux=aux), model=model)
    ctl.trace(None)
    assert ctl.steps_done == 6 and len(given) == 6
    rows = (tmp_path / "a.csv").read_text().splitlines()[1:]
    assert len(rows) == 6
    for row, a in zip(rows, given):  # each step finished the aux it was given that step
        got = torch.tensor([float(v) for v in row.split(",")[1:]])
        torch.testing.assert_close(got, a.sqrt(), rtol=1e-6, atol=0)
