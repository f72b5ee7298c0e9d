#!/usr/bin/env python3
"""nvfp4_arms.py — run-time promotion against NVIDIA's static recipes at the
same high-precision share, NVFP4 training emulated on the CPU. The protocol
(written before any run) is docs/record/nvfp4.md, "Protocol: run-time
promotion against the static recipes".

A Hugging Face Llama from its config (trainer_stability.py's: vocabulary
256, hidden 64, 4 heads) at --depth blocks, trained on the fortunes text by
a plain loop (AdamW 0.9/0.95, weight decay 0.1 on matrices, linear warm-up
then cosine, clip at 1.0 after gnmr's decisions); every block's linear
layer converted by gnmr.integrations.nvfp4 (the paper's recipe), the head,
embeddings and norms high precision. Arms:

  low            every block linear NVFP4
  high           no NVFP4 (fp32 GEMMs)
  static-layers  the first and the last block's linears fp32 for the whole run
  late-switch    every linear fp32 for the last --late-share of the steps
                 (default: static-layers' share, 2 / depth)
  default        the preset "default" over one unit per operator, its
                 promotions run in fp32 for their lock
  noise-floor    the preset "gnmr-noise-floor" (noise_c --noise-c, max_o
                 --max-o, lock 8) fed nvfp4.noise_partials each step
  random         --max-o operators drawn at random, in fp32, re-drawn every
                 8 steps (noise-floor's slots without its choice)

Each run writes one CSV row (arm, seed, the mean validation loss over the
last 10% of the steps, the high-precision share of operator-steps, wall
seconds) to OUT/results.csv; runs already there are not run again, so a
stopped queue resumes where it stopped. --summary prints, per arm, the
mean loss, the share, the paired difference to `low` and the gap closed
(L_low - L_arm) / (L_low - L_high) with bootstrap 95% intervals.

    python bench/python/nvfp4_arms.py --arms low,high --seeds 1-5 --steps 600 --out build/nvfp4-arms
"""
from __future__ import annotations

import argparse
import csv
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import trainer_stability as ts  # noqa: E402  (the data and the bootstrap)

ARMS = ("low", "high", "static-layers", "late-switch", "default", "noise-floor", "random")
FIELDS = ["arm", "seed", "final_loss", "hp_share", "ops", "steps", "depth", "max_o", "noise_c", "wall_s"]
LOCK = 8


def build_llama(depth: int):
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=192,
                                   num_hidden_layers=depth, num_attention_heads=4, num_key_value_heads=4,
                                   max_position_embeddings=ts.SEQ)
    return transformers.LlamaForCausalLM(cfg)


def block_of(path: str) -> int:
    """The block index of a path "model.layers.K....", -1 elsewhere."""
    parts = path.split(".")
    return int(parts[2]) if len(parts) > 2 and parts[:2] == ["model", "layers"] else -1


