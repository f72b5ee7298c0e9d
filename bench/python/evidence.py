#!/usr/bin/env python3
"""evidence.py — every figure of docs/evidence.md, recomputed from the
per-seed rows committed under docs/data/.

    python3 bench/python/evidence.py --check docs/evidence.md    exit 1 listing every mismatch
    python3 bench/python/evidence.py --write docs/evidence.md    rewrite every marked region
    python3 bench/python/evidence.py --collect build/evidence [--data docs/data/evidence]
        copy the per-seed rows of every complete set of runs under OUT (bench/evidence-runs.sh)
        into the data files; a set not complete there keeps the rows the data already hold

The page marks each generated figure: a table or a span of prose between
`<!-- evidence: NAME -->` and `<!-- /evidence: NAME -->` (a region whose
opening marker ends its line is a block, rewritten with the markers on lines
of their own; otherwise the span is inline). --write replaces each region's
content with what the function for NAME computes; --check recomputes it and
reports, per region, the expected and the found text. Figures measured on an
earlier build whose per-seed rows were not kept sit between `<!-- not rerun
-->` and `<!-- /not rerun -->`: they are not checked, and each such block
must say so in its own words ("not kept"). --check also fails on a figure
left in unmarked prose (stray_figures: a percentage, an interval in
brackets, or a number with three or more decimals, outside code, outside
every region and every not-rerun block, other than the fixed constants of
ALLOWED) and on the word "equals" (an interval that includes zero says "not
distinguishable from", never "equals").

How a figure is computed (stated on the page, "How to read the figures"):
a paired difference is the mean over seeds of arm A's final validation loss
minus arm B's on the same seed; its 95% interval is boot(): 10,000
resamples of the seeds with random.Random(20), fresh for every interval,
the bounds being the sorted resampled means at positions int(0.025 * 10000)
and int(0.975 * 10000) - 1 (compare_verdicts.boot, the same code). A gap
closed is a ratio of means, mean(low - arm) / mean(low - high), its interval
the same resampling applied to the ratio. Shares are means over the runs of
a cell; recall and precision means over the runs where they are defined.
A data set that is not complete (seeds or arms missing) gives "awaiting
the rerun" with the command, never a partial figure.

Standard library only: CI runs it with the system python3.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import random
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The documented interval and the per-arm reader are compare_verdicts.py's own.
from compare_verdicts import boot, load as load_arms  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "data" / "evidence"
OLD = ROOT / "docs" / "data"  # the GPU comparison's two files keep their names (other pages link them)
GPU_CPU, GPU_GPU = "verdict-issue31-oo-cpu.csv", "verdict-issue32-oo-gpu.csv"

DRAWS, BOOT_SEED = 10000, 20  # compare_verdicts.boot's, for boot_ratio
QUEUE = "bash bench/evidence-runs.sh"

# The verdict: the four demo scenarios on seeds 381-420 and the Hugging Face row on 3041-3080.
SCENARIOS = ["operator-outliers", "grad-faults", "lr-burst", "fp4-gradients"]
HF = "hf-llama"
VERDICT_SEEDS = {s: range(381, 421) for s in SCENARIOS}
VERDICT_SEEDS[HF] = range(3041, 3081)
VERDICT_LABEL = {s: s for s in SCENARIOS}
VERDICT_LABEL[HF] = "Hugging Face Llama, torchao float8, outlier stressor"
VERDICT_ARMS = ("default", "stabilizer")
# The criteria fixed before the runs (docs/record/stability-verdict.md, the protocols).
MAX_UPPER = 0.003  # default - stabilizer: upper end at most this on grad-faults, lr-burst, fp4-gradients
MIN_RECALL, MIN_PRECISION = 0.8, 0.26

# False alarms: six families, three recipes, 5 seeds a cell.
FAMILIES = [("demo", "demo (gnmr-demo)"), ("llama", "Llama"), ("neox", "GPT-NeoX"), ("qwen2", "Qwen2"),
            ("opt", "OPT"), ("gemma", "Gemma")]
RECIPES = ["base", "short", "long"]
RECIPE_ARGS = {"base": ("3e-3", 20, 200), "short": ("1e-3", 5, 200), "long": ("6e-3", 100, 1000)}
FA_ARMS = ("default", "gnmr-calibrated")
FA_SEEDS = {"demo": range(306, 311)}
FA_GOAL = 0.005
LOCK = 8
# The five cells the first false-alarm table (seeds 301-305 / 3001-3005, before the cap) missed.
FIRST_MISSES = [("gemma", "base"), ("gemma", "short"), ("gemma", "long"), ("opt", "long"), ("demo", "long")]

# The 10,000-step run.
LONG_SEED, LONG_STEPS, LONG_WINDOW = 302, 10000, 1000

# Figures in unmarked prose that are constants, not measurements.
ALLOWED = {"95%": "the interval's level", "0.5%": "the false-alarm goal",
           "0.8%": "rate x lock, the calibrated trigger's bound"}


def fa_seeds(family):
    return FA_SEEDS.get(family, range(3006, 3011))


class Awaiting(Exception):
    pass


# --------------------------------------------------------------------------------------------- statistics

def boot_ratio(num, den, draws=DRAWS, seed=BOOT_SEED):
    """compare_verdicts.boot's resampling for a ratio of means, sum(num) / sum(den) over the drawn seeds."""
    rng = random.Random(seed)
    n = len(num)
    out = []
    for _ in range(draws):
        idx = [rng.randrange(n) for _ in range(n)]
        dd = sum(den[i] for i in idx)
        if dd != 0:
            out.append(sum(num[i] for i in idx) / dd)
    out.sort()
    return out[int(0.025 * len(out))], out[int(0.975 * len(out)) - 1]


