#!/usr/bin/env python3
"""mx_proxy.py — a published low-precision divergence, reproduced, and gnmr
against it: the synthetic proxy of Su et al. 2025 (arXiv 2506.20752;
bench/python/mx_sim.py says what is emulated and how) in MXFP8, under the
recipe alone and under gnmr's presets, with the paper's static fixes as the
baselines to beat. docs/record/mx-proxy.md has the protocol and the results.

    python bench/python/mx_proxy.py --arms low,high --width 512 --depth 4 \\
        --batch 2048 --lr 6e-4 --steps 9000 --seeds 1-2 --device cuda --jobs 4 --out DIR

Arms (one seed: the same initialisation, data and noise in every arm):
  high            fp32 everywhere
  low             the paper's MX: every GEMM operand MXFP8 E4M3 (blocks of
                  32, the OCP floor rule), LayerNorm and GELU rounded to bf16
  low-rceil       low with the scale rounded up (torchao's RCEIL): the
                  paper's "overflow exponent bumped up" fix
  low-ln-high     low with the LayerNorm unrounded: the paper's fix
  stabilizer      low + gnmr's stabilizer (Stable-SPAM's normalisation)
  default         low + gnmr's default preset, promoting the operators it
                  grants (their GEMMs in fp32, a LayerNorm unrounded) for the lock
  default-random  the stabilizer with default's promoted operator-steps of
                  the same seed moved to random operators and steps (default
                  must have run first, into the same DIR)
  PRESET          any other gnmr preset, promoting as default does

Adam (0.9, 0.999), constant learning rate, no warm-up, no clipping, no
weight decay (gnmr.optim.AdamW with weight_decay 0 is that Adam). Batches
are drawn on the fly from a generator seeded by (seed, step).

Metrics (defined before any run): diverged_at, the first step whose loss is
not finite or above 10x the running minimum (empty if never); final_loss,
the mean training loss of the last 100 steps (the loss at the stop when a
run ends non-finite); high_share, promoted operator-steps over all
operator-steps; per run the loss trace (DIR/traces/ARM-SEED.csv) and, for
promoting arms, every grant (DIR/grants/ARM-SEED.json: step, operator).
Writes DIR/results.csv (arm, seed, diverged_at, final_loss, high_share,
grants, steps, width, depth, batch, lr, device, wall_s); runs already there
are not run again.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

FIELDS = ["arm", "seed", "diverged_at", "final_loss", "high_share", "grants", "steps", "width", "depth",
          "batch", "lr", "device", "wall_s"]
STATIC = {"high", "low", "low-rceil", "low-ln-high"}


def parse_seeds(s: str):
    out = []
    for part in s.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b or a) + 1))
    return out


def recipe_of(arm: str):
    from mx_sim import HIGH, Recipe
    if arm == "high":
        return HIGH
    if arm == "low-rceil":
        return Recipe("rceil", True, True)
    if arm == "low-ln-high":
        return Recipe("floor", False, True)
    return Recipe("floor", True, True)  # low, and every gnmr arm on top of it


def random_table(src, ops, steps, seed):
    """default's promotion episodes, each moved to a random operator and step."""
    rng = random.Random(seed * 104729 + 7)
    table = set()
    for _, length in src:
        op = ops[rng.randrange(len(ops))]
        start = rng.randint(1, max(1, steps - length))
        table.update((op, t) for t in range(start, start + length))
    return table