def run(arm: str, seed: int, a) -> dict:
    import torch
    import torch.nn.functional as F

    import gnmr
    from gnmr.integrations import nvfp4
    from gnmr.integrations import torchao as gnmr_ao

    torch.set_num_threads(1)
    t0 = time.time()
    data = ts.load_bytes(a.text)
    n_val = 64 * ts.SEQ
    train, val = data[:-n_val], data[-n_val:].view(-1, ts.SEQ)
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(train) - ts.SEQ, (a.steps * a.batch,), generator=g)
    torch.manual_seed(seed)
    model = build_llama(a.depth)
    last = a.depth - 1
    if arm != "high":
        def keep(mod, path):
            b = block_of(path)
            if b < 0:
                return False  # the head stays high precision
            return not (arm == "static-layers" and b in (0, last))
        nvfp4.convert_to_nvfp4_training(model, module_filter_fn=keep, seed=seed)
    ops = list(nvfp4.nvfp4_modules(model).items())
    n_ops = len([p for p, _ in model.named_modules() if block_of(p) >= 0 and p.split(".")[-1].endswith("proj")])

    ctl = None
    if arm in ("default", "noise-floor"):
        units = gnmr_ao.operator_units(model)
        ctl = (gnmr.Controller(units, "default") if arm == "default" else
               gnmr.Controller(units, "gnmr-noise-floor", noise_c=a.noise_c, max_o=a.max_o, lock=LOCK))
        gnmr_ao.enable_promotion(model, ctl)

    # Arms that choose their fp32 operators themselves: a forward that
    # reads the current step's set (nothing is promoted through gnmr).
    forced: set = set()
    if arm in ("late-switch", "random"):
        for path, mod in ops:
            orig = mod.forward

            def forward(x, mod=mod, path=path, orig=orig):
                if path in forced:
                    return F.linear(x, mod.weight, mod.bias)
                return orig(x)
            mod.forward = forward
    late_from = a.steps - round(a.late_share * a.steps)
    rng = random.Random(seed * 7919 + 3)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95))

    def lr_at(t):
        if t < a.warmup:
            return a.lr * (t + 1) / a.warmup
        return a.lr * 0.5 * (1 + math.cos(math.pi * (t - a.warmup) / max(1, a.steps - a.warmup)))

    def val_loss():
        model.eval()
        with torch.no_grad():
            out = model(input_ids=val, labels=val).loss.item()
        model.train()
        return out

    hp_op_steps = 0
    evals = []
    eval_from = a.steps - max(1, a.steps // 10)
    for t in range(a.steps):
        if arm == "late-switch":
            forced = {p for p, _ in ops} if t >= late_from else set()
        elif arm == "random" and t % LOCK == 0:
            forced = set(rng.sample([p for p, _ in ops], min(a.max_o, len(ops))))
        # Operators in fp32 this step: the forced ones, gnmr's promoted ones,
        # the static ones (not converted at all).
        if arm == "high":
            hp_op_steps += n_ops
        elif arm == "static-layers":
            hp_op_steps += n_ops - len(ops)
        elif ctl is not None:
            hp_op_steps += sum(1 for _, m in ops if gnmr_ao.is_promoted(m))
        else:
            hp_op_steps += len(forced)
        for grp in opt.param_groups:
            grp["lr"] = lr_at(t)
        nvfp4.set_step(model, t)
        idx = starts[t * a.batch:(t + 1) * a.batch].tolist()
        x = torch.stack([train[s:s + ts.SEQ] for s in idx])
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        if ctl is not None:
            aux = nvfp4.noise_partials(model, ctl) if ctl.needs_aux else None
            ctl.step(opt, aux=aux)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if t >= eval_from and (t - eval_from) % max(1, (a.steps - eval_from) // 4) == 0 or t == a.steps - 1:
            evals.append(val_loss())
    return {"arm": arm, "seed": seed, "final_loss": round(sum(evals) / len(evals), 6),
            "hp_share": round(hp_op_steps / (n_ops * a.steps), 6), "ops": n_ops, "steps": a.steps,
            "depth": a.depth, "max_o": a.max_o if arm in ("noise-floor", "random") else "",
            "noise_c": a.noise_c if arm == "noise-floor" else "", "wall_s": round(time.time() - t0, 1)}


def summary(path: Path) -> None:
    rows = list(csv.DictReader(open(path)))
    by = {}
    for r in rows:
        by.setdefault(r["arm"], {})[int(r["seed"])] = r
    low, high = by.get("low", {}), by.get("high", {})
    print(f"{'arm':<14}{'n':>4}{'loss':>10}{'share':>9}   arm - low [95%]            gap closed [95%]")
    for arm in ARMS:
        if arm not in by:
            continue
        seeds = sorted(by[arm])
        loss = sum(float(by[arm][s]["final_loss"]) for s in seeds) / len(seeds)
        share = sum(float(by[arm][s]["hp_share"]) for s in seeds) / len(seeds)
        line = f"{arm:<14}{len(seeds):>4}{loss:>10.4f}{share:>9.4f}"
        both = [s for s in seeds if s in low]
        if both and arm != "low":
            d = [float(by[arm][s]["final_loss"]) - float(low[s]["final_loss"]) for s in both]
            lo, hi = ts.bootstrap(d)
            line += f"   {sum(d) / len(d):+.4f} [{lo:+.4f}, {hi:+.4f}]"
            three = [s for s in both if s in high and float(low[s]["final_loss"]) != float(high[s]["final_loss"])]
            if three:
                gc = [(float(low[s]["final_loss"]) - float(by[arm][s]["final_loss"])) /
                      (float(low[s]["final_loss"]) - float(high[s]["final_loss"])) for s in three]
                glo, ghi = ts.bootstrap(gc)
                line += f"   {sum(gc) / len(gc):+.3f} [{glo:+.3f}, {ghi:+.3f}]"
        print(line)
    if low and high:
        gap = [float(low[s]["final_loss"]) - float(high[s]["final_loss"]) for s in sorted(low) if s in high]
        if len(gap) > 1:
            print(f"low - high: mean {sum(gap) / len(gap):+.4f}, seed sd {_sd(gap):.4f} over {len(gap)} seeds")


def _sd(v):
    m = sum(v) / len(v)
    return math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arms", default="low,high")
    ap.add_argument("--seeds", default="1-5")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--max-o", type=int, default=2, help="noise-floor's and random's slots")
    ap.add_argument("--noise-c", type=float, default=math.sqrt(3.0))
    ap.add_argument("--late-share", type=float, default=None,
                    help="late-switch's share of the steps in fp32 (default 2 / depth)")
    ap.add_argument("--text", default="/usr/share/games/fortunes")
    ap.add_argument("--out", default="build/nvfp4-arms")
    ap.add_argument("--summary", action="store_true", help="only print the summary of OUT/results.csv")
    a = ap.parse_args()
    if a.late_share is None:
        a.late_share = 2.0 / a.depth
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res = out / "results.csv"
    if a.summary:
        summary(res)
        return
    arms = [x for x in a.arms.split(",") if x]
    for x in arms:
        if x not in ARMS:
            ap.error(f"unknown arm {x!r}; arms: {', '.join(ARMS)}")
    done = set()
    if res.exists():
        done = {(r["arm"], int(r["seed"])) for r in csv.DictReader(open(res))}
    for seed in ts.parse_seeds(a.seeds):
        for arm in arms:
            if (arm, seed) in done:
                continue
            row = run(arm, seed, a)
            new = not res.exists()
            with open(res, "a", newline="") as f:
                w = csv.DictWriter(f, fieldnames=FIELDS)
                if new:
                    w.writeheader()
                w.writerow(row)
            print(",".join(str(row[k]) for k in FIELDS), flush=True)
    summary(res)


if __name__ == "__main__":
    main()