def mean(v):
    v = list(v)
    return sum(v) / len(v)


def paired(a, b):
    """(mean, lo, hi, better, worse) of a - b over their common seeds (dicts seed -> value)."""
    seeds = sorted(set(a) & set(b))
    d = [a[s] - b[s] for s in seeds]
    lo, hi = boot(d)
    return mean(d), lo, hi, sum(x < 0 for x in d), sum(x > 0 for x in d)


def says(lo, hi):
    return "lower" if hi < 0 else ("higher" if lo > 0 else "nd")


# --------------------------------------------------------------------------------------------- formats

def num(x, p=4):
    return f"{x:+.{p}f}".replace("-", "−")


def ci(m, lo, hi, p=4):
    return f"{num(m, p)} [{num(lo, p)}, {num(hi, p)}]"


def pct(x, p=2):
    return f"{100 * x:.{p}f}%"


def pct_ci(m, lo, hi):
    return f"{100 * m:.0f}% [{100 * lo:.0f}%, {100 * hi:.0f}%]"


# The parts of bench/evidence-runs.sh (its PARTS) behind each step letter.
PARTS = {"a": "verdict", "b": "hf", "c": "fa-demo fa-hf", "d": "long"}


def awaiting(step):
    parts = " ".join(PARTS[x.strip()] for x in step.split(","))
    return f"*awaiting the rerun* (`PARTS=\"{parts}\" {QUEUE}`)"


def and_list(xs):
    return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " and " + xs[-1]


def seed_range(r):
    return f"{r[0]}–{r[-1]}"


# --------------------------------------------------------------------------------------------- data

def read(name, root=None):
    p = Path(root or DATA) / name
    if not p.exists():
        return None
    with open(p, newline="") as f:
        return list(csv.DictReader(f))


def fnum(s):
    return float(s) if s not in ("", None, "nan") else None


def verdict_data(root=None):
    """{set: {arm: {seed: row}}} for every complete set of verdict.csv."""
    rows = read("verdict.csv", root) or []
    out = {}
    for r in rows:
        out.setdefault(r["scenario"], {}).setdefault(r["arm"], {})[int(r["seed"])] = r
    return {k: v for k, v in out.items() if complete(v, VERDICT_ARMS, VERDICT_SEEDS.get(k, ()))}


def complete(by_arm, arms, seeds):
    return bool(seeds) and all(set(seeds) <= set(by_arm.get(a, {})) for a in arms)


def fa_data(root=None):
    """{(family, recipe): {arm: {seed: row}}}, complete cells only."""
    out = {}
    for r in read("false-alarms.csv", root) or []:
        out.setdefault((r["family"], r["recipe"]), {}).setdefault(r["arm"], {})[int(r["seed"])] = r
    return {k: v for k, v in out.items() if complete(v, FA_ARMS, fa_seeds(k[0]))}


def fa_episodes(root=None):
    out = {}
    for r in read("false-alarm-episodes.csv", root) or []:
        out.setdefault((r["family"], r["recipe"], r["arm"], int(r["seed"])), []).append(
            (r["op"], int(r["start"]), int(r["len"])))
    return out


# --------------------------------------------------------------------------------------------- figure sets

