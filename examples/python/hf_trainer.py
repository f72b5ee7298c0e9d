#!/usr/bin/env python3
"""hf_trainer.py — gnmr in the Hugging Face Trainer: a small Llama built from a
config (no download) learns the fortunes text, byte by byte, with
gnmr.integrations.hf.GnmrCallback between backward and the optimizer step.

The callback runs the controller on the gradients (gradient accumulation and
the Trainer's max_grad_norm clip included: the clip moves after gnmr's
decisions), logs gnmr's figures with the Trainer's, saves the controller in
every checkpoint and restores it on resume. A gradient spike hits one
operator at --spike-at to show it acting.

    .venv/bin/python examples/python/hf_trainer.py [--steps 60] [--out /tmp/gnmr-hf]

(.venv: the venv of docs/python.md with `pip install -r
tests/python/requirements-extras.txt`.)
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch
import transformers

from gnmr.integrations.hf import GnmrCallback

SEQ = 64


def load_bytes(path: str, limit: int = 200_000) -> torch.Tensor:
    p = Path(path)
    files = sorted(f for f in p.iterdir() if f.is_file() and not f.suffix) if p.is_dir() else [p]
    data = b"".join(f.read_bytes() for f in files)[:limit]
    return torch.tensor(list(data), dtype=torch.long)


class Chunks(torch.utils.data.Dataset):
    def __init__(self, data: torch.Tensor):
        self.data = data[: len(data) // SEQ * SEQ].view(-1, SEQ)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return {"input_ids": self.data[i], "labels": self.data[i]}


class Spike(transformers.TrainerCallback):
    """Multiplies one operator's gradient by 1e4 at one optimizer step."""

    def __init__(self, param: torch.Tensor, at: int):
        self.param, self.at = param, at

    def on_pre_optimizer_step(self, args, state, control, **kw):
        if state.global_step == self.at:
            self.param.grad.mul_(1e4)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--spike-at", type=int, default=40)
    ap.add_argument("--text", default="/usr/share/games/fortunes")
    ap.add_argument("--out", default="/tmp/gnmr-hf")
    a = ap.parse_args()
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                   max_position_embeddings=SEQ)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    gnmr_cb = GnmrCallback()  # preset "default", one unit per parameter tensor
    spike = Spike(model.model.layers[1].mlp.down_proj.weight, a.spike_at)
    args = transformers.TrainingArguments(
        output_dir=a.out, max_steps=a.steps, per_device_train_batch_size=8,
        gradient_accumulation_steps=2, learning_rate=3e-3, warmup_steps=10, max_grad_norm=1.0,
        logging_steps=10, save_steps=max(a.steps // 2, 1), report_to=[], use_cpu=True,
        disable_tqdm=True, seed=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Chunks(load_bytes(a.text)),
                                   callbacks=[spike, gnmr_cb])
    trainer.train()
    for h in trainer.state.log_history:
        if "loss" in h:
            print(f"step {h['step']:4d}  loss {h['loss']:.3f}  gnmr: granted {h['gnmr/granted']:.0f}, "
                  f"max ratio {h['gnmr/max_ratio']:.1f}, in recovery {h['gnmr/in_recovery']:.0f}")
    print(f"controller steps: {gnmr_cb.controller.steps_done}; checkpoints with gnmr.pt in {a.out}")


if __name__ == "__main__":
    main()
