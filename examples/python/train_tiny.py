#!/usr/bin/env python3
"""train_tiny.py — a small character-level transformer on the fortunes text,
guarded by gnmr, with injected gradient faults.

The three ways to use gnmr from PyTorch (docs/python.md):

  --mode adamw       gnmr.optim.AdamW: norms, controller and the guarded
                     update in one step (on CUDA: no host sync at all)
  --mode controller  gnmr.Controller.step(opt) before any torch optimizer
                     (here torch.optim.AdamW): skipped units get grad=None,
                     clipped ones a scaled gradient, moments reset in opt
  --promote          the model asks ctl.promoted(unit) in its forward and
                     runs a promoted block's matmuls without the emulated
                     low precision (needs a promoting preset: the
                     default promotes)

Units are one per block part (embedding, each layer's attention and MLP,
the head): several tensors recover together. The run writes the event log
and the norm trace (replay it: gnmr-replay OUT/trace.csv --preset default),
checkpoints {model, optim, gnmr} half-way, reloads the checkpoint into fresh
objects and finishes from there.

    .venv/bin/python examples/python/train_tiny.py [--steps 400] [--device cpu]

(.venv: the venv of docs/python.md, where gnmr is installed.) The defaults
took 69 s on the shared two-core development machine.
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import gnmr


def load_text(path: str) -> bytes:
    p = Path(path)
    if p.is_dir():  # fortune files have no extension (skip *.dat, *.u8)
        files = sorted(f for f in p.iterdir() if f.is_file() and not f.suffix)
        return b"".join(f.read_bytes() for f in files)
    return p.read_bytes()


def low_precision(x: torch.Tensor) -> torch.Tensor:
    """Emulated FP8-like activations: 3 mantissa bits, round to nearest."""
    m, e = torch.frexp(x)
    return torch.ldexp(torch.round(m * 16) / 16, e)


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x, attn_exact: bool, mlp_exact: bool):
        b, t, d = x.shape
        h = self.ln1(x)
        h = h if attn_exact else low_precision(h)
        q, k, v = self.qkv(h).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        h = self.ln2(x)
        h = h if mlp_exact else low_precision(h)
        return x + self.down(F.gelu(self.up(h)))


class TinyLM(nn.Module):
    def __init__(self, vocab: int, d: int = 96, layers: int = 3, heads: int = 4, ctx: int = 64):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(ctx, d))
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        self.promoted = lambda unit: False  # set by main() for --promote

    def units(self) -> dict:
        """Recoverable units: one per block part, several tensors each."""
        u = {"embed": [self.embed.weight, self.pos]}
        for i, b in enumerate(self.blocks):
            u[f"h{i}.attn"] = [*b.ln1.parameters(), *b.qkv.parameters(), *b.proj.parameters()]
            u[f"h{i}.mlp"] = [*b.ln2.parameters(), *b.up.parameters(), *b.down.parameters()]
        u["head"] = [*self.ln.parameters(), *self.head.parameters()]
        return u

    def forward(self, idx):
        x = self.embed(idx) + self.pos[: idx.shape[1]]
        for i, b in enumerate(self.blocks):
            # Promotion: a unit the controller promoted runs exactly next step.
            x = b(x, self.promoted(f"h{i}.attn"), self.promoted(f"h{i}.mlp"))
        return self.head(self.ln(x))


def batches(data: torch.Tensor, steps: int, batch: int, ctx: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        i = torch.randint(0, len(data) - ctx - 1, (batch,), generator=g)
        x = torch.stack([data[j: j + ctx] for j in i.tolist()])
        y = torch.stack([data[j + 1: j + ctx + 1] for j in i.tolist()])
        yield x, y


def inject(model: TinyLM, step: int, every: int) -> str:
    """A fault every `every` steps: x1000 on a block's gradient, and NaN/Inf
    in one tensor now and then (the kinds low precision produces)."""
    if every <= 0 or step == 0 or step % every:
        return ""
    k = step // every
    b = model.blocks[k % len(model.blocks)]
    with torch.no_grad():
        if k % 4 == 3:
            b.up.weight.grad.view(-1)[0] = float("nan")
            return "nan"
        if k % 4 == 1:
            b.qkv.bias.grad[0] = float("inf")
            return "inf"
        b.proj.weight.grad.mul_(1000.0)
        return "x1000"


def build(args, vocab, device):
    torch.manual_seed(args.seed)
    model = TinyLM(vocab).to(device)
    overrides = {"warmup": 20} if args.preset.startswith("gnmr") else {}
    ctl = gnmr.Controller(model.units(), args.preset, **overrides)
    if args.promote:
        model.promoted = ctl.promoted
    if args.mode == "adamw":
        opt = gnmr.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, controller=ctl)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    return model, ctl, opt


def train(args, model, ctl, opt, data, first, steps, stats):
    t0 = time.time()
    for step, (x, y) in enumerate(batches(data, steps, args.batch, 64, args.seed + first), start=first):
        x, y = x.to(args.device), y.to(args.device)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        fault = inject(model, step, args.fault_every)
        if args.mode == "adamw":
            opt.step()
            s = ctl.last_summary
        else:
            s = ctl.step(opt)
            opt.step()
        if fault or step % 50 == 0 or step == first + steps - 1:
            # Reading the summary waits for this step on CUDA: only here.
            stats["granted"] += s.granted
            print(f"step {step:4d}  loss {loss.item():.3f}  fault {fault or '-':6s} "
                  f"triggered {s.triggered} granted {s.granted} in_recovery {s.in_recovery} "
                  f"nonfinite {s.nonfinite} promoted {ctl.promoted_units()}  "
                  f"({(time.time() - t0) / (step - first + 1) * 1e3:.0f} ms/step)")
        for p in model.parameters():
            if not torch.isfinite(p).all():
                raise SystemExit(f"step {step}: a non-finite value reached the weights")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("adamw", "controller"), default="adamw")
    ap.add_argument("--preset", default="default", choices=gnmr.presets())
    ap.add_argument("--promote", action="store_true")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--fault-every", type=int, default=37)
    ap.add_argument("--text", default="/usr/share/games/fortunes")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default="build/train_tiny")
    ap.add_argument("--seed", type=int, default=0)
    # One thread: on a small, shared machine torch's OpenMP threads spin
    # against each other and a step gets several times slower.
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    text = load_text(args.text)
    vocab = sorted(set(text))
    data = torch.tensor([vocab.index(c) for c in text[:1_000_000]] if len(vocab) < 256 else list(text),
                        dtype=torch.long)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"gnmr {gnmr.__version__}, torch {torch.__version__}: {len(data)} characters, "
          f"vocab {len(vocab)}, mode {args.mode}, preset {args.preset}, device {args.device}")

    model, ctl, opt = build(args, len(vocab), args.device)
    print(f"{ctl.num_units} units: {', '.join(ctl.unit_names)}")
    ctl.events(out / "events.jsonl")
    ctl.trace(out / "trace.csv")
    stats = {"granted": 0}
    half = args.steps // 2
    train(args, model, ctl, opt, data, 0, half, stats)

    # Checkpoint the three together, then continue in fresh objects.
    torch.save({"model": model.state_dict(), "optim": opt.state_dict(), "gnmr": ctl.state_dict()},
               out / "checkpoint.pt")
    ctl.close()
    model, ctl, opt = build(args, len(vocab), args.device)
    ck = torch.load(out / "checkpoint.pt")
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["optim"])
    ctl.load_state_dict(ck["gnmr"])
    print(f"resumed from {out / 'checkpoint.pt'} at controller step {ctl.steps_done}")
    ctl.events(out / "events_resumed.jsonl")
    train(args, model, ctl, opt, data, half, args.steps - half, stats)
    ctl.close()
    print(f"done: no NaN reached the weights; event logs and trace in {out}/ "
          f"(gnmr-replay {out}/trace.csv --preset {args.preset} reruns the first half's norms)")


if __name__ == "__main__":
    main()
