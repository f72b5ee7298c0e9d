"""The training runs behind test_sharded.py and test_dcp.py: the same small
model and global batches trained unsharded in one process, or sharded with
FSDP2, tensor parallel or both on a 2-D mesh (gloo, CPU), each step's
decisions recorded.

Every layout sees the same global batch per step: data-parallel ranks take
equal slices of it (FSDP2 averages their gradients, so the mean loss over
the global batch is the same objective), tensor-parallel ranks see all of
it. Faults are global (the loss scaled on every rank, which the unsharded
run reproduces) or one rank's: a NaN written into rank 1's local shard of
fc1.weight, which the unsharded run reproduces by writing it into the same
element of the whole gradient.
"""
from __future__ import annotations

import functools
import os
import pickle
import sys
import tempfile
from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F

import gnmr
from conftest import batch, f32_bits, make_model

# Loss factors on every rank, and the step of the one-rank NaN.
SPIKES = {18: 1e3, 19: 1e3, 31: 50.0}
NAN_STEP = 24
OVERRIDES = dict(tau=2.5, warmup=5)
LR = 3e-3


def free_port() -> str:
    """A fresh rendezvous for one mp.spawn: a file:// store in a new
    temporary folder. Not a TCP port: a port found free here could be taken
    (CTest runs MPI jobs beside pytest) before rank 0's store binds it;
    gloo's own connections bind port 0. Passed to init() as `port`."""
    return "file://" + os.path.join(tempfile.mkdtemp(prefix="gnmr-rdv-"), "store")


def rank_main(fn):
    """A spawned rank's entry point that leaves with os._exit(0) once it has
    returned (its results written, its process group destroyed): gloo's
    worker threads can abort the interpreter's finalization ("terminate
    called without an active exception", SIGABRT; pytorch/pytorch#179291
    describes the mechanism), which mp.spawn reports as a failed rank after
    the work succeeded. An exception still propagates to mp.spawn as usual,
    and a rank that dies before writing its results still fails the test."""
    @functools.wraps(fn)
    def main(*args, **kwargs):
        fn(*args, **kwargs)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return main


def init(rank: int, world: int, port: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=port, rank=rank, world_size=world)


