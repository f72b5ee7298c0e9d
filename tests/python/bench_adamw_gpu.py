#!/usr/bin/env python3
"""gnmr.optim.AdamW against torch.optim.AdamW(fused=True) on a GPU, on the
llama-1.26B layout of bench/ (bench/cuda/layouts.hpp, bench/cuda/torch_anchors.py):
201 fp32 tensors, 1,261,529,088 parameters, one gnmr unit per tensor.

    python tests/python/bench_adamw_gpu.py [--reps 20]

Times are CUDA-event medians after warm-up, random gradients (nothing
triggers, so every unit is updated). gnmr's step is measured eagerly (the
Python call included) and as a replayed CUDA graph. Prints lines
"BENCH,<work>,<ms>" and a markdown table for docs/performance.md.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

import gnmr


# The layout and the timing rule of bench/'s torch anchors, not a copy of them.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "cuda"))
from torch_anchors import LAYOUTS, median_ms  # noqa: E402

SHAPES = LAYOUTS["llama-1.26B"]


def make_params(dev):
    params = [torch.nn.Parameter(torch.randn(s, device=dev) * 0.02) for s in SHAPES]
    for p in params:
        p.grad = torch.randn_like(p) * 0.01
    return params


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    dev = torch.device("cuda")
    rows = []

    def report(work, ms):
        rows.append((work, ms))
        print(f"BENCH,{work},{ms:.4f}", flush=True)

    params = make_params(dev)
    print(f"llama-1.26B: {len(params)} tensors, {sum(p.numel() for p in params):,} parameters")
    ctl = gnmr.Controller(params)
    opt = gnmr.optim.AdamW(params, lr=1e-6, controller=ctl)
    report("gnmr.optim.AdamW.step() eager (norms + controller + fused guarded AdamW)",
           median_ms(opt.step, args.reps))
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        opt.step()
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        opt.step()
    report("gnmr.optim.AdamW.step() as a CUDA graph", median_ms(graph.replay, args.reps))
    assert ctl.replans == 1 and ctl.last_summary.triggered == 0
    del opt, ctl, graph, params
    torch.cuda.empty_cache()

    params = make_params(dev)
    topt = torch.optim.AdamW(params, lr=1e-6, fused=True)
    report("torch.optim.AdamW(fused=True).step()", median_ms(topt.step, args.reps))

    def clip_and_step():
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        topt.step()

    report("clip_grad_norm_(foreach) + AdamW(fused=True)", median_ms(clip_and_step, args.reps))
    print(f"\ngnmr {gnmr.__version__}, torch {torch.__version__} on {torch.cuda.get_device_name()}")
    print("| llama-1.26B, fp32 | median ms |\n|---|---:|")
    for work, ms in rows:
        print(f"| {work} | {ms:.3f} |")


if __name__ == "__main__":
    main()