def run(arm: str, seed: int, a) -> dict:
    import torch
    import gnmr
    from mx_sim import Student, Teacher, units_of

    import mx_sim

    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    compiled = a.compile and mx_sim.use_compiled(a.device)
    t0 = time.time()
    torch.manual_seed(seed)
    student = Student(a.width, a.depth).to(dev)
    torch.manual_seed(seed + 1_000_003)
    teacher = Teacher(a.width, a.depth).to(dev)
    student.set_recipe(recipe_of(arm))
    ops = student.operators()
    names = list(ops)
    preset = None if arm in STATIC else ("stabilizer" if arm.endswith("-random") else arm)
    ctl = gnmr.Controller(units_of(student), preset) if preset else None
    opt = (gnmr.optim.AdamW(student.parameters(), lr=a.lr, betas=(0.9, 0.999), weight_decay=0.0, controller=ctl)
           if ctl else torch.optim.Adam(student.parameters(), lr=a.lr, betas=(0.9, 0.999)))
    step = {"t": 0}
    table = None
    if arm.endswith("-random"):
        src = json.loads((Path(a.out) / "grants" / f"{arm[:-len('-random')]}-{seed}.json").read_text())
        table = random_table([(op, n) for op, _, n in src["episodes"]], names, a.steps, seed)
        for n, op in ops.items():
            op.promoted = (lambda n=n: (n, step["t"]) in table)
    elif ctl is not None and preset not in ("stabilizer",):
        for n, op in ops.items():
            op.promoted = (lambda n=n: ctl.last_summary is not None and ctl.promoted(n))
    g = torch.Generator(device=dev)
    losses, grants, promoted_steps, open_eps = [], [], 0, {}
    diverged_at, running_min = None, math.inf
    for t in range(1, a.steps + 1):
        step["t"] = t
        on = [n for n in names if ops[n].promoted()] if ctl is not None or table is not None else []
        promoted_steps += len(on)
        for n in on:  # promotion episodes [operator, first step, length]; a new one is a grant
            e = open_eps.get(n)
            if e is not None and e[1] + e[2] == t:
                e[2] += 1
            else:
                open_eps[n] = [n, t, 1]
                grants.append(open_eps[n])
        g.manual_seed(seed * 1_000_003 + t)
        x = torch.randn(a.batch, a.width, device=dev, generator=g)
        with torch.no_grad():
            y = teacher(x) + 0.005 * torch.randn(a.batch, a.width, device=dev, generator=g)
        loss = torch.nn.functional.mse_loss(student(x), y)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        lv = float(loss.detach())
        losses.append(lv)
        if diverged_at is None and (not math.isfinite(lv) or lv > 10.0 * running_min):
            diverged_at = t
        running_min = min(running_min, lv)
        if not math.isfinite(lv):
            break
    out = Path(a.out)
    (out / "traces").mkdir(parents=True, exist_ok=True)
    with open(out / "traces" / f"{arm}-{seed}.csv", "w") as f:
        f.write("step,loss\n" + "".join(f"{i + 1},{v:.6g}\n" for i, v in enumerate(losses)))
    if ctl is not None or table is not None:
        (out / "grants").mkdir(parents=True, exist_ok=True)
        (out / "grants" / f"{arm}-{seed}.json").write_text(json.dumps({"episodes": grants}))
    tail = [v for v in losses[-100:] if math.isfinite(v)]
    final = (sum(tail) / len(tail)) if len(tail) == len(losses[-100:]) and tail else losses[-1]
    return {"arm": arm, "seed": seed, "diverged_at": diverged_at if diverged_at is not None else "",
            "final_loss": f"{final:.6g}", "high_share": round(promoted_steps / (len(names) * len(losses)), 6),
            "grants": len(grants), "steps": len(losses), "width": a.width, "depth": a.depth, "batch": a.batch,
            "lr": a.lr, "device": a.device + ("+compiled" if compiled else ""), "wall_s": round(time.time() - t0, 1)}


def summary(path: Path) -> None:
    rows = list(csv.DictReader(open(path)))
    print(f"{'arm':16s} {'seed':>5s} {'diverged_at':>11s} {'final_loss':>11s} {'high %':>7s} {'grants':>6s}")
    for r in sorted(rows, key=lambda r: (r["arm"], int(r["seed"]))):
        print(f"{r['arm']:16s} {r['seed']:>5s} {r['diverged_at'] or '-':>11s} {r['final_loss']:>11s} "
              f"{100 * float(r['high_share']):7.3f} {r['grants']:>6s}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arms", default="low,high")
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--steps", type=int, default=9000)
    ap.add_argument("--seeds", default="1-2")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads per run")
    ap.add_argument("--compile", action="store_true",
                    help="fuse the MX quantizer with torch.compile when it gives eager's bits (mx_sim.use_compiled)")
    ap.add_argument("--out", default="build/mx-proxy")
    ap.add_argument("--summary", action="store_true", help="only print OUT/results.csv")
    a = ap.parse_args()
    if a.width % 32:
        ap.error("--width must be a multiple of 32 (MX blocks)")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res = out / "results.csv"
    if a.summary:
        summary(res)
        return 0
    if res.exists() and next(csv.reader(open(res)), []) != FIELDS:
        sys.exit(f"{res} was written by another version of this script (columns differ); use another --out")
    arms = a.arms.split(",")
    # a -random arm reads its source's grants: sources run in the first wave
    for wave in ([x for x in arms if not x.endswith("-random")], [x for x in arms if x.endswith("-random")]):
        done = {(r["arm"], int(r["seed"])) for r in csv.DictReader(open(res))} if res.exists() else set()
        todo = [(arm, s) for s in parse_seeds(a.seeds) for arm in wave if (arm, s) not in done]
        if not todo:
            continue
        new = not res.exists()
        ctx = None
        if a.device == "cuda":  # CUDA in worker processes needs spawn
            import multiprocessing as mp
            ctx = mp.get_context("spawn")
        with open(res, "a", newline="") as f, ProcessPoolExecutor(a.jobs, mp_context=ctx) as pool:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            if new:
                w.writeheader()
            for r in pool.map(run, [t[0] for t in todo], [t[1] for t in todo], [a] * len(todo)):
                w.writerow(r)
                f.flush()
                print(f"{r['arm']:16s} seed {r['seed']:4d}  diverged_at {r['diverged_at'] or '-':>6}  "
                      f"final {r['final_loss']}  high {100 * r['high_share']:.3f}%  {r['wall_s']} s", flush=True)
    summary(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
