"""evidence_nvfp4.py — the NVFP4 comparison's figures on docs/evidence.md
(regions nvfp4-table and nvfp4-verdict), from the per-seed rows of the
report queue (docs/record/nvfp4-arms.md, "Protocol"), committed as
docs/data/evidence/nvfp4-arms.csv once every report seed is complete:

    cp build/nvfp4-arms/report/results.csv docs/data/evidence/nvfp4-arms.csv
    python3 bench/python/evidence.py --write docs/evidence.md

and region nvfp4-explore from the two arms run after the verdict
(stabilizer, high-stabilizer; docs/record/nvfp4-arms.md, "The report"),
whose rows are appended to the same file.

A room of evidence.py: it computes with evidence_base.py's statistics and
formats (the intervals are compare_verdicts.boot's and the gap closed is
boot_ratio's ratio of means, as the page documents), and gives "awaiting
the report runs" with the command until the data set is complete (never a
partial figure). Standard library only.
"""
from __future__ import annotations

import math

import evidence_base as ev

DATA_FILE = "nvfp4-arms.csv"
SEEDS = range(201, 221)
S_SLOTS = 14  # static-layers' share at depth 6, 14 of 42 operators
SHARES = (1, 2, S_SLOTS)  # --max-o: about 2%, 5% and S
C_DEV = "8.1"  # noise_c chosen on the development seeds (the record's rule)
STATIC = ("low", "high", "static-layers", "late-switch", "default")
QUEUE = ('python bench/python/nvfp4_arms.py --seeds 201-220 --steps 600 --depth 6 --max-o 1,2,14 '
         '--arms "low,high,static-layers,late-switch,default,noise-floor@14,noise-floor/c=8.1,random" '
         '--out build/nvfp4-arms/report')


def label(arm, max_o="", noise_c=""):
    """A row's arm label: nvfp4_arms.label's scheme (slots after @, a
    noise_c other than sqrt(3) after /c=)."""
    c = ""
    if arm == "noise-floor" and noise_c not in ("", None) and abs(float(noise_c) - math.sqrt(3.0)) > 1e-6:
        c = f"/c={float(noise_c):g}"
    return f"{arm}{c}@{max_o}" if max_o not in ("", None) else f"{arm}{c}"


def labels():
    """Every run label of the protocol, in the table's order."""
    out = list(STATIC) + [f"noise-floor@{S_SLOTS}"]
    out += [f"noise-floor/c={C_DEV}@{m}" for m in SHARES]
    out += [f"random@{m}" for m in SHARES]
    return out


EXPLORE_QUEUE = ('python bench/python/nvfp4_arms.py --seeds 201-220 --steps 600 --depth 6 --arms stabilizer '
                 '--out build/nvfp4-arms/explore')


def share_pct(x):
    """A share as a percentage; one a hundredth of a per cent or less keeps
    its first digit (a single lock on one seed is 0.002%), not 0.00%."""
    return ev.pct(x) if x == 0 or x >= 1e-4 else f"{100 * x:.1g}%"


def awaiting():
    return f"*awaiting the report runs* (`{QUEUE}`, then `cp build/nvfp4-arms/report/results.csv docs/data/evidence/{DATA_FILE}`)"


def data(root=None):
    """{label: {seed: row}} when every label has every report seed, else None."""
    rows = ev.read(DATA_FILE, root)
    if not rows:
        return None
    by = {}
    for r in rows:
        by.setdefault(label(r["arm"], r.get("max_o", ""), r.get("noise_c", "")), {})[int(r["seed"])] = r
    if not all(set(SEEDS) <= set(by.get(k, {})) for k in labels()):
        return None
    return {k: {s: by[k][s] for s in SEEDS} for k in labels()}


def losses(by, k):
    return {s: float(r["final_loss"]) for s, r in by[k].items()}