def verdict_figures(root=None):
    """The default against the stabilizer: the table, the criteria, detection, the summary's claim."""
    v = verdict_data(root)
    fig = {}
    head = ("| scenario (seeds) | default − stabilizer | seeds better / worse | default's high-precision share |\n"
            "|---|---|---:|---:|")
    lines = [head]
    res = {}
    for s in SCENARIOS + [HF]:
        label = f"{VERDICT_LABEL[s]} ({seed_range(VERDICT_SEEDS[s])})"
        if s not in v:
            lines.append(f"| {label} | {awaiting('a' if s != HF else 'b')} | | |")
            continue
        val = {arm: {k: float(r["final_val_loss"]) for k, r in v[s][arm].items()} for arm in VERDICT_ARMS}
        m, lo, hi, better, worse = paired(val["default"], val["stabilizer"])
        res[s] = (m, lo, hi)
        share = mean(float(r["hp_share"]) for r in v[s]["default"].values())
        c = ci(m, lo, hi)
        if hi < 0 or lo > 0:
            c = f"**{c}**"
        lines.append(f"| {label} | {c} | {better} / {worse} | {pct(share)} |")
    fig["verdict-table"] = "\n".join(lines)

    # the criteria (the demo's as soon as its four scenarios are in; the Hugging Face row's when it is)
    if all(s in res for s in SCENARIOS):
        oo = res["operator-outliers"]
        met = []
        parts = []
        ok = oo[2] < 0
        met.append(ok)
        parts.append(f"default − stabilizer on operator-outliers: upper end {num(oo[2])}, "
                     f"{'below zero: met' if ok else 'not below zero: missed'}")
        ups = [res[s][2] for s in SCENARIOS[1:]]
        ok = all(u <= MAX_UPPER for u in ups)
        met.append(ok)
        parts.append(f"upper ends {num(ups[0])}, {num(ups[1])} and {num(ups[2])} on grad-faults, lr-burst and "
                     f"fp4-gradients (at most {num(MAX_UPPER, 3)} allowed): {'met' if ok else 'missed'}")
        if HF in res:
            h = res[HF]
            ok = not h[1] > 0
            met.append(ok)
            parts.append("on the Hugging Face stack " + {"nd": "not distinguishable from the stabilizer",
                                                          "lower": "better than the stabilizer",
                                                          "higher": "distinguishably worse"}[says(h[1], h[2])] +
                         f" (asked: not distinguishably worse): {'met' if ok else 'missed'}")
        else:
            parts.append("on the Hugging Face stack " + awaiting("b"))
        tail = ("All met." if all(met) else f"{sum(met)} of {len(met)} met.") + \
            ("" if HF in res else " The Hugging Face row's criterion awaits its runs.")
        fig["verdict-criteria"] = "Against the criteria fixed before the runs: " + "; ".join(parts) + ". " + tail
    else:
        fig["verdict-criteria"] = awaiting("a, b")

    # the summary's first claim (the Hugging Face row named as awaiting while it is)
    if all(s in res for s in SCENARIOS):
        oo = res["operator-outliers"]
        first = {"lower": "ends lower than", "nd": "is not distinguishable from",
                 "higher": "ends higher than"}[says(oo[1], oo[2])]
        rest = {s: says(res[s][1], res[s][2]) for s in SCENARIOS[1:] + ([HF] if HF in res else [])}
        if all(x == "nd" for x in rest.values()):
            other = "on the other three scenarios and on the Hugging Face stack it is not distinguishable from it"
        else:
            groups = []
            for x, words in (("lower", "it ends lower than it"), ("higher", "it ends higher than it"),
                             ("nd", "it is not distinguishable from it")):
                ss = [s for s in rest if rest[s] == x]
                if not ss:
                    continue
                names = [s if s != HF else "the Hugging Face stack" for s in ss]
                figs_ = f" ({', '.join(ci(*res[s]) for s in ss)})" if x != "nd" else ""
                groups.append(f"on {and_list(names)} {words}{figs_}")
            other = "; ".join(groups)
        if HF not in res:
            other = other.replace("on the other three scenarios and on the Hugging Face stack",
                                  "on the other three scenarios")
            other += f" (the Hugging Face row: {awaiting('b')})"
        fig["brief-verdict"] = (f"the `default` preset {first} Stable-SPAM's normalisation alone "
                                f"({ci(*oo)} in final validation loss); {other}")
    else:
        fig["brief-verdict"] = awaiting("a, b")

    # detection
    if "operator-outliers" in v:
        d = v["operator-outliers"]["default"].values()
        rec = mean(x for x in (fnum(r["detect_recall"]) for r in d) if x is not None)
        prec = mean(x for x in (fnum(r["detect_precision"]) for r in d) if x is not None)
        ok = rec >= MIN_RECALL and prec >= MIN_PRECISION
        fig["detection"] = (f"**recall {rec:.3f}, precision {prec:.3f}**; the criteria fixed before the runs, "
                            f"at least {MIN_RECALL:.2f} and at least {MIN_PRECISION:.2f}: "
                            f"{'both met' if ok else 'not both met'}")
    else:
        fig["detection"] = awaiting("a")
    if HF in v:
        d = list(v[HF]["default"].values())
        eps = mean(float(r["episodes"]) for r in d)
        recs = [x for x in (fnum(r["detect_recall"]) for r in d) if x is not None]
        precs = [x for x in (fnum(r["detect_precision"]) for r in d) if x is not None]
        rec = mean(recs) if recs else 0.0
        prec = f"{mean(precs):.3f}" if precs else "undefined (no grant)"
        fig["detection-hf"] = (f"the default's promotions ({eps:.1f} a run on average) give recall {rec:.3f}, "
                               f"precision {prec}")
    else:
        fig["detection-hf"] = awaiting("b")
    return fig


