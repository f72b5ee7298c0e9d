"""evidence_base.py — what every room of evidence.py computes with: where the
per-seed data live, the sets of runs behind each figure (arms, seeds, the
criteria fixed before the runs), the statistics (compare_verdicts.boot's
interval; boot_ratio, the same resampling for a ratio of means), the
formats, and the readers of the data files. evidence.py's docstring says
how a figure is computed. Standard library only.
"""
from __future__ import annotations

import csv
import random
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
