#!/usr/bin/env python3
"""Local spikes in a gnmr-demo run's per-unit norm trace (docs/record/stability.md,
the natural-scenario criterion of the calibration).

A step is a *local spike* when between 1 and 3 operator units have a norm
above FACTOR (5) times their own median over the previous WINDOW (20) steps
while no other unit (operator or not) does. Operator units are those whose
name has no parameter suffix (h0.qkv, head; not h0.ln1.weight, tok.weight).

  python3 demo/tools/local_spikes.py DIR/runs/<key>/trace.csv [...]

prints, per trace, the number of local spikes, the number of steps where
more than 3 units spike at once (global), and the steps of the local ones.
"""
import csv
import statistics
import sys

FACTOR, WINDOW, MAX_LOCAL = 5.0, 20, 3


def analyse(path):
    with open(path) as f:
        rows = list(csv.reader(f))
    names = rows[0][1:]
    is_op = [not (n.endswith(".weight") or n.endswith(".bias")) for n in names]
    steps = [int(r[0]) for r in rows[1:]]
    norms = [[float(x) for x in r[1:]] for r in rows[1:]]
    local, wide = [], 0
    for t in range(WINDOW, len(norms)):
        hit = []
        for u in range(len(names)):
            past = [norms[k][u] for k in range(t - WINDOW, t)]
            med = statistics.median(past)
            if med > 0 and norms[t][u] > FACTOR * med:
                hit.append(u)
        if not hit:
            continue
        if len(hit) <= MAX_LOCAL and all(is_op[u] for u in hit):
            local.append((steps[t], [names[u] for u in hit]))
        elif len(hit) > MAX_LOCAL:
            wide += 1
    return local, wide


def main(paths):
    total = 0
    for p in paths:
        local, wide = analyse(p)
        total += len(local)
        print(f"{p}: {len(local)} local, {wide} wide; " + " ".join(f"{s}:{'+'.join(n)}" for s, n in local))
    if paths:
        print(f"mean local spikes per run: {total / len(paths):.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