def fa_figures(root=None):
    """False alarms: the table of the default and gnmr-calibrated, the goal, the missed cells."""
    cells = fa_data(root)
    eps = fa_episodes(root)
    fig = {}
    lines = ["| family | recipe | `default` | `gnmr-calibrated` |", "|---|---|---:|---:|"]
    share = {}
    for fam, label in FAMILIES:
        for rec in RECIPES:
            c = cells.get((fam, rec))
            if c is None:
                lines.append(f"| {label} | {rec} | {awaiting('c')} | |")
                continue
            share[(fam, rec)] = {arm: mean(float(r["hp_share"]) for r in c[arm].values()) for arm in FA_ARMS}
            dft = pct(share[(fam, rec)]["default"])
            if share[(fam, rec)]["default"] > FA_GOAL:
                dft = f"**{dft}**"
            lines.append(f"| {label} | {rec} | {dft} | {pct(share[(fam, rec)]['gnmr-calibrated'])} |")
    fig["fa-table"] = "\n".join(lines)
    names = dict(FAMILIES)
    n_cells = len(FAMILIES) * len(RECIPES)
    if len(share) < n_cells:
        for k in ("fa-missed", "fa-first-misses", "fa-same-step"):
            fig[k] = awaiting("c")
        if not share:
            fig["fa-goal"] = fig["brief-fa"] = awaiting("c")
            return fig
        over = [k for k in share if share[k]["default"] > FA_GOAL]
        left = n_cells - len(share)
        fig["fa-goal"] = (f"**So far the goal is met on {len(share) - len(over)} of the {len(share)} cells "
                          f"measured**; the other {left} cells are {awaiting('c')}.")
        fig["brief-fa"] = (f"at most 0.5% of operator-steps on {len(share) - len(over)} of the {len(share)} "
                           f"clean cells measured so far (the other {left} of the {n_cells}: {awaiting('c')})")
        return fig
    miss = [k for k in share if share[k]["default"] > FA_GOAL]
    met = n_cells - len(miss)

    def cell_name(k):
        return f"{names[k[0]].replace(' (gnmr-demo)', '')}, {k[1]} recipe"

    if not miss:
        fig["fa-goal"] = f"**The goal is met on {met} of the {n_cells} cells.**"
        fig["brief-fa"] = f"at most 0.5% of operator-steps on all {n_cells} cells (six model families, three recipes)"
    else:
        over = "; ".join(f"{cell_name(k)}, {pct(share[k]['default'])} "
                         f"({100 * (share[k]['default'] - FA_GOAL):.2f} points over)" for k in miss)
        fig["fa-goal"] = (f"**The goal is met on {met} of the {n_cells} cells and missed on {len(miss)}: "
                          f"{over}.**")
        others = ", ".join(pct(share[k]["default"]) for k in miss)
        fig["brief-fa"] = (f"at most 0.5% of operator-steps on {met} of {n_cells} cells (six model families, three "
                           f"recipes) and {others} on the other{'s' if len(miss) > 1 else ''}")
    # each missed cell, measured from its promotions
    parts = []
    for k in miss:
        c = cells[k]["default"]
        runs = sorted(c)
        ep = [e for s in runs for e in eps.get((k[0], k[1], "default", s), [])]
        per_run = [len(eps.get((k[0], k[1], "default", s), [])) for s in runs]
        kinds = {}
        for op, _, _ in ep:
            short = op.split(".")[-1]
            kinds[short] = kinds.get(short, 0) + 1
        kinds_s = ", ".join(f"{n} on `{kk}`" for kk, n in sorted(kinds.items(), key=lambda x: (-x[1], x[0])))
        starts = sorted(st for _, st, _ in ep)
        r0 = next(iter(c.values()))
        ops, steps = int(r0["ops"]), int(r0["steps"])
        one = LOCK / (ops * steps)
        shares = sorted(float(c[s]["hp_share"]) for s in runs)
        shared = sum(1 for s in runs for st in {e[1] for e in eps.get((k[0], k[1], "default", s), [])}
                     if sum(1 for e in eps.get((k[0], k[1], "default", s), []) if e[1] == st) > 1)
        parts.append(
            f"{cell_name(k)}: {len(ep)} promotions over the {len(runs)} runs ({min(per_run)} to {max(per_run)} a "
            f"run), {kinds_s}; they start at steps {starts[0]} to {starts[-1]} (median "
            f"{starts[len(starts) // 2]}); {shared} step{'s' if shared != 1 else ''} with two or more. On a model of "
            f"{ops} operators and a run of {steps} steps one promotion costs {LOCK} / {ops * steps:,} = {pct(one)} "
            f"of the operator-steps, so the goal allows fewer than {FA_GOAL / one:.1f} a run. The cell's runs "
            f"promote {pct(shares[0])} to {pct(shares[-1])}")
    fig["fa-missed"] = ("Measured from the promotions of each missed cell: " + ". ".join(parts) + "."
                        if parts else "No cell is missed.")
    firsts = [share[k]["default"] for k in FIRST_MISSES]
    under = sum(x <= FA_GOAL for x in firsts)
    fig["fa-first-misses"] = (f"{under} of those five cells are at most 0.5% now (the five: "
                              f"{', '.join(pct(x) for x in firsts)})")
    same = total = runs = 0
    for (fam, rec), c in cells.items():
        for s in c["default"]:
            st = [e[1] for e in eps.get((fam, rec, "default", s), [])]
            same += sum(1 for x in set(st) if st.count(x) > 1)
            total += len(st)
            runs += 1
    fig["fa-same-step"] = (f"the default's {runs} runs start {total} promotions, and {same} "
                           f"step{'s' if same != 1 else ''} of them {'has' if same == 1 else 'have'} two or more "
                           f"starting together")
    return fig


