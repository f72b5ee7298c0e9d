#!/usr/bin/env python3
"""The stability benchmark's verdict with intervals (issue 20): reads a
gnmr-demo suite folder (results.csv and the run cache runs/<key>/) and
reports, per scenario and arm, against the recipe alone (`low`):

* the paired difference in final validation loss, mean over seeds with a
  bootstrap 95% interval (seeds resampled, 10,000 draws), and how many
  seeds it is better / worse on;
* the share of the low-high gap it closes, as a ratio of mean differences
  mean(low - arm) / mean(low - high), with its bootstrap interval (never a
  mean of per-seed ratios, which explodes on a seed with a small gap);
* an event-level measure: the injected events are known (runs/<key>/
  events.csv); for every event, the arm's training loss minus `high`'s on
  the same seed and batches over the event and the `--window` steps after
  it, summed over the seed's events; the recovery share is
  1 - mean(excess_arm) / mean(excess_low), with its interval;
* power: the spread of each arm's paired differences, the seeds a paired
  test needs to detect --delta (default 0.005) at 80% power and 5% two-sided,
  and what the seeds run can detect.

    python bench/python/verdict.py DIR [--against stabilizer] [--csv OUT]
    python bench/python/verdict.py DIR --base stabilizer --against default-random
        (a suite without `low`: differences to another arm; issue 31)

Writes a markdown table to stdout and, with --csv, the numbers with their
interval columns. Standard library + numpy only.
"""
from __future__ import annotations

import argparse
import csv
import math
import os
from collections import defaultdict
from typing import Dict, List, Tuple

import numpy as np

Z_975, Z_80 = 1.959964, 0.841621


def load(dirname: str):
    rows = list(csv.DictReader(open(os.path.join(dirname, "results.csv"))))
    val: Dict[Tuple[str, str], Dict[int, float]] = defaultdict(dict)
    key: Dict[Tuple[str, str], Dict[int, str]] = defaultdict(dict)
    for r in rows:
        k = (r["scenario"], r["arm"])
        val[k][int(r["seed"])] = float(r["final_val_loss"])
        key[k][int(r["seed"])] = r["key"]
    return val, key


def train_loss(dirname: str, key: str) -> np.ndarray:
    with open(os.path.join(dirname, "runs", key, "steps.csv")) as f:
        rows = list(csv.DictReader(f))
    return np.array([float(r["train_loss"]) for r in rows])


def events(dirname: str, key: str) -> List[Tuple[int, int]]:
    path = os.path.join(dirname, "runs", key, "events.csv")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [(int(r["step"]), int(r["len"])) for r in csv.DictReader(f) if r["kind"] == "event"]


def excess(dirname: str, k_arm: str, k_high: str, window: int) -> float:
    """Sum over the seed's events of the arm's train loss minus high's, over
    the event's steps and the window after it (steps are 1-based)."""
    a, h = train_loss(dirname, k_arm), train_loss(dirname, k_high)
    n = min(len(a), len(h))
    tot = 0.0
    for step, length in events(dirname, k_high):
        lo, hi = step - 1, min(n, step - 1 + length + window)
        if lo < hi:
            tot += float(np.sum(a[lo:hi] - h[lo:hi]))
    return tot


MIN_SEEDS = 10  # no interval below this (demo/bootstrap.hpp's kBootMinSeeds, same reason)


def boot_ci(fn, n: int, draws: int, rng: np.random.Generator) -> Tuple[float, float]:
    if n < MIN_SEEDS:
        return float("nan"), float("nan")
    idx = rng.integers(0, n, size=(draws, n))
    vals = np.array([fn(i) for i in idx])
    vals = vals[np.isfinite(vals)]
    if vals.size == 0:  # e.g. a scenario without injected events: no excess to share
        return float("nan"), float("nan")
    return float(np.percentile(vals, 2.5)), float(np.percentile(vals, 97.5))


