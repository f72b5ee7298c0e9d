#!/usr/bin/env python3
"""lightning_fit.py — gnmr in Lightning: a small character-level MLP language
model on the fortunes text, with gnmr.integrations.lightning.GnmrCallback
(the controller runs in on_before_optimizer_step, before Lightning's
gradient_clip_val), ModelCheckpoint saving the controller with the model,
then a resume from the mid-run checkpoint. A gradient spike hits one layer
at --spike-at.

    .venv/bin/python examples/python/lightning_fit.py [--steps 60] [--out /tmp/gnmr-lightning]
"""
from __future__ import annotations

import argparse
import glob
from pathlib import Path

import lightning.pytorch as L
import torch
import torch.nn.functional as F

from gnmr.integrations.lightning import GnmrCallback

CTX = 16


def load_bytes(path: str, limit: int = 100_000) -> torch.Tensor:
    p = Path(path)
    files = sorted(f for f in p.iterdir() if f.is_file() and not f.suffix) if p.is_dir() else [p]
    return torch.tensor(list(b"".join(f.read_bytes() for f in files)[:limit]), dtype=torch.long)


class CharMLP(L.LightningModule):
    def __init__(self, spike_at: int):
        super().__init__()
        self.emb = torch.nn.Embedding(256, 32)
        self.hidden = torch.nn.Linear(32 * CTX, 256)
        self.head = torch.nn.Linear(256, 256)
        self.spike_at = spike_at

    def forward(self, x):
        return self.head(torch.tanh(self.hidden(self.emb(x).flatten(1))))

    def training_step(self, batch, i):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("loss", loss, prog_bar=False)
        return loss

    def on_after_backward(self):
        if self.trainer.global_step == self.spike_at:
            self.hidden.weight.grad.mul_(1e4)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


def loader(data: torch.Tensor):
    idx = torch.arange(0, len(data) - CTX - 1, 7)
    xs = torch.stack([data[i:i + CTX] for i in idx])
    ys = data[idx + CTX]
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xs, ys), batch_size=64, shuffle=True)


def fit(out: str, steps: int, spike_at: int, data, ckpt=None):
    L.seed_everything(0, verbose=False)
    model = CharMLP(spike_at)
    cb = GnmrCallback()  # preset "default"
    saver = L.callbacks.ModelCheckpoint(dirpath=out, every_n_train_steps=max(steps // 2, 1), save_top_k=-1)
    trainer = L.Trainer(max_steps=steps, accelerator="cpu", devices=1, gradient_clip_val=1.0,
                        callbacks=[cb, saver], logger=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(model, loader(data), ckpt_path=ckpt)
    return trainer, cb


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--spike-at", type=int, default=40)
    ap.add_argument("--text", default="/usr/share/games/fortunes")
    ap.add_argument("--out", default="/tmp/gnmr-lightning")
    a = ap.parse_args()
    data = load_bytes(a.text)
    trainer, cb = fit(a.out, a.steps, a.spike_at, data)
    m = {k: float(v) for k, v in trainer.callback_metrics.items()}
    print(f"trained {a.steps} steps: loss {m['loss']:.3f}; controller steps {cb.controller.steps_done}")
    ckpt = sorted(glob.glob(f"{a.out}/*step={max(a.steps // 2, 1)}*.ckpt"))[0]
    trainer2, cb2 = fit(a.out + "/resumed", a.steps, a.spike_at, data, ckpt=ckpt)
    print(f"resumed from {Path(ckpt).name}: controller steps {cb2.controller.steps_done} "
          f"(restored from the checkpoint, then continued)")


if __name__ == "__main__":
    main()
