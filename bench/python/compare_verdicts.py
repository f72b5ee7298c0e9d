#!/usr/bin/env python3
"""compare_verdicts.py — the same suite on two devices (issue 32, part 4):
does the GPU run reach the CPU run's conclusion on the same seeds?

    python bench/python/compare_verdicts.py CPU_RESULTS.csv GPU_RESULTS.csv \
        [--scenario operator-outliers] [--pairs default:stabilizer,default:low,high:low]

Each file is a gnmr-demo suite's results.csv (docs/record/stability-verdict.md). For
every pair A:B it prints, per device, the paired difference mean(A - B) over
the seeds both devices ran, with a bootstrap 95% interval (10,000 draws), and
the conclusion the protocol draws from it ("A better", "B better", "not
distinguishable"); then whether the two devices agree, and the per-seed
spread of the GPU-CPU difference of each arm (the two devices' float
arithmetic differs, so runs diverge: this says by how much). Exit 0 when
every pair's conclusion agrees, 1 otherwise. Standard library only.
"""
from __future__ import annotations

import argparse
import csv
import random
import statistics
import sys


def load(path: str, scenario: str):
    out = {}
    for r in csv.DictReader(open(path)):
        if r["scenario"] == scenario:
            out.setdefault(r["arm"], {})[int(r["seed"])] = float(r["final_val_loss"])
    return out


def boot(d, draws=10000, seed=20):
    rng = random.Random(seed)
    n = len(d)
    m = sorted(sum(d[rng.randrange(n)] for _ in range(n)) / n for _ in range(draws))
    return m[int(0.025 * draws)], m[int(0.975 * draws) - 1]


def verdict(lo: float, hi: float, a: str, b: str) -> str:
    if hi < 0:
        return f"{a} better"
    if lo > 0:
        return f"{b} better"
    return "not distinguishable"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cpu")
    ap.add_argument("gpu")
    ap.add_argument("--scenario", default="operator-outliers")
    ap.add_argument("--pairs", default="default:stabilizer,default:low,stabilizer:low,high:low")
    a = ap.parse_args()
    cpu, gpu = load(a.cpu, a.scenario), load(a.gpu, a.scenario)
    agree = True
    print(f"| pair | CPU mean [95% CI] | CPU says | GPU mean [95% CI] | GPU says | same? | seeds |")
    print("|---|---|---|---|---|---|---:|")
    for pair in a.pairs.split(","):
        x, y = pair.split(":")
        if not all(k in d for d in (cpu, gpu) for k in (x, y)):
            print(f"| {x} − {y} | (an arm is missing on one device) | | | | | |")
            agree = False
            continue
        seeds = sorted(set(cpu[x]) & set(cpu[y]) & set(gpu[x]) & set(gpu[y]))
        if len(seeds) < 10:
            print(f"| {x} − {y} | (only {len(seeds)} common seeds: no interval below 10) | | | | | |")
            agree = False
            continue
        row = []
        says = []
        for d in (cpu, gpu):
            diff = [d[x][s] - d[y][s] for s in seeds]
            lo, hi = boot(diff)
            says.append(verdict(lo, hi, x, y))
            row += [f"{sum(diff) / len(diff):+.4f} [{lo:+.4f}, {hi:+.4f}]", says[-1]]
        same = says[0] == says[1]
        agree = agree and same
        print(f"| {x} − {y} | {row[0]} | {row[1]} | {row[2]} | {row[3]} | {'yes' if same else 'NO'} | {len(seeds)} |")
    print("\nGPU − CPU per arm (same seed), the devices' divergence:")
    for arm in sorted(set(cpu) & set(gpu)):
        seeds = sorted(set(cpu[arm]) & set(gpu[arm]))
        if len(seeds) > 1:
            d = [gpu[arm][s] - cpu[arm][s] for s in seeds]
            print(f"  {arm:28s} mean {statistics.mean(d):+.4f}  sd {statistics.stdev(d):.4f}  ({len(seeds)} seeds)")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
