#!/usr/bin/env python3
"""Cost of gnmr in FSDP2 training on the CPU (docs/performance.md, "At
scale"): 2 processes (gloo, one thread each), an MLP of 8 Linear(1024, 1024)
layers (8.4 M parameters, sharded by rows), batch 64; the full training step
(forward, backward with FSDP2's all-gathers and reduce-scatters, optimizer)
timed with three optimizers:

  torch      torch.optim.AdamW (foreach), no gnmr
  ctl+torch  gnmr.Controller.step(opt) (local norms, one all-gather of the
             per-unit sums, decisions applied to the shards), then torch's AdamW;
             the time inside ctl.step(opt) is also timed alone (the added
             cost without the noise of the collectives around it)
  gnmr       gnmr.optim.AdamW (norms, controller and guarded update fused)

    .venv/bin/python tests/python/bench_fsdp_cpu.py [--steps 20] [--reps 9]

Prints the median step time (rank 0, ms) over reps, after 5 warm-up steps,
and each arm's difference from `torch` as the median of the per-repetition
ratios with their range. The arms run interleaved, one repetition of each in
turn, so machine drift hits them alike and the ratios are paired.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

import gnmr

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sharded_runs import free_port, rank_main  # noqa: E402

WIDTH, DEPTH, BATCH = 1024, 8, 64


def build(arm):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(DEPTH)])
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    ctl = gnmr.Controller(model, "gnmr") if arm != "torch" else None
    if arm == "gnmr":
        opt = gnmr.optim.AdamW(model.parameters(), lr=1e-4, controller=ctl)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    return model, ctl, opt


@rank_main
def worker(rank, world, port, steps, reps, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=port, rank=rank, world_size=world)
    try:
        arms = {a: build(a) for a in ("torch", "ctl+torch", "gnmr")}
        g = torch.Generator().manual_seed(rank)
        x = torch.randn(BATCH, WIDTH, generator=g)
        y = torch.randn(BATCH, WIDTH, generator=g)

        def step(arm):
            model, ctl, opt = arms[arm]
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            if arm == "ctl+torch":
                t0 = time.perf_counter()
                ctl.step(opt)
                in_ctl.append(time.perf_counter() - t0)
            opt.step()

        in_ctl = []  # seconds inside ctl.step(opt), every timed step
        times = {a: [] for a in arms}
        for a in arms:
            for _ in range(5):
                step(a)
        in_ctl.clear()
        for _ in range(reps):
            for a in arms:
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(steps):
                    step(a)
                dist.barrier()
                times[a].append((time.perf_counter() - t0) / steps * 1e3)
        if rank == 0:
            print(f"FSDP2 CPU step, {world} ranks x 1 thread, {DEPTH}x Linear({WIDTH},{WIDTH}), "
                  f"batch {BATCH}, {steps} steps x {reps} reps (median, rank 0):")
            for a, v in times.items():
                ratios = [100 * (x / b - 1) for x, b in zip(v, times["torch"])]
                print(f"  {a:10s} {statistics.median(v):8.2f} ms   {statistics.median(ratios):+6.1f}% vs "
                      f"torch (per-rep range {min(ratios):+.1f}% .. {max(ratios):+.1f}%)")
            c = statistics.median(in_ctl) * 1e3
            print(f"  inside ctl.step(opt): {c:.2f} ms per step (median) = "
                  f"{100 * c / statistics.median(times['torch']):.2f}% of the torch step")
        dist.barrier()
    finally:
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--reps", type=int, default=9)
    a = ap.parse_args()
    mp.spawn(worker, args=(2, free_port(), a.steps, a.reps, {}), nprocs=2, join=True)


if __name__ == "__main__":
    main()