def fmt(x: float, ci: Tuple[float, float], p: int = 4) -> str:
    return f"{x:+.{p}f} [{ci[0]:+.{p}f}, {ci[1]:+.{p}f}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--against", default="stabilizer", help="a second reference arm for paired differences")
    ap.add_argument("--base", default="low", help="the first reference arm (default low, the recipe alone)")
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--delta", type=float, default=0.005)
    ap.add_argument("--draws", type=int, default=10000)
    ap.add_argument("--csv", default="")
    ap.add_argument("--arms", default="", help="comma-separated arms to report, in this order (default: all)")
    ap.add_argument("--inner-gap", default="",
                    help="LOW,HIGH: also the share of the LOW-HIGH gap closed, mean(LOW - arm) / mean(LOW - HIGH), "
                         "e.g. stabilizer,stabilizer-high for what a rule adds under the stabilizer")
    a = ap.parse_args()
    val, key = load(a.dir)
    rng = np.random.default_rng(20)
    out_rows = []
    for scen in sorted({s for s, _ in val}):
        arms = [arm for s, arm in val if s == scen]
        if a.arms:
            arms = [arm for arm in a.arms.split(",") if arm in arms] + \
                [arm for arm in (a.base, "high") if arm in arms and arm not in a.arms.split(",")]
        ig = a.inner_gap.split(",") if a.inner_gap else []
        if ig and not all(arm in arms for arm in ig):
            ig = []
        seeds = sorted(set.intersection(*[set(val[(scen, arm)]) for arm in arms]))
        n = len(seeds)
        low = np.array([val[(scen, a.base)][s] for s in seeds])
        if ig:  # the inner gap's two arms, once per scenario
            lo_i = np.array([val[(scen, ig[0])][s] for s in seeds])
            gi = lo_i - np.array([val[(scen, ig[1])][s] for s in seeds])
        high = np.array([val[(scen, "high")][s] for s in seeds]) if "high" in arms and a.base == "low" else None
        ex = {}
        if high is not None:
            for arm in arms:
                ex[arm] = np.array([excess(a.dir, key[(scen, arm)][s], key[(scen, "high")][s], a.window)
                                    for s in seeds])
        print(f"\n### {scen}: {n} seeds ({seeds[0]}-{seeds[-1]}), window {a.window}\n")
        print(f"| arm | val (mean) | arm - {a.base} [95% CI] | better/worse | gap closed [95% CI] | "
              f"arm - {a.against} [95% CI] | event excess vs high | recovery share [95% CI] | sd(arm-low) | "
              f"seeds for {a.delta} | detectable |" + (f" {ig[0]} gap closed [95% CI] | sd(arm-{a.against}) |"
                                                       if ig else ""))
        print("|---|---:|---|---|---|---|---:|---|---:|---:|---:|" + ("---|---:|" if ig else ""))
        for arm in arms:
            x = np.array([val[(scen, arm)][s] for s in seeds])
            d = x - low
            md = float(d.mean())
            ci_d = boot_ci(lambda i: d[i].mean(), n, a.draws, rng)
            sd = float(d.std(ddof=1)) if n > 1 else float("nan")
            need = math.ceil(((Z_975 + Z_80) * sd / a.delta) ** 2) if sd > 0 else 0
            detect = (Z_975 + Z_80) * sd / math.sqrt(n) if n > 1 else float("nan")
            gap = ci_gap = None
            if high is not None and arm != a.base:
                g = low - high
                gap = float((low - x).mean() / g.mean())
                ci_gap = boot_ci(lambda i: (low[i] - x[i]).mean() / g[i].mean(), n, a.draws, rng)
            vs = ""
            ci_vs = None
            d_against = ""
            if (scen, a.against) in val:
                dv = x - np.array([val[(scen, a.against)][s] for s in seeds])
                d_against = float(dv.mean())
                if arm != a.against:
                    ci_vs = boot_ci(lambda i: dv[i].mean(), n, a.draws, rng)
                    vs = fmt(d_against, ci_vs)
            share = ci_share = None
            if ex and arm in ex and "low" in ex and ex["low"].mean() != 0:
                el = ex["low"]
                share = float(1.0 - ex[arm].mean() / el.mean())
                ci_share = boot_ci(lambda i: 1.0 - ex[arm][i].mean() / el[i].mean(), n, a.draws, rng)
            inner = ""
            ig_gap = ig_ci = None
            if ig:
                if arm not in ig:
                    ig_gap = float((lo_i - x).mean() / gi.mean())
                    ig_ci = boot_ci(lambda i: (lo_i[i] - x[i]).mean() / gi[i].mean(), n, a.draws, rng)
                sd_vs = float(dv.std(ddof=1)) if d_against != "" and n > 1 else float("nan")
                inner = f" {fmt(ig_gap, ig_ci, 2) if ig_gap is not None else '–'} | {sd_vs:.4f} |"
            print(f"| {arm} | {x.mean():.4f} | {fmt(md, ci_d) if arm != a.base else '–'} | "
                  f"{int((d < 0).sum())}/{int((d > 0).sum())} | "
                  f"{fmt(gap, ci_gap, 2) if gap is not None and arm != 'high' else ('1' if arm == 'high' else '–')} | "
                  f"{vs or '–'} | {ex[arm].mean() if ex else float('nan'):+.3f} | "
                  f"{fmt(share, ci_share, 2) if share is not None and arm not in (a.base, 'high') else '–'} | "
                  f"{sd:.4f} | {need} | {detect:.4f} |" + inner)
            out_rows.append(dict(scenario=scen, arm=arm, seeds=n, val_mean=x.mean(), d_low=md,
                                 d_low_lo=ci_d[0], d_low_hi=ci_d[1],
                                 gap_closed=gap if gap is not None else "",
                                 gap_lo=ci_gap[0] if ci_gap else "", gap_hi=ci_gap[1] if ci_gap else "",
                                 d_against=d_against,
                                 d_against_lo=ci_vs[0] if ci_vs else "", d_against_hi=ci_vs[1] if ci_vs else "",
                                 event_excess=float(ex[arm].mean()) if ex else "",
                                 recovery_share=share if share is not None else "",
                                 share_lo=ci_share[0] if ci_share else "", share_hi=ci_share[1] if ci_share else "",
                                 sd_d_low=sd, seeds_for_delta=need, detectable=detect,
                                 inner_gap=ig_gap if ig_gap is not None else "",
                                 inner_gap_lo=ig_ci[0] if ig_ci else "", inner_gap_hi=ig_ci[1] if ig_ci else ""))
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(out_rows[0]))
            w.writeheader()
            w.writerows(out_rows)


if __name__ == "__main__":
    main()
