#!/usr/bin/env python3
"""gnmr at scale: FSDP2 x tensor parallel on a 2-D device mesh, the guarded
AdamW, and a distributed checkpoint of model, optimizer and controller.

    torchrun --nproc_per_node 4 examples/python/fsdp2_tp.py          # dp=2 x tp=2
    torchrun --nproc_per_node 2 examples/python/fsdp2_tp.py --tp 1   # FSDP2 only
    python examples/python/fsdp2_tp.py --spawn 4                     # the same, no torchrun

On the CPU it runs on gloo; on GPUs (one per rank) on NCCL. The code is the
one docs/python.md ("At scale") shows: gnmr needs nothing but the sharded
model. Each rank reads its local shards; one all-gather per step reduces
the per-unit sums over the mesh; every rank takes the same decisions.
"""
import argparse
import os
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import gnmr


def main(args) -> None:
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    world, rank = dist.get_world_size(), dist.get_rank()
    dev = "cuda" if cuda else "cpu"
    mesh = init_device_mesh(dev, (world // args.tp, args.tp), mesh_dim_names=("dp", "tp"))

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64),
                                torch.nn.GELU(), torch.nn.Linear(64, 8)).to(dev)
    if args.tp > 1:  # tensor parallel inside each dp group
        parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel(),
                                               "4": ColwiseParallel(output_layouts=Replicate())})
    for layer in (model[0], model[2], model[4]):
        fully_shard(layer, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])

    ctl = gnmr.Controller(model)                       # preset "default"; DTensor parameters: the sharded path
    opt = gnmr.optim.AdamW(model.parameters(), lr=1e-3, controller=ctl)

    dp_rank = mesh.get_local_rank("dp")
    for step in range(args.steps):
        g = torch.Generator().manual_seed(step)
        x = torch.randn(32, 64, generator=g).chunk(world // args.tp)[dp_rank].to(dev)
        y = torch.sin(x[:, :8])
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        if step == args.spike_at:                        # a spike in one operator's gradient
            model[2].weight.grad.mul_(1e3)               # (each rank scales its own shard)
        opt.step()                                       # norms, one all-gather, the guarded update
        s = ctl.last_summary
        if rank == 0 and (s.granted or s.nonfinite):
            print(f"step {step}: granted {s.granted}, recovering {ctl.promoted_units()}")

    # Model, optimizer and controller in one distributed checkpoint (the
    # controller is a Stateful: DCP calls its state_dict / load_state_dict).
    ckpt = args.ckpt or os.path.join(tempfile.gettempdir(), "gnmr-fsdp2-tp-ckpt")
    dcp.save({"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt),
              "gnmr": ctl}, checkpoint_id=ckpt)
    if rank == 0:
        print(f"mesh {tuple(mesh.shape)} (dp, tp): controller steps {ctl.steps_done}, "
              f"checkpoint at {ckpt}")
    dist.barrier()
    dist.destroy_process_group()


def _spawned(rank, world, port, args):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    main(args)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--spike-at", type=int, default=25)
    ap.add_argument("--ckpt", default="")
    ap.add_argument("--spawn", type=int, default=0, help="run N ranks without torchrun")
    a = ap.parse_args()
    if a.spawn:
        import socket

        import torch.multiprocessing as mp

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(_spawned, args=(a.spawn, port, a), nprocs=a.spawn, join=True)
    else:
        main(a)
