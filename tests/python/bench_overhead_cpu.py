#!/usr/bin/env python3
"""Host cost of the binding's step on the CPU (docs/performance.md, "Python
package"): Controller.step() on 201 tensors of 64 elements (so that the norms
cost next to nothing and what remains is the binding: reading 201 .grad,
the controller step, returning the summary), and gnmr.optim.AdamW.step()
against torch.optim.AdamW.step() on the same tensors.

    .venv/bin/python tests/python/bench_overhead_cpu.py

Median of 7 repetitions of 2000 steps each; microseconds per step.
"""
import statistics
import time

import torch

import gnmr


def per_step_us(fn, steps=2000, reps=7):
    fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        out.append((time.perf_counter() - t0) / steps * 1e6)
    return statistics.median(out)


def main():
    torch.set_num_threads(1)
    params = [torch.nn.Parameter(torch.randn(64)) for _ in range(201)]
    for p in params:
        p.grad = torch.randn_like(p) * 0.01
    ctl = gnmr.Controller(params)
    print(f"Controller.step(), 201 units x 64 elements: {per_step_us(ctl.step):.1f} us/step")
    ctl2 = gnmr.Controller(params)
    opt = gnmr.optim.AdamW(params, lr=1e-6, controller=ctl2)
    print(f"gnmr.optim.AdamW.step(), same tensors:      {per_step_us(opt.step):.1f} us/step")
    ref = torch.optim.AdamW(params, lr=1e-6)
    print(f"torch.optim.AdamW.step(), same tensors:     {per_step_us(ref.step):.1f} us/step")
    print(f"torch {torch.__version__}, gnmr {gnmr.__version__}")


if __name__ == "__main__":
    main()
