"""DDP on the CPU (gloo, 2 processes): each rank runs the controller on the
same all-reduced gradients and must take bitwise the same decisions, step by
step, and end with the same weights. Faults enter through one rank's loss,
before the all-reduce, so both ranks see them.
"""
from __future__ import annotations

import os
import pickle

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

import gnmr
from conftest import batch, f32_bits, make_model
from sharded_runs import free_port, init, rank_main

STEPS = 60
# Loss factors on rank 0 (a spike that the all-reduce spreads to both ranks).
SPIKES = {25: 1e3, 26: 1e3, 40: float("nan")}


@rank_main
def _rank(rank: int, world: int, port: str, out: str, guarded: bool) -> None:
    init(rank, world, port)
    try:
        model = torch.nn.parallel.DistributedDataParallel(make_model(3))
        ctl = gnmr.Controller(model.module, "gnmr", tau=2.5, warmup=5)
        if guarded:
            opt = gnmr.optim.AdamW(model.parameters(), lr=3e-3, controller=ctl)
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        rec = []
        for t in range(STEPS):
            x, y = batch(2 * t + rank)  # each rank its own data
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            if rank == 0 and t in SPIKES:
                loss = loss * SPIKES[t]
            loss.backward()  # DDP all-reduces here
            if guarded:
                opt.step()
            else:
                ctl.step(opt)
                opt.step()
            d = ctl.decisions()
            rec.append(([f32_bits(v) for v in d.scale.tolist()], d.flags.tolist(),
                        ctl.last_summary.as_dict()))
        weights = [p.detach().clone() for p in model.parameters()]
        with open(os.path.join(out, f"rank{rank}.pkl"), "wb") as f:
            pickle.dump((rec, weights), f)
        # Both ranks done before either tears gloo down: a rank that closes
        # its pairs while the other still holds them can make gloo abort.
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="no gloo")
@pytest.mark.parametrize("guarded", [True, False], ids=["gnmr-adamw", "torch-adamw"])
def test_ddp_ranks_decide_identically(tmp_path, guarded):
    mp.spawn(_rank, args=(2, free_port(), str(tmp_path), guarded), nprocs=2, join=True)
    with open(tmp_path / "rank0.pkl", "rb") as f:
        rec0, w0 = pickle.load(f)
    with open(tmp_path / "rank1.pkl", "rb") as f:
        rec1, w1 = pickle.load(f)
    assert len(rec0) == STEPS
    assert rec0 == rec1  # scale bits, flags, every summary field
    assert all(torch.equal(a, b) for a, b in zip(w0, w1))
    # The spikes were seen and acted on (not a test of nothing).
    acted = [t for t, (_, flags, s) in enumerate(rec0) if s["granted"] or s["nonfinite"] or any(flags)]
    assert 25 in acted and 40 in acted
    assert all(torch.isfinite(w).all() for w in w0)
