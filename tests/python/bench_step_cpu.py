#!/usr/bin/env python3
"""A guarded step against torch's unguarded one on the CPU (docs/performance.md,
"Python package"): gnmr.optim.AdamW.step() (norms + controller + guarded AdamW)
and Controller.step() against torch.optim.AdamW.step() (default: foreach) on
the same 5.0 M parameters in 50 tensors, in one process, with torch's thread
count (torch.get_num_threads(); --threads N sets it).

    python tests/python/bench_step_cpu.py [--threads N] [--params M] [--tensors K] [--preset default]

Median of 7 repetitions of 20 steps each; milliseconds per step.
"""
import argparse
import statistics
import time

import torch

import gnmr


def per_step_ms(fn, steps=20, reps=7):
    for _ in range(3):
        fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        out.append((time.perf_counter() - t0) / steps * 1e3)
    return statistics.median(out), min(out), max(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--params", type=float, default=5.0, help="millions of parameters")
    ap.add_argument("--tensors", type=int, default=50)
    ap.add_argument("--preset", default="default", help="the controller's preset (named in every figure)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    n = int(a.params * 1e6) // a.tensors
    g = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(n, generator=g)) for _ in range(a.tensors)]
    for p in params:
        p.grad = torch.randn(n, generator=g) * 0.01
    ref = torch.optim.AdamW(params, lr=1e-6)
    opt = gnmr.optim.AdamW(params, lr=1e-6, controller=gnmr.Controller(params, a.preset))
    ctl = gnmr.Controller(params, a.preset)
    rows = [("torch.optim.AdamW.step()", ref.step), ("gnmr.optim.AdamW.step()", opt.step),
            ("gnmr.Controller.step() alone", ctl.step)]
    print(f"{a.tensors} tensors, {n * a.tensors / 1e6:.2f} M parameters, "
          f"{torch.get_num_threads()} threads, preset {a.preset}, torch {torch.__version__}, gnmr {gnmr.__version__}")
    for name, fn in rows:
        med, lo, hi = per_step_ms(fn)
        print(f"  {name:30s} {med:7.2f} ms/step (min {lo:.2f}, max {hi:.2f})")


if __name__ == "__main__":
    main()