def build(layout: str, world: int):
    """(model, dp_rank, dp_size) for a layout: 'ref' (unsharded), 'fsdp',
    'tp' or '2d' (FSDP2 over dp x TP over tp)."""
    from torch.distributed.device_mesh import init_device_mesh

    model = make_model(3)
    if layout == "ref":
        return model, 0, 1
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    plan = {"fc1": ColwiseParallel(), "fc2": RowwiseParallel(),
            "out": ColwiseParallel(output_layouts=Replicate())}
    if layout == "fsdp":
        mesh = init_device_mesh("cpu", (world,))
        for name in ("fc1", "fc2", "out"):
            fully_shard(getattr(model, name), mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model, dist.get_rank(), world
    if layout == "tp":
        mesh = init_device_mesh("cpu", (world,))
        parallelize_module(model, mesh, plan)
        return model, 0, 1
    if layout == "2d":
        mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "tp"))
        parallelize_module(model, mesh["tp"], plan)
        for name in ("fc1", "fc2", "out"):
            fully_shard(getattr(model, name), mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
        return model, mesh.get_local_rank("dp"), 2
    raise ValueError(layout)


def full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if gnmr.sharded.is_dtensor(t) else t


def inject_nan(model: torch.nn.Module, layout: str) -> None:
    """NaN into element [16, 0] of fc1.weight's gradient: in rank 1's local
    shard when sharded by rows (fsdp: rows 16-31 on rank 1 of 2), the same
    element of the whole gradient unsharded."""
    g = model.fc1.weight.grad
    if layout == "ref":
        g[16, 0] = float("nan")
    elif layout == "fsdp" and dist.get_world_size() == 2:
        if dist.get_rank() == 1:
            g._local_tensor[0, 0] = float("nan")
    else:
        raise ValueError(f"no one-rank NaN for layout {layout}")


def train(model, ctl, opt, guarded: bool, steps: range, dp_rank: int, dp_size: int,
          layout: str, nan: bool) -> List[Dict[str, Any]]:
    rec = []
    for t in steps:
        x, y = batch(t)
        x, y = x.chunk(dp_size)[dp_rank], y.chunk(dp_size)[dp_rank]
        opt.zero_grad()
        loss = F.mse_loss(model(x), y) * SPIKES.get(t, 1.0)
        loss.backward()
        if nan and t == NAN_STEP:
            inject_nan(model, layout)
        before = {n: full(p).detach().clone() for n, p in model.named_parameters()}
        if guarded:
            opt.step()
        else:
            ctl.step(opt)
            opt.step()
        d = ctl.decisions()
        after = {n: full(p).detach() for n, p in model.named_parameters()}
        rec.append(dict(step=t, scale=d.scale.tolist(),
                        scale_bits=[f32_bits(v) for v in d.scale.tolist()],
                        flags=d.flags.tolist(), summary=ctl.last_summary.as_dict(),
                        norm=ctl.reports()["norm"].tolist(),
                        changed={n: not torch.equal(before[n], after[n]) for n in before}))
    return rec


@rank_main
def run(rank: int, world: int, port: str, out: str, layout: str, guarded: bool,
        steps: int, nan: bool) -> None:
    """One rank of a sharded run (rank 0 of 1 for 'ref'): writes
    rank{r}.pkl with the record, the final whole weights and the event log."""
    init(rank, world, port)
    try:
        model, dp_rank, dp_size = build(layout, world)
        ctl = gnmr.Controller(model, "gnmr", **OVERRIDES)
        log = os.path.join(out, f"events{rank}.jsonl")
        ctl.events(log)
        if guarded:
            opt = gnmr.optim.AdamW(model.parameters(), lr=LR, controller=ctl)
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=LR)
        rec = train(model, ctl, opt, guarded, range(steps), dp_rank, dp_size, layout, nan)
        ctl.close()
        weights = {n: full(p).detach().clone() for n, p in model.named_parameters()}
        with open(os.path.join(out, f"rank{rank}.pkl"), "wb") as f:
            pickle.dump(dict(rec=rec, weights=weights, sharded=ctl.sharded,
                             events=open(log).read()), f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def load(out: str, rank: int) -> Dict[str, Any]:
    with open(os.path.join(out, f"rank{rank}.pkl"), "rb") as f:
        return pickle.load(f)


@rank_main
def dcp_run(rank: int, world: int, port: str, out: str, phase: str, ckpt: str,
            save_at: int, steps: int, preset: str = "gnmr") -> None:
    """One rank of a checkpoint run. 'save': FSDP2 on `world` ranks, trains
    to save_at, saves model, optimizer and controller with
    torch.distributed.checkpoint, trains on to `steps`. 'load': a fresh
    model (unsharded on 1 rank, FSDP2 on more), loads that checkpoint
    (resharding it) and trains save_at..steps. Both record those steps."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (get_model_state_dict,
                                                         get_optimizer_state_dict,
                                                         set_model_state_dict,
                                                         set_optimizer_state_dict)

    init(rank, world, port)
    try:
        layout = "ref" if world == 1 else "fsdp"
        model, dp_rank, dp_size = build(layout, world)
        ctl = gnmr.Controller(model, preset, **(OVERRIDES if preset == "gnmr" else {}))
        opt = gnmr.optim.AdamW(model.parameters(), lr=LR, controller=ctl)
        if phase == "save":
            train(model, ctl, opt, True, range(save_at), dp_rank, dp_size, layout, False)
            dcp.save({"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt),
                      "gnmr": ctl}, checkpoint_id=ckpt)
        else:
            state = {"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt),
                     "gnmr": ctl}
            dcp.load(state, checkpoint_id=ckpt)  # the controller, a Stateful, loads itself
            set_model_state_dict(model, state["model"])
            set_optimizer_state_dict(model, opt, state["optim"])
        resumed_at = ctl.steps_done
        rec = train(model, ctl, opt, True, range(save_at, steps), dp_rank, dp_size, layout, False)
        weights = {n: full(p).detach().clone() for n, p in model.named_parameters()}
        with open(os.path.join(out, f"{phase}{world}_rank{rank}.pkl"), "wb") as f:
            pickle.dump(dict(rec=rec, weights=weights, resumed_at=resumed_at), f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


@rank_main
def spike_run(rank: int, world: int, port: str, out: str, preset: str, at: int, steps: int) -> None:
    """One rank of FSDP2 training under `preset` with gnmr.optim.AdamW; at
    step `at` the last rank's local shard of fc1.weight's gradient alone is
    multiplied by 1000 (one rank sees the spike). Writes spike{rank}.pkl:
    per step, the flags and the summary."""
    init(rank, world, port)
    try:
        model, dp_rank, dp_size = build("fsdp", world)
        ctl = gnmr.Controller(model, preset)
        opt = gnmr.optim.AdamW(model.parameters(), lr=LR, controller=ctl)
        rec = []
        for t in range(1, steps + 1):
            x, y = batch(t)
            x, y = x.chunk(dp_size)[dp_rank], y.chunk(dp_size)[dp_rank]
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            if t == at and rank == world - 1:
                model.fc1.weight.grad._local_tensor.mul_(1000.0)
            opt.step()
            rec.append(dict(step=t, flags=ctl.decisions().flags.tolist(), summary=ctl.last_summary.as_dict(),
                            unit=ctl.unit_of(model.fc1.weight)))
        with open(os.path.join(out, f"spike{rank}.pkl"), "wb") as f:
            pickle.dump(rec, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()