def long_run_figures(root=None):
    """The 10,000-step run: the share per thousand steps, its slope, the windows' promotion counts."""
    rows = read("long-run.csv", root)
    if not rows:
        return {"long-run": awaiting("d")}
    r0 = rows[0]
    steps, ops = int(r0["steps"]), int(r0["ops"])
    if steps != LONG_STEPS or int(r0["seed"]) != LONG_SEED:
        return {"long-run": awaiting("d")}
    nwin = steps // LONG_WINDOW
    opsteps = [0] * nwin
    starts = [0] * nwin
    lens = []
    for r in rows:
        if r["op"] == "":
            continue  # a run without any promotion keeps one row with an empty op
        st, ln = int(r["start"]), int(r["len"])
        lens.append(ln)
        starts[(st - 1) // LONG_WINDOW] += 1
        for t in range(st, st + ln):
            if 1 <= t <= steps:
                opsteps[(t - 1) // LONG_WINDOW] += 1
    share = [x / (LONG_WINDOW * ops) for x in opsteps]
    xs = list(range(1, nwin + 1))
    mx, my = mean(xs), mean(100 * s for s in share)
    slope = sum((x - mx) * (100 * s - my) for x, s in zip(xs, share)) / sum((x - mx) ** 2 for x in xs)
    noise = math.sqrt(mean(starts)) * (mean(lens) if lens else LOCK) / (LONG_WINDOW * ops) * 100
    trend = "does not drift up" if slope <= 0 else "drifts up"
    return {"long-run": (f"{', '.join(pct(s) for s in share)} (the whole run: {pct(sum(opsteps) / (steps * ops))}). "
                         f"It {trend}: a least-squares slope of {num(slope, 3)} points per thousand steps "
                         f"({min(starts)} to {max(starts)} promotions start in a window, whose Poisson noise "
                         f"alone is about ±{noise:.2f} points)")}


def gpu_figures(root=None):
    """The previous default's operator-outliers verdict on a GPU against the CPU (seeds 201-240)."""
    base = Path(root) if root else OLD

    def load(name):
        p = base / name
        return load_arms(str(p), "operator-outliers") if p.exists() else None

    cpu, gpu = load(GPU_CPU), load(GPU_GPU)
    if cpu is None or gpu is None:
        return {"gpu": "*the data files are missing*"}
    pairs = [("default", "stabilizer"), ("default", "low"), ("stabilizer", "low"), ("high", "low")]
    same = 0
    res = {}
    for x, y in pairs:
        seeds = sorted(set(cpu[x]) & set(cpu[y]) & set(gpu[x]) & set(gpu[y]))
        out = []
        for d in (cpu, gpu):
            diff = [d[x][s] - d[y][s] for s in seeds]
            lo, hi = boot(diff)
            out.append((mean(diff), lo, hi))
        res[(x, y)] = out
        same += says(out[0][1], out[0][2]) == says(out[1][1], out[1][2])

    def gap(d, arm):
        seeds = sorted(set(d["low"]) & set(d["high"]) & set(d[arm]) & set(cpu[arm]) & set(gpu[arm]))
        num_ = [d["low"][s] - d[arm][s] for s in seeds]
        den = [d["low"][s] - d["high"][s] for s in seeds]
        return (sum(num_) / sum(den),) + boot_ratio(num_, den)

    ds = res[("default", "stabilizer")]
    return {"gpu": (f"the same conclusion on {same} of the {len(pairs)} pairs (default − stabilizer, default − low, "
                    f"stabilizer − low, high − low): default − stabilizer {ci(*ds[1])} on the GPU against "
                    f"{ci(*ds[0])} on the CPU; the default closes {pct_ci(*gap(gpu, 'default'))} of the low–high "
                    f"gap on the GPU, {pct_ci(*gap(cpu, 'default'))} on the CPU")}


def nvfp4_figures(root=None):
    """The NVFP4 comparison's regions: evidence_nvfp4.py, with this module's statistics."""
    import evidence_nvfp4
    return evidence_nvfp4.figures(sys.modules[__name__], root)


FIGURE_SETS = (verdict_figures, fa_figures, long_run_figures, gpu_figures, nvfp4_figures)


def figures(data=None, old=None):
    out = {}
    for f in FIGURE_SETS:
        out.update(f(old if f is gpu_figures else data))
    return out


# --------------------------------------------------------------------------------------------- the page

REGION = re.compile(r"<!-- evidence: ([\w-]+) -->(.*?)<!-- /evidence: \1 -->", re.S)
OPEN = re.compile(r"<!-- evidence: ([\w-]+) -->")
CLOSE = re.compile(r"<!-- /evidence: ([\w-]+) -->")
NOT_RERUN = re.compile(r"<!-- not rerun -->(.*?)<!-- /not rerun -->", re.S)
FIGURE = re.compile(r"\[\s*[+−-]?\d[\d.,%]*\s*,\s*[+−-]?\d[\d.,%]*\s*\]"  # an interval
                    r"|[+−-]?\d+(?:\.\d+)?%"                               # a percentage
                    r"|[+−-]?\b\d+\.\d{3,}\b")                             # three or more decimals


def render(page, figs):
    """The page with every region's content replaced; (new page, problems)."""
    problems = []

    def sub(m):
        name, body = m.group(1), m.group(2)
        if name not in figs:
            problems.append(f"region {name}: no figure set computes it")
            return m.group(0)
        block = body.startswith("\n")
        new = f"\n{figs[name]}\n" if block else figs[name]
        return f"<!-- evidence: {name} -->{new}<!-- /evidence: {name} -->"

    out = REGION.sub(sub, page)
    found = [m.group(1) for m in REGION.finditer(page)]
    for name in figs:
        if name not in found:
            problems.append(f"region {name}: computed but not on the page")
    opens, closes = OPEN.findall(page), CLOSE.findall(page)
    if sorted(opens) != sorted(found) or sorted(closes) != sorted(found):
        problems.append(f"unbalanced or nested markers: opened {opens}, closed {closes}")
    if len(set(found)) != len(found):
        problems.append("a region appears twice: " + ", ".join(sorted({n for n in found if found.count(n) > 1})))
    return out, problems


def check(page, figs):
    """Every mismatch between the page and the figures, and every stray figure."""
    new, problems = render(page, figs)
    have = {m.group(1): m.group(2).strip() for m in REGION.finditer(page)}
    for name, text in figs.items():
        if name in have and have[name] != text.strip():
            problems.append(f"region {name}:\n    expected: {text.strip()}\n    found:    {have[name]}")
    return problems + stray_figures(page)


def strip_code(text):
    text = re.sub(r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "``", text)


def stray_figures(page):
    """Figures in prose outside every region and not-rerun block (see the module's docstring)."""
    problems = []
    for m in NOT_RERUN.finditer(page):
        if "not kept" not in m.group(1):
            line = page[:m.start()].count("\n") + 1
            problems.append(f"line {line}: a not-rerun block that does not say its per-seed data were not kept")
    blank = REGION.sub(lambda m: "\n" * m.group(0).count("\n"), page)
    blank = NOT_RERUN.sub(lambda m: "\n" * m.group(0).count("\n"), blank)
    blank = strip_code(blank)
    for n, line in enumerate(blank.splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue  # headings name seeds and recipes, not figures
        for f in FIGURE.finditer(line):
            if f.group(0) not in ALLOWED:
                problems.append(f"line {n}: figure {f.group(0)!r} outside every marked region")
        if re.search(r"\bequals?\b", line):
            problems.append(f"line {n}: 'equals': say 'not distinguishable from' where an interval includes zero")
    return problems


# --------------------------------------------------------------------------------------------- collect

DEMO_OPS = ("qkv", "proj", "gate", "up", "down")


def demo_op(i):
    return f"h{i // 5}.{DEMO_OPS[i % 5]}" if i < 20 else "head"


def demo_result(run_dir):
    out = {}
    for line in open(run_dir / "result.txt"):
        if "=" in line and not line.startswith("#"):
            k, _, v = line.rstrip("\n").partition("=")
            out[k] = v
    return out


def demo_episodes(run_dir):
    r = demo_result(run_dir)
    eps = []
    for e in r.get("episodes", "").split(";"):
        if e:
            op, st, ln = e.split(":")
            eps.append((demo_op(int(op)), int(st), int(ln)))
    assert sum(e[2] for e in eps) == int(r["promoted_op_steps"]), run_dir
    return eps


def demo_rows(path):
    p = Path(path) / "results.csv"
    return list(csv.DictReader(open(p, newline=""))) if p.exists() else []


def hf_rows(path):
    p = Path(path) / "results.csv"
    return list(csv.DictReader(open(p, newline=""))) if p.exists() else []


def merge(name, fields, key, new_rows, data):
    """Replace, in data/name, the rows of every set in new_rows (key(row) -> set); keep the others."""
    old = read(name, data) or []
    sets = {key(r) for r in new_rows}
    rows = [r for r in old if key(r) not in sets] + new_rows
    if not rows:
        return 0
    Path(data).mkdir(parents=True, exist_ok=True)
    with open(Path(data) / name, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in fields})
    return len(sets)


def collect(out, data):
    out = Path(out)
    # the verdict
    vfields = ["scenario", "arm", "seed", "final_val_loss", "hp_share", "detect_recall", "detect_precision",
               "episodes"]
    new = []
    for s in SCENARIOS:
        rows = [r for r in demo_rows(out / f"verdict-{s}") if r["arm"] in VERDICT_ARMS
                and int(r["seed"]) in VERDICT_SEEDS[s] and r["scenario"] == s]
        by = {}
        for r in rows:
            by.setdefault(r["arm"], {})[int(r["seed"])] = r
        if not complete(by, VERDICT_ARMS, VERDICT_SEEDS[s]):
            print(f"verdict {s}: not complete ({len(rows)} runs)")
            continue
        for r in rows:
            eps = demo_episodes(out / f"verdict-{s}" / "runs" / r["key"])
            new.append(dict(scenario=s, arm=r["arm"], seed=r["seed"], final_val_loss=r["final_val_loss"],
                            hp_share=r["hp_share"], detect_recall=r["detect_recall"],
                            detect_precision=r["detect_precision"], episodes=len(eps)))
    rows = [r for r in hf_rows(out / "hf-llama") if r["arm"] in VERDICT_ARMS and int(r["seed"]) in VERDICT_SEEDS[HF]]
    by = {}
    for r in rows:
        by.setdefault(r["arm"], {})[int(r["seed"])] = r
    if complete(by, VERDICT_ARMS, VERDICT_SEEDS[HF]):
        for r in rows:
            new.append(dict(scenario=HF, arm=r["arm"], seed=r["seed"], final_val_loss=r["val_loss"],
                            hp_share=r["hp_share"], detect_recall=r["detect_recall"],
                            detect_precision=r["detect_precision"], episodes=r["episodes"]))
    else:
        print(f"verdict {HF}: not complete ({len(rows)} runs)")
    new.sort(key=lambda r: ((SCENARIOS + [HF]).index(r["scenario"]), r["arm"], int(r["seed"])))
    n = merge("verdict.csv", vfields, lambda r: r["scenario"], new, data)
    print(f"verdict.csv: {n} set(s) written")

    # false alarms
    ffields = ["family", "recipe", "arm", "seed", "ops", "steps", "hp_share", "episodes", "final_val_loss"]
    efields = ["family", "recipe", "arm", "seed", "op", "start", "len"]
    new, new_eps = [], []
    for fam, _ in FAMILIES:
        for rec in RECIPES:
            d = out / f"fa-{fam}-{rec}"
            lr, wu, steps = RECIPE_ARGS[rec]
            if fam == "demo":
                rows = [r for r in demo_rows(d) if r["arm"] in FA_ARMS and int(r["seed"]) in fa_seeds(fam)
                        and int(r["steps"]) == steps]
            else:
                rows = [r for r in hf_rows(d) if r["arm"] in FA_ARMS and int(r["seed"]) in fa_seeds(fam)
                        and int(r["steps"]) == steps and r["model"] == fam and r["events"] == "0"]
            by = {}
            for r in rows:
                by.setdefault(r["arm"], {})[int(r["seed"])] = r
            if not complete(by, FA_ARMS, fa_seeds(fam)):
                print(f"false alarms {fam} {rec}: not complete ({len(rows)} runs)")
                continue
            for r in rows:
                if fam == "demo":
                    eps = demo_episodes(d / "runs" / r["key"])
                    row = dict(ops=21, steps=r["steps"], hp_share=r["hp_share"], final_val_loss=r["final_val_loss"])
                    assert abs(float(r["promoted_op_steps"]) / (21 * steps) - float(r["hp_share"])) < 1e-9
                else:
                    eps = [tuple(e) for e in json.loads((d / "episodes" / f"{r['arm']}-{r['seed']}.json").read_text())]
                    row = dict(ops=r["ops"], steps=r["steps"], hp_share=r["hp_share"], final_val_loss=r["val_loss"])
                row.update(family=fam, recipe=rec, arm=r["arm"], seed=r["seed"], episodes=len(eps))
                new.append(row)
                for op, st, ln in eps:
                    new_eps.append(dict(family=fam, recipe=rec, arm=r["arm"], seed=r["seed"], op=op, start=st, len=ln))
    order = lambda r: ([f for f, _ in FAMILIES].index(r["family"]), RECIPES.index(r["recipe"]),  # noqa: E731
                       r["arm"], int(r["seed"]), int(r.get("start") or 0))
    new.sort(key=order)
    new_eps.sort(key=order)
    key = lambda r: (r["family"], r["recipe"])  # noqa: E731
    n = merge("false-alarms.csv", ffields, key, new, data)
    done = {key(r) for r in new}
    # the episodes of a complete cell replace the old ones even where the cell had none
    old = [r for r in read("false-alarm-episodes.csv", data) or [] if key(r) not in done]
    if old or new_eps:
        Path(data).mkdir(parents=True, exist_ok=True)
        with open(Path(data) / "false-alarm-episodes.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=efields, lineterminator="\n")
            w.writeheader()
            w.writerows(old + new_eps)
    print(f"false-alarms.csv: {n} cell(s) written")

    # the 10,000-step run
    rows = [r for r in demo_rows(out / "long-302") if r["arm"] == "default" and int(r["seed"]) == LONG_SEED
            and int(r["steps"]) == LONG_STEPS]
    if rows:
        r = rows[0]
        eps = demo_episodes(out / "long-302" / "runs" / r["key"])
        lfields = ["arm", "seed", "steps", "ops", "op", "start", "len"]
        Path(data).mkdir(parents=True, exist_ok=True)
        with open(Path(data) / "long-run.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=lfields, lineterminator="\n")
            w.writeheader()
            for op, st, ln in eps or [("", "", "")]:
                w.writerow(dict(arm="default", seed=LONG_SEED, steps=LONG_STEPS, ops=21, op=op, start=st, len=ln))
        print("long-run.csv: written")
    else:
        print("long run: not complete")


# --------------------------------------------------------------------------------------------- main

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--check", metavar="PAGE")
    g.add_argument("--write", metavar="PAGE")
    g.add_argument("--collect", metavar="OUT")
    g.add_argument("--print", action="store_true", help="print every region's figures")
    ap.add_argument("--data", default=str(DATA), help="the per-seed data (default docs/data/evidence)")
    ap.add_argument("--old", default=str(OLD), help="where the GPU comparison's two files are (default docs/data)")
    a = ap.parse_args(argv)
    if a.collect:
        collect(a.collect, a.data)
        return 0
    figs = figures(a.data, a.old)
    if a.print:
        for k, v in figs.items():
            print(f"--- {k}\n{v}")
        return 0
    path = a.check or a.write
    page = Path(path).read_text()
    if a.write:
        new, problems = render(page, figs)
        Path(path).write_text(new)
        problems += stray_figures(new)
        for p in problems:
            print(p)
        print(f"evidence: wrote {len(REGION.findall(new))} regions of {path}, {len(problems)} problem(s)")
        return 1 if problems else 0
    problems = check(page, figs)
    for p in problems:
        print(p)
    print(f"evidence: {len(REGION.findall(page))} regions of {path} checked, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