def figures(root=None):
    by = data(root)
    if by is None:
        return {"nvfp4-table": awaiting(), "nvfp4-verdict": awaiting(), "nvfp4-explore": awaiting()}
    low, high = losses(by, "low"), losses(by, "high")
    seeds = sorted(low)
    gap = ev.paired(low, high)
    den = [low[s] - high[s] for s in seeds]
    lines = ["| arm | high-precision share | arm − low [95%] | gap closed [95%] |", "|---|---|---|---|"]
    for k in labels():
        if k == "low":
            continue
        arm = losses(by, k)
        share = ev.mean(float(r["hp_share"]) for r in by[k].values())
        d = ev.paired(arm, low)
        num = [low[s] - arm[s] for s in seeds]
        g = sum(num) / sum(den)
        lo, hi = ev.boot_ratio(num, den)
        lines.append(f"| `{k}` | {share_pct(share)} | {ev.ci(*d[:3])} | {ev.pct_ci(g, lo, hi)} |")
    lines.append(f"\n`low` − `high` over seeds {ev.seed_range(seeds)}: {ev.ci(*gap[:3])}.")
    st = losses(by, "static-layers")
    lines.append(f"Against the static layers: `late-switch` − `static-layers` "
                 f"{ev.ci(*ev.paired(losses(by, 'late-switch'), st)[:3])}, `default` − `static-layers` "
                 f"{ev.ci(*ev.paired(losses(by, 'default'), st)[:3])}.")
    fired = sum(float(r["hp_share"]) > 0 for r in by[f"noise-floor@{S_SLOTS}"].values())
    lines.append(f"At √3 the noise-floor trigger promoted on {fired} of the {len(seeds)} seeds.")
    table = "\n".join(lines)

    explore = explored(root, low, high, st)
    # The protocol's rule ("What counts"): at a share, noise-floor - random
    # and noise-floor - static-layers both below zero with intervals
    # excluding it. With no resolved gap, only the differences to low count.
    if ev.says(gap[1], gap[2]) != "higher":
        verdict = (f"the low–high gap is not resolved at this scale (`low` − `high` {ev.ci(*gap[:3])}); "
                   f"the arms are reported by their differences to `low` only")
        return {"nvfp4-table": table, "nvfp4-verdict": verdict, "nvfp4-explore": explore}
    parts, wins = [], []
    for c in ("", f"/c={C_DEV}"):
        for m in SHARES:
            k = f"noise-floor{c}@{m}"
            if k not in by:
                continue
            nf = losses(by, k)
            vr = ev.paired(nf, losses(by, f"random@{m}")) if f"random@{m}" in by else None
            vs = ev.paired(nf, losses(by, "static-layers")) if m == S_SLOTS else None
            vl = ev.paired(nf, losses(by, "late-switch")) if m == S_SLOTS else None
            bits = []
            if vr:
                bits.append(f"− `random@{m}` {ev.ci(*vr[:3])}")
            if vs:
                bits.append(f"− `static-layers` {ev.ci(*vs[:3])}")
            if vl:
                bits.append(f"− `late-switch` {ev.ci(*vl[:3])}")
            parts.append(f"`{k}` " + ", ".join(bits))
            if vr and vs and ev.says(vr[1], vr[2]) == "lower" and ev.says(vs[1], vs[2]) == "lower":
                wins.append(k)
    head = (f"run-time promotion beats both the random choice and the static layers at the same share for "
            f"{ev.and_list([f'`{w}`' for w in wins])}" if wins else
            "run-time promotion does not beat both the random choice and the static layers at any share "
            "(the protocol's condition for it to be worth its machinery)")
    d = ev.paired(losses(by, "default"), low)
    verdict = f"{head}: " + "; ".join(parts) + f"; `default` − `low` {ev.ci(*d[:3])}. " + enough(by, gap[0])
    return {"nvfp4-table": table, "nvfp4-verdict": verdict, "nvfp4-explore": explore}


def explored(root, low, high, static):
    """After the verdict, not part of it (docs/record/nvfp4-arms.md, "The
    report"): the stabilizer arm on the report seeds, which tells the
    default's promotions from its normalisation, and the same normalisation
    on high, which tells NVFP4's loss recovered from a better optimizer."""
    rows = [r for r in ev.read(DATA_FILE, root) or [] if r["arm"] in ("stabilizer", "high-stabilizer", "default")]
    by = {}
    for r in rows:
        by.setdefault(r["arm"], {})[int(r["seed"])] = float(r["final_loss"])
    if not set(SEEDS) <= set(by.get("stabilizer", {})):
        return (f"*awaiting the runs* (`{EXPLORE_QUEUE}`, then its rows appended to "
                f"`docs/data/evidence/{DATA_FILE}`)")
    st = {s: by["stabilizer"][s] for s in SEEDS}
    df = {s: by["default"][s] for s in SEEDS}
    num = [low[s] - st[s] for s in SEEDS]
    den = [low[s] - high[s] for s in SEEDS]
    g, (lo, hi) = sum(num) / sum(den), ev.boot_ratio(num, den)
    out = (f"`stabilizer` − `low` {ev.ci(*ev.paired(st, low)[:3])} (gap closed {ev.pct_ci(g, lo, hi)}), "
           f"`default` − `stabilizer` {ev.ci(*ev.paired(df, st)[:3])}, "
           f"`stabilizer` − `static-layers` {ev.ci(*ev.paired(st, static)[:3])}")
    if not set(SEEDS) <= set(by.get("high-stabilizer", {})):
        return out + (f"; `high-stabilizer` *awaits its runs* (`{EXPLORE_QUEUE.replace('stabilizer', 'high-stabilizer')}`)"
                      f", seeds {ev.seed_range(sorted(st))}")
    hs = {s: by["high-stabilizer"][s] for s in SEEDS}
    return out + (f"; `high-stabilizer` − `high` {ev.ci(*ev.paired(hs, high)[:3])}, "
                  f"`stabilizer` − `high-stabilizer` {ev.ci(*ev.paired(st, hs)[:3])}; seeds {ev.seed_range(sorted(st))}")


def enough(by, gap):
    """The protocol's seed rule: more than the 20 report seeds if the
    interval of noise-floor - static-layers at S is wider than a tenth of
    the low-high gap. Says whether it is met and, where not, about how many
    seeds the same spread would need (the width shrinks as 1/sqrt(n))."""
    n = len(SEEDS)
    widths = {}
    for c in ("", f"/c={C_DEV}"):
        k = f"noise-floor{c}@{S_SLOTS}"
        if k in by:
            _, lo, hi = ev.paired(losses(by, k), losses(by, "static-layers"))[:3]
            widths[k] = hi - lo
    bar = gap / 10
    said = ", ".join(f"`{k}` {w:.4f}" for k, w in widths.items())
    if all(w <= bar for w in widths.values()):
        return f"Seeds: the intervals of noise-floor − `static-layers` at S are {said} wide, within a tenth of the gap ({bar:.4f}): {n} seeds are enough by the protocol's rule."
    need = max(math.ceil(n * (w / bar) ** 2) for w in widths.values())
    return (f"Seeds: the intervals of noise-floor − `static-layers` at S are {said} wide, more than a tenth of the "
            f"gap ({bar:.4f}), so the protocol's rule asks for more than {n} seeds; at this spread about {need}.")
