#!/usr/bin/env python3
"""nvfp4_arms.py — run-time promotion against NVIDIA's static recipes at the
same high-precision share, NVFP4 training emulated on the CPU. The protocol
(written before any run) is docs/record/nvfp4-arms.md, "Protocol".

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
  stabilizer     the preset "stabilizer" over the same units: the default's
                 per-unit gradient normalisation without its promotions
                 (what the default's gain is made of; not a protocol arm)
  high-stabilizer  high with the stabilizer: whether its gain is NVFP4's
                 loss recovered or a better optimizer anywhere (not a
                 protocol arm)
  noise-floor    the preset "gnmr-noise-floor" (noise_c --noise-c, max_o
                 --max-o, lock 8) fed nvfp4.noise_partials each step
  random         --max-o operators drawn at random, in fp32, re-drawn every
                 8 steps (noise-floor's slots without its choice)

Each run writes one CSV row (arm, seed, the mean validation loss over the
last 10% of the steps, the high-precision share of operator-steps, for
arms with a controller the unit-steps its trigger fired on per
operator-step (the units include the model's other parameters, so it can
pass 1), wall seconds) to OUT/results.csv; runs already there are not run again, so a
stopped queue resumes where it stopped. --summary prints, per arm, the
mean loss, the share, the paired difference to `low` and the gap closed
(L_low - L_arm) / (L_low - L_high) with bootstrap 95% intervals.

    python bench/python/nvfp4_arms.py --arms low,high --seeds 1-5 --steps 600 --out build/nvfp4-arms

An arm may carry its slots and (noise-floor) its noise_c: NAME[/c=X][@SLOTS]
("noise-floor@14", "noise-floor/c=3@1"); a slotted arm without @ runs at
every --max-o.
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
import evidence_base as ev  # noqa: E402  (the page's ratio of means and its interval)

ARMS = ("low", "high", "static-layers", "late-switch", "default", "stabilizer", "high-stabilizer", "noise-floor",
        "random")
HIGH = ("high", "high-stabilizer")  # the arms with no NVFP4 operator
FIELDS = ["arm", "seed", "final_loss", "hp_share", "fired_share", "ops", "steps", "depth", "max_o", "noise_c",
          "wall_s"]
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
    if arm not in HIGH:
        def keep(mod, path):
            b = block_of(path)
            if b < 0:
                return False  # the head stays high precision
            return not (arm == "static-layers" and b in (0, last))
        nvfp4.convert_to_nvfp4_training(model, module_filter_fn=keep, seed=seed)
    ops = list(nvfp4.nvfp4_modules(model).items())
    n_ops = len([p for p, _ in model.named_modules() if block_of(p) >= 0 and p.split(".")[-1].endswith("proj")])

    ctl = None
    if arm in ("default", "stabilizer", "high-stabilizer", "noise-floor"):
        units = gnmr_ao.operator_units(model)  # one unit per linear's weight, converted or not
        name = {"noise-floor": "gnmr-noise-floor", "high-stabilizer": "stabilizer"}.get(arm, arm)
        kw = dict(noise_c=a.noise_c_now, max_o=a.max_o_now, lock=LOCK) if arm == "noise-floor" else {}
        ctl = gnmr.Controller(units, name, **kw)
        if arm != "high-stabilizer":
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

    snr = open(Path(a.out) / f"snr-{seed}.csv", "w") if a.snr_log and arm == "noise-floor" else None
    if snr is not None:
        snr.write("step,unit,n_over_a\n")
    hp_op_steps = 0
    fired = 0  # unit-steps gnmr's trigger fired on (granted or not)
    evals = []
    eval_from = a.steps - max(1, a.steps // 10)
    for t in range(a.steps):
        if arm == "late-switch":
            forced = {p for p, _ in ops} if t >= late_from else set()
        elif arm == "random" and t % LOCK == 0:
            forced = set(rng.sample([p for p, _ in ops], min(a.max_o_now, len(ops))))
        # Operators in fp32 this step: the forced ones, gnmr's promoted ones,
        # the static ones (not converted at all).
        if arm in HIGH:
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
            fired += ctl.step(opt, aux=aux).triggered
            if snr is not None and aux is not None:
                # n / a per operator: the measured norm over the noise's
                # (development runs choose noise_c on it; docs/record/nvfp4-arms.md)
                nrm = ctl.reports()["norm"]
                for u in range(len(nrm)):
                    if float(aux[u]) > 0.0:
                        snr.write(f"{t},{u},{float(nrm[u]) / math.sqrt(float(aux[u])):.6g}\n")
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if t >= eval_from and (t - eval_from) % max(1, (a.steps - eval_from) // 4) == 0 or t == a.steps - 1:
            evals.append(val_loss())
    if snr is not None:
        snr.close()
    return {"arm": arm, "seed": seed, "final_loss": round(sum(evals) / len(evals), 6),
            "hp_share": round(hp_op_steps / (n_ops * a.steps), 6),
            "fired_share": round(fired / (n_ops * a.steps), 6) if ctl is not None else "", "ops": n_ops, "steps": a.steps,
            "depth": a.depth, "max_o": a.max_o_now if arm in ("noise-floor", "random") else "",
            "noise_c": a.noise_c_now if arm == "noise-floor" else "", "wall_s": round(time.time() - t0, 1)}


SLOTTED = ("noise-floor", "random")  # the arms set to a share by --max-o


def label(arm: str, max_o, noise_c="") -> str:
    """An arm's name in the results: noise-floor and random carry their
    slots ("noise-floor@14"), noise-floor its noise_c where it is not the
    published sqrt(3) ("noise-floor/c=2.5@14"), so one file holds them all."""
    c = ""
    if arm == "noise-floor" and str(noise_c) != "" and abs(float(noise_c) - math.sqrt(3.0)) > 1e-9:
        c = f"/c={float(noise_c):.12g}"
    return f"{arm}{c}@{max_o}" if arm in SLOTTED and str(max_o) != "" else arm


def parse_arm(tok: str, slots, noise_c: float):
    """An --arms entry, NAME[/c=X][@SLOTS]: the runs (arm, slots, noise_c)
    it stands for (slotted arms without @ take every --max-o)."""
    name, _, m = tok.partition("@")
    name, _, c = name.partition("/c=")
    if name not in ARMS:
        raise ValueError(f"unknown arm {name!r}; arms: {', '.join(ARMS)}")
    if c and name != "noise-floor":
        raise ValueError(f"{tok!r}: only noise-floor takes /c=")
    if m and name not in SLOTTED:
        raise ValueError(f"{tok!r}: only {' and '.join(SLOTTED)} take @SLOTS")
    cc = float(c) if c else noise_c
    ms = [int(m)] if m else (slots if name in SLOTTED else [""])
    return [(name, x, cc) for x in ms]


def _arm_key(k: str):
    order = {a: i for i, a in enumerate(ARMS)}
    return (order.get(k.split("@")[0].split("/")[0], 99), k.split("@")[0], int(k.split("@")[1]) if "@" in k else 0)


def arm_rows(path: Path):
    """Per arm label, in ARMS order: (label, seeds, mean loss, mean share,
    mean fired share or None, (d, lo, hi) of arm - low or None, (g, lo, hi)
    of the gap closed or None), and the low - high gaps per seed."""
    rows = list(csv.DictReader(open(path)))
    by = {}
    for r in rows:
        by.setdefault(label(r["arm"], r.get("max_o", ""), r.get("noise_c", "")), {})[int(r["seed"])] = r
    low, high = by.get("low", {}), by.get("high", {})
    out = []
    for arm in sorted(by, key=_arm_key):
        seeds = sorted(by[arm])
        loss = sum(float(by[arm][s]["final_loss"]) for s in seeds) / len(seeds)
        share = sum(float(by[arm][s]["hp_share"]) for s in seeds) / len(seeds)
        fv = [float(by[arm][s]["fired_share"]) for s in seeds if by[arm][s].get("fired_share")]
        diff = closed = None
        both = [s for s in seeds if s in low]
        if both and arm != "low":
            d = [float(by[arm][s]["final_loss"]) - float(low[s]["final_loss"]) for s in both]
            diff = (sum(d) / len(d),) + ts.bootstrap(d)
            # The gap closed is docs/evidence.md's: the ratio of the means
            # over the seeds, with evidence_base's paired resampling; a
            # ratio per seed would blow up where a seed's own gap is near 0.
            with_high = [s for s in both if s in high]
            num = [float(low[s]["final_loss"]) - float(by[arm][s]["final_loss"]) for s in with_high]
            den = [float(low[s]["final_loss"]) - float(high[s]["final_loss"]) for s in with_high]
            if with_high and sum(den) != 0:
                closed = (sum(num) / sum(den),) + ev.boot_ratio(num, den)
        out.append((arm, seeds, loss, share, sum(fv) / len(fv) if fv else None, diff, closed))
    gap = [float(low[s]["final_loss"]) - float(high[s]["final_loss"]) for s in sorted(low) if s in high]
    return out, gap


def summary(path: Path) -> None:
    rows, gap = arm_rows(path)
    print(f"{'arm':<22}{'n':>4}{'loss':>10}{'share':>9}{'fired':>8}   arm - low [95%]            gap closed [95%]")
    for arm, seeds, loss, share, fired, diff, closed in rows:
        line = f"{arm:<22}{len(seeds):>4}{loss:>10.4f}{share:>9.4f}"
        line += f"{fired:8.4f}" if fired is not None else f"{'':8}"
        if diff is not None:
            line += f"   {diff[0]:+.4f} [{diff[1]:+.4f}, {diff[2]:+.4f}]"
        if closed is not None:
            line += f"   {closed[0]:+.3f} [{closed[1]:+.3f}, {closed[2]:+.3f}]"
        print(line)
    if len(gap) > 1:
        print(f"low - high: mean {sum(gap) / len(gap):+.4f}, seed sd {_sd(gap):.4f} over {len(gap)} seeds")


def plot(path: Path, png: Path) -> None:
    """The curve (docs/record/nvfp4-arms.md, "Protocol"): the gap closed against
    the measured high-precision share, one line per arm family across its
    shares (an arm at one share is a point), 95% intervals as bars, drawn
    by gnuplot (Debian: gnuplot-nox)."""
    import shutil
    import subprocess
    import tempfile

    if shutil.which("gnuplot") is None:
        raise SystemExit("nvfp4_arms: --plot needs gnuplot (Debian: apt-get install gnuplot-nox)")
    rows, gap = arm_rows(path)
    fams = {}
    for arm, seeds, loss, share, fired, diff, closed in rows:
        if closed is None or arm == "high":
            continue
        fams.setdefault(arm.split("@")[0], []).append((share, closed, len(seeds)))
    if not fams:
        raise SystemExit(f"nvfp4_arms: {path} has no arm with low and high on the same seeds to plot")
    blocks, plots = [], []
    for i, (fam, pts) in enumerate(fams.items()):
        pts.sort()
        n = min(p[2] for p in pts)
        # Arms at one share would hide each other's bars: each family is
        # drawn a few per cent to the right of the previous one.
        off = 1.0 + 0.04 * i
        blocks.append(f"$d{i} << EOD\n" + "".join(f"{max(sh, 1e-3) * off:.6g} {c[0]:.6g} {c[1]:.6g} {c[2]:.6g}\n"
                                                  for sh, c, _ in pts) + "EOD\n")
        name = "noise-floor (c = sqrt 3)" if fam == "noise-floor" else fam
        plots.append(f"$d{i} using 1:2:3:4 with yerrorlines lw 2 pt 7 title '{name} (n = {n})'")
    g = sum(gap) / len(gap) if gap else float("nan")
    script = ("set terminal pngcairo size 960,600 font ',11' noenhanced\n" f"set output '{png}'\n" + "".join(blocks) +
              "set logscale x\nset xlabel 'high-precision share of operator-steps (measured, log; "
              "a share under 0.001 drawn at 0.001; families offset by 4% each)'\n"
              "set ylabel 'gap closed: (L_low - L_arm) / (L_low - L_high)'\n"
              f"set title 'NVFP4 (emulated): run-time promotion against static recipes; low - high = {g:+.4f}'\n"
              "set key below\nset grid\nset yzeroaxis\n"
              "set arrow from graph 0, first 1 to graph 1, first 1 nohead dt 2\n"
              "plot " + ", ".join(plots) + "\n")
    with tempfile.NamedTemporaryFile("w", suffix=".gp", delete=False) as f:
        f.write(script)
    try:
        r = subprocess.run(["gnuplot", f.name], capture_output=True, text=True)
    finally:
        Path(f.name).unlink()
    if r.returncode != 0:
        raise SystemExit(f"nvfp4_arms: gnuplot failed:\n{r.stderr}")
    print(f"nvfp4_arms: wrote {png}")


def _sd(v):
    m = sum(v) / len(v)
    return math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arms", default="low,high",
                    help="comma list of NAME[/c=X][@SLOTS], e.g. low,high,noise-floor@14,noise-floor/c=3@1")
    ap.add_argument("--seeds", default="1-5")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--max-o", default="2",
                    help="noise-floor's and random's slots; a comma list runs each (e.g. 1,2,14)")
    ap.add_argument("--noise-c", type=float, default=math.sqrt(3.0))
    ap.add_argument("--late-share", type=float, default=None,
                    help="late-switch's share of the steps in fp32 (default 2 / depth)")
    ap.add_argument("--snr-log", action="store_true",
                    help="noise-floor runs write OUT/snr-SEED.csv: each operator-step's n / a")
    ap.add_argument("--text", default="/usr/share/games/fortunes")
    ap.add_argument("--out", default="build/nvfp4-arms")
    ap.add_argument("--summary", action="store_true", help="only print the summary of OUT/results.csv")
    ap.add_argument("--plot", default=None, help="with --summary: draw the curve to this PNG (gnuplot)")
    a = ap.parse_args()
    if a.late_share is None:
        a.late_share = 2.0 / a.depth
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res = out / "results.csv"
    if a.summary:
        summary(res)
        if a.plot:
            plot(res, Path(a.plot))
        return
    slots = [int(x) for x in a.max_o.split(",") if x]
    try:
        plan = [r for tok in a.arms.split(",") if tok for r in parse_arm(tok, slots, a.noise_c)]
    except ValueError as e:
        ap.error(str(e))
    done, fields = set(), FIELDS
    if res.exists():
        with open(res) as f:
            rd = csv.DictReader(f)
            fields = rd.fieldnames or FIELDS  # an older file keeps its columns
            done = {(label(r["arm"], r.get("max_o", ""), r.get("noise_c", "")), int(r["seed"])) for r in rd}
    # Seed-major: after k seeds every arm has k paired runs, so a queue
    # stopped early still gives a paired (if wider) comparison.
    for seed in ts.parse_seeds(a.seeds):
        for arm, m, c in plan:
            if (label(arm, m, c), seed) in done:
                continue
            a.max_o_now = m if m != "" else (slots[0] if slots else 0)
            a.noise_c_now = c
            row = run(arm, seed, a)
            new = not res.exists() or res.stat().st_size == 0
            with open(res, "a", newline="") as f:
                w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
                if new:
                    w.writeheader()
                w.writerow(row)
            done.add((label(arm, m, c), seed))  # a plan naming a run twice runs it once
            print(",".join(str(row[k]) for k in FIELDS), flush=True)
    summary(res)


if __name__ == "__main__":
    main()
