#!/usr/bin/env python3
"""mx_proxy.py — a published low-precision divergence, reproduced, and gnmr
against it: the synthetic proxy of Su et al. 2025 (arXiv 2506.20752;
bench/python/mx_sim.py says what is emulated and how) in MXFP8, under the
recipe alone and under gnmr's presets, with the paper's static fixes as the
baselines to beat. docs/record/mx-proxy.md has the protocol and the results.

    python bench/python/mx_proxy.py --arms low,high --width 512 --depth 4 \\
        --batch 2048 --lr 6e-4 --steps 9000 --seeds 1-2 --device cuda --jobs 4 --out DIR

Arms (one seed: the same initialisation, data and noise in every arm):
  high            fp32 everywhere (the same run under either emulation)
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

--emulation torchao (the default) gives torchao's bits, what MX hardware
does; --emulation paper the bits of the authors' own emulator (mx_paper.py:
ties away from zero, bf16 GEMM operands and results, a LayerNorm chain of
bf16 ops without a beta gradient, the student's GELU unquantized).

Adam (0.9, 0.999), constant learning rate, no warm-up, no clipping, no
weight decay (gnmr.optim.AdamW with weight_decay 0 is that Adam). Batches
are drawn on the fly from a generator seeded by (seed, step).

Metrics (defined before any run): diverged_at, the first step whose loss is
not finite or above 10x the running minimum (empty if never); final_loss,
the mean training loss of the last 100 steps (the loss at the stop when a
run ends non-finite); high_share, promoted operator-steps over all
operator-steps; per run the loss trace (DIR/traces/RUN.csv) and, for
promoting arms, every grant (DIR/grants/RUN.json: operator, first step,
length), RUN being ARM-SEED under torchao's emulation and for high,
ARM.paper-SEED under the paper's. Writes DIR/results.csv (arm, emulation
(torchao, paper; none for high), seed, diverged_at, final_loss, high_share,
grants, steps, width, depth, batch, lr, device, wall_s); runs already there
are not run again.

Runs survive a stop: every --ckpt-every steps (and at the end) a run writes
DIR/ckpt/RUN.pt atomically (the model, the optimizer's state with the
controller's, the RNG state, the step, the loss trace, the grants and the
divergence bookkeeping so far); --resume continues each unfinished run from
it, bit for bit (tests/python/test_mx_proxy.py). --stop-after K stops every
run after step K (checkpointed, nothing recorded).
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

FIELDS = ["arm", "emulation", "seed", "diverged_at", "final_loss", "high_share", "grants", "steps", "width",
          "depth", "batch", "lr", "device", "wall_s"]
STATIC = {"high", "low", "low-rceil", "low-ln-high"}
SETTING = ("width", "depth", "batch", "lr", "steps", "device")  # a checkpoint resumes only the same run
CKPT_FORMAT = "mx_proxy.ckpt/1"


def parse_seeds(s: str):
    out = []
    for part in s.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b or a) + 1))
    return out


def emulation_of(arm: str, emulation: str) -> str:
    """high rounds nothing: one run serves both emulations."""
    return "none" if arm == "high" else emulation


def run_name(arm: str, emulation: str, seed: int) -> str:
    """The file stem of a run: ARM-SEED (torchao's emulation, high), ARM.paper-SEED."""
    e = emulation_of(arm, emulation)
    return f"{arm}-{seed}" if e in ("torchao", "none") else f"{arm}.{e}-{seed}"


def recipe_of(arm: str, emulation: str = "torchao"):
    from mx_sim import HIGH, Recipe
    if arm == "high":
        return HIGH
    gelu = emulation == "torchao"  # the paper's student GELU is unquantized in their code
    if arm == "low-rceil":
        return Recipe("rceil", True, gelu, emulation)
    if arm == "low-ln-high":
        return Recipe("floor", False, gelu, emulation)
    return Recipe("floor", True, gelu, emulation)  # low, and every gnmr arm on top of it


def random_table(src, ops, steps, seed):
    """default's promotion episodes, each moved to a random operator and step."""
    rng = random.Random(seed * 104729 + 7)
    table = set()
    for _, length in src:
        op = ops[rng.randrange(len(ops))]
        start = rng.randint(1, max(1, steps - length))
        table.update((op, t) for t in range(start, start + length))
    return table


def _save_atomic(payload, path: Path) -> None:
    """torch.save to PATH.tmp, flushed to disk, renamed over PATH: a stop at
    any moment leaves the previous checkpoint or the new one, whole."""
    import torch
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(payload, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def run(arm: str, seed: int, a):
    """One run; its results.csv row, or None when --stop-after stopped it."""
    import torch
    from mx_sim import Student, Teacher, units_of

    import mx_sim

    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    compiled = a.compile and mx_sim.use_compiled(a.device, a.emulation)
    t0 = time.time()
    name = run_name(arm, a.emulation, seed)
    torch.manual_seed(seed)
    student = Student(a.width, a.depth).to(dev)
    torch.manual_seed(seed + 1_000_003)
    teacher = Teacher(a.width, a.depth).to(dev)
    recipe = recipe_of(arm, a.emulation)
    student.set_recipe(recipe)
    ops = student.operators()
    names = list(ops)
    preset = None if arm in STATIC else ("stabilizer" if arm.endswith("-random") else arm)
    ctl = None
    if preset:
        import gnmr
        ctl = gnmr.Controller(units_of(student), preset)
    opt = (gnmr.optim.AdamW(student.parameters(), lr=a.lr, betas=(0.9, 0.999), weight_decay=0.0, controller=ctl)
           if ctl else torch.optim.Adam(student.parameters(), lr=a.lr, betas=(0.9, 0.999)))
    # t: the step being run; promo: the units the controller's latest
    # decisions promote (read once per step, and checkpointed: a freshly
    # loaded controller holds no decisions until its next step).
    st = {"t": 0, "promo": set()}
    table = None
    if arm.endswith("-random"):
        src_name = run_name(arm[:-len("-random")], a.emulation, seed)
        src = json.loads((Path(a.out) / "grants" / f"{src_name}.json").read_text())
        table = random_table([(op, n) for op, _, n in src["episodes"]], names, a.steps, seed)
        for n, op in ops.items():
            op.promoted = (lambda n=n: (n, st["t"]) in table)
    elif ctl is not None and preset not in ("stabilizer",):
        for n, op in ops.items():
            op.promoted = (lambda n=n: n in st["promo"])
    g = torch.Generator(device=dev)  # reseeded every step by (seed, step): it carries no state across steps
    losses, grants, promoted_steps, open_eps = [], [], 0, {}
    diverged_at, running_min, wall_before, done = None, math.inf, 0.0, False
    setting = {k: getattr(a, k) for k in SETTING}
    ckpt = Path(a.out) / "ckpt" / f"{name}.pt"
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    params = dict(student.named_parameters())
    first = 1
    if ckpt.exists():
        if not a.resume:
            raise RuntimeError(f"{ckpt} exists: pass --resume to continue that run, or delete it to start over")
        ck = torch.load(ckpt, map_location=dev, weights_only=False)
        if ck.get("format") != CKPT_FORMAT or ck["setting"] != setting or ck["run"] != [arm, a.emulation, seed]:
            raise RuntimeError(f"{ckpt} belongs to another run or version ({ck.get('run')}, {ck.get('setting')})")
        student.load_state_dict(ck["student"])
        opt.load_state_dict(ck["opt"])
        torch.set_rng_state(ck["rng"].cpu())  # map_location moved it with the rest
        # The gradient buffers the uninterrupted run would hold (zeroed in
        # place before every backward): a buffer that exists is added into,
        # a missing one is assigned.
        for n in ck["grads"]:
            params[n].grad = torch.zeros_like(params[n])
        first = ck["t"] + 1
        st["promo"] = set(ck["promo"])
        losses, grants, promoted_steps = ck["losses"], ck["grants"], ck["promoted_steps"]
        # each operator's latest episode is an entry of grants (extended in
        # place while it lasts): stored as indices, relinked here
        open_eps = {grants[i][0]: grants[i] for i in ck["open_eps"]}
        diverged_at, running_min, wall_before, done = ck["diverged_at"], ck["running_min"], ck["wall_s"], ck["done"]

    def save(t: int, done: bool) -> None:
        pos = {id(e): i for i, e in enumerate(grants)}
        _save_atomic({"format": CKPT_FORMAT, "run": [arm, a.emulation, seed], "setting": setting, "t": t,
                      "done": done, "student": student.state_dict(), "opt": opt.state_dict(),
                      "rng": torch.get_rng_state(), "grads": [n for n, p in params.items() if p.grad is not None],
                      "promo": sorted(st["promo"]), "losses": losses, "grants": grants,
                      "open_eps": [pos[id(e)] for e in open_eps.values()], "promoted_steps": promoted_steps,
                      "diverged_at": diverged_at, "running_min": running_min,
                      "wall_s": wall_before + time.time() - t0}, ckpt)

    t_mark, t_at_mark, t = time.time(), first - 1, first - 1
    for t in range(first, a.steps + 1) if not done else ():
        st["t"] = t
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
            y = teacher(x, recipe) + 0.005 * torch.randn(a.batch, a.width, device=dev, generator=g)
        loss = torch.nn.functional.mse_loss(student(x), y)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        student.drop_chain_beta_grads()
        opt.step()
        if ctl is not None:
            st["promo"] = set(ctl.promoted_units())
        lv = float(loss.detach())
        losses.append(lv)
        if diverged_at is None and (not math.isfinite(lv) or lv > 10.0 * running_min):
            diverged_at = t
        running_min = min(running_min, lv)
        if not math.isfinite(lv):
            break
        if t % a.ckpt_every == 0 or t == a.stop_after:
            save(t, False)
            now = time.time()
            print(f"{name}: step {t}/{a.steps} loss {lv:.4g} min {running_min:.4g} diverged_at "
                  f"{diverged_at or '-'}  {(now - t_mark) / (t - t_at_mark):.3f} s/step", flush=True)
            t_mark, t_at_mark = now, t
        if t == a.stop_after:
            return None
    if not done:
        save(t, True)  # the final state: what a finished run ends with (the resume test compares it)
    out = Path(a.out)
    (out / "traces").mkdir(parents=True, exist_ok=True)
    with open(out / "traces" / f"{name}.csv", "w") as f:
        f.write("step,loss\n" + "".join(f"{i + 1},{v:.6g}\n" for i, v in enumerate(losses)))
    if ctl is not None or table is not None:
        (out / "grants").mkdir(parents=True, exist_ok=True)
        (out / "grants" / f"{name}.json").write_text(json.dumps({"episodes": grants}))
    tail = [v for v in losses[-100:] if math.isfinite(v)]
    final = (sum(tail) / len(tail)) if len(tail) == len(losses[-100:]) and tail else losses[-1]
    return {"arm": arm, "emulation": emulation_of(arm, a.emulation), "seed": seed,
            "diverged_at": diverged_at if diverged_at is not None else "",
            "final_loss": f"{final:.6g}", "high_share": round(promoted_steps / (len(names) * len(losses)), 6),
            "grants": len(grants), "steps": len(losses), "width": a.width, "depth": a.depth, "batch": a.batch,
            "lr": a.lr, "device": a.device + ("+compiled" if compiled else ""),
            "wall_s": round(wall_before + time.time() - t0, 1)}


def max_rise(trace: Path, after: int = 100):
    """The largest loss over its running minimum after step `after` (the
    early descent excluded): how close a run came to the divergence rule's
    10x. None without a trace."""
    if not trace.exists():
        return None
    lo, worst = math.inf, 0.0
    for r in csv.DictReader(open(trace)):
        t, v = int(r["step"]), float(r["loss"])
        if t > after and 0.0 < lo < math.inf:
            worst = max(worst, v / lo)
        lo = min(lo, v)
    return worst


def summary(path: Path) -> None:
    rows = list(csv.DictReader(open(path)))
    print(f"{'arm':16s} {'emulation':>9s} {'seed':>5s} {'diverged_at':>11s} {'final_loss':>11s} {'high %':>7s} "
          f"{'grants':>6s} {'wall_s':>8s} {'max_rise':>8s}")
    for r in sorted(rows, key=lambda r: (r["arm"], r["emulation"], int(r["seed"]))):
        rise = max_rise(path.parent / "traces" / f"{run_name(r['arm'], r['emulation'], int(r['seed']))}.csv")
        print(f"{r['arm']:16s} {r['emulation']:>9s} {r['seed']:>5s} {r['diverged_at'] or '-':>11s} "
              f"{r['final_loss']:>11s} {100 * float(r['high_share']):7.3f} {r['grants']:>6s} {r['wall_s']:>8s} "
              f"{'-' if rise is None else f'{rise:.2f}':>8s}")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arms", default="low,high")
    ap.add_argument("--emulation", default="torchao", choices=["torchao", "paper"],
                    help="whose MX bits: torchao's (MX hardware's) or the paper authors' emulator's")
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--steps", type=int, default=9000)
    ap.add_argument("--seeds", default="1-2")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--jobs", type=int, default=1, help="runs in parallel (1: in this process, one after another)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads per run")
    ap.add_argument("--compile", action="store_true",
                    help="fuse the MX quantizer with torch.compile when it gives eager's bits (mx_sim.use_compiled)")
    ap.add_argument("--ckpt-every", type=int, default=250, help="steps between checkpoints (DIR/ckpt/RUN.pt)")
    ap.add_argument("--resume", action="store_true", help="continue unfinished runs from their checkpoints")
    ap.add_argument("--stop-after", type=int, default=0, help="stop every run after this step, checkpointed")
    ap.add_argument("--out", default="build/mx-proxy")
    ap.add_argument("--summary", action="store_true", help="only print OUT/results.csv")
    return ap


def append_row(res: Path, row: dict) -> None:
    """Appends one result row under an exclusive lock, the header first if
    the file is empty: two processes may run different runs of one folder
    (the pilot's queue and a second process beside it, docs/record/mx-proxy.md),
    each writing when its run ends."""
    import fcntl

    with open(res, "a", newline="") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if os.fstat(f.fileno()).st_size == 0:
            w.writeheader()
        w.writerow(row)
        f.flush()


def main(argv=None) -> int:
    ap = parser()
    a = ap.parse_args(argv)
    if a.width % 32:
        ap.error("--width must be a multiple of 32 (MX blocks)")
    if a.ckpt_every < 1:
        ap.error("--ckpt-every must be positive")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res = out / "results.csv"
    if a.summary:
        summary(res)
        return 0
    # An empty file is a queue stopped before its first result: a new file.
    if res.exists() and res.stat().st_size > 0 and next(csv.reader(open(res)), []) != FIELDS:
        sys.exit(f"{res} was written by another version of this script (columns differ: this one has "
                 f"{','.join(FIELDS)}); use another --out")
    arms = a.arms.split(",")
    # a -random arm reads its source's grants: sources run in the first wave
    for wave in ([x for x in arms if not x.endswith("-random")], [x for x in arms if x.endswith("-random")]):
        done = ({(r["arm"], r["emulation"], int(r["seed"])) for r in csv.DictReader(open(res))}
                if res.exists() else set())
        todo = [(arm, s) for s in parse_seeds(a.seeds) for arm in wave
                if (arm, emulation_of(arm, a.emulation), s) not in done]
        if not todo:
            continue
        stale = [str(out / "ckpt" / f"{run_name(arm, a.emulation, s)}.pt") for arm, s in todo
                 if (out / "ckpt" / f"{run_name(arm, a.emulation, s)}.pt").exists()]
        if stale and not a.resume:
            sys.exit("unfinished runs have checkpoints; pass --resume to continue them (or delete them): "
                     + " ".join(stale))
        ctx = None
        if a.device == "cuda":  # CUDA in worker processes needs spawn
            import multiprocessing as mp
            ctx = mp.get_context("spawn")
        pool = ProcessPoolExecutor(a.jobs, mp_context=ctx) if a.jobs > 1 else None
        try:
            rows = (pool.map(run, [t[0] for t in todo], [t[1] for t in todo], [a] * len(todo)) if pool
                    else (run(arm, s, a) for arm, s in todo))
            for (arm, s), r in zip(todo, rows):
                if r is None:
                    print(f"{run_name(arm, a.emulation, s):24s} stopped after step {a.stop_after} "
                          f"(checkpointed; --resume continues it)", flush=True)
                    continue
                append_row(res, r)
                print(f"{run_name(arm, a.emulation, s):24s} diverged_at {r['diverged_at'] or '-':>6}  "
                      f"final {r['final_loss']}  high {100 * r['high_share']:.3f}%  {r['wall_s']} s", flush=True)
        finally:
            if pool:
                pool.shutdown()
    if res.exists():
        summary(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
