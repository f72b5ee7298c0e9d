"""The sharded path: gnmr.Controller and gnmr.optim.AdamW over DTensor
parameters (FSDP2's ``fully_shard``, tensor parallel's
``parallelize_module``, both on a 2-D device mesh).

Each rank holds a part of every unit. A unit's norm must still be the norm
of the whole unit, and every rank must take the same decision, or the ranks'
weights drift apart. So, per step:

1. each rank reads its local shard of every gradient (a gradient whose
   placements differ from its parameter's, e.g. ``Partial``, is first
   redistributed to the parameter's placements: that is the reduction the
   optimizer needs anyway) and computes its per-unit sums of squares with
   the library's host or CUDA kernels; a tensor replicated along a mesh
   dimension is counted only by the ranks at coordinate 0 of that
   dimension, so every element of the model is counted exactly once;
2. **one** collective over the mesh's ranks, through the model's own process
   groups: an all-gather of the per-unit vectors (gloo on CPU, NCCL on
   CUDA, no transport of gnmr's), after which every rank adds them in rank
   order 0, 1, ..., R-1 in fp32, as the C++ ``MpiReducer`` does with
   ``kOrderedAllgather``. An all-reduce would move R times less data, but
   torch itself warns that its reduction order may differ between ranks;
   a decision must never depend on that. The units are few (hundreds), so
   the vector is a few KB;
3. the controller step on the reduced sums, the same on every rank, and
   the decisions applied to the local shards (skip: ``grad = None`` on
   every rank; clip: the local shard scaled).

Determinism: the local sums are host_unit_partials' (or NormPlan's) over a
fixed layout and the cross-rank sum has a fixed order, so the same
gradients give bitwise the same decisions on every rank and every run.
Against an unsharded single process on the same data, a unit's sum of
squares differs by the rounding of R partial sums (a few fp32 ulps) plus
whatever the gradients themselves differ by (the data-parallel
reduce-scatter adds in another order): docs/python.md ("At scale") gives
the tolerance the tests hold.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import torch
import torch.distributed as dist

try:  # torch >= 2.4 has the public module
    from torch.distributed.tensor import DTensor, Replicate, Shard
except ImportError:  # pragma: no cover - older torch
    DTensor = None  # type: ignore[assignment,misc]


def is_dtensor(t: Any) -> bool:
    """Whether ``t`` is a torch DTensor (a sharded or replicated tensor)."""
    return DTensor is not None and isinstance(t, DTensor)


def any_dtensor(tensors: Sequence[torch.Tensor]) -> bool:
    return any(is_dtensor(t) for t in tensors)


def _is_shard(pl: Any) -> bool:
    """Shard, or FSDP2-over-TP's _StridedShard (each rank still holds
    distinct elements, which is all the sums need)."""
    return isinstance(pl, Shard) or type(pl).__name__ == "_StridedShard" or bool(
        getattr(pl, "is_shard", lambda: False)())


def _mesh_ranks(mesh: Any) -> List[int]:
    return [int(r) for r in mesh.mesh.flatten().tolist()]


def _mesh_group(mesh: Any) -> Any:
    """The process group over every rank of ``mesh``, the model's own: the
    mesh's group when it has one dimension, the default group when the mesh
    spans the world, else the mesh flattened to one dimension (whose group
    the mesh creates and keeps)."""
    if mesh.ndim == 1:
        return mesh.get_group()
    if mesh.size() == dist.get_world_size():
        return dist.group.WORLD
    return mesh._flatten().get_group()


# torch 2.13 renames all_gather_into_tensor (and warns on the old name).
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


class ShardedUnits:
    """What the sharded path needs to know about a controller's tensors:
    their local shards, which of them this rank counts, the mesh's group.

    Built once, at the controller's construction (a collective may be
    needed to create the flattened group: every rank must construct its
    controller at the same point, as for any collective)."""

    def __init__(self, tensors: Sequence[torch.Tensor], labels: Sequence[str]) -> None:
        if not dist.is_available() or not dist.is_initialized():
            raise ValueError("gnmr: DTensor parameters need torch.distributed to be initialised "
                             "(init_process_group) before the controller is built")
        meshes = [(t.device_mesh, label) for t, label in zip(tensors, labels) if is_dtensor(t)]
        mesh, first = meshes[0]
        ranks = _mesh_ranks(mesh)
        for m, label in meshes[1:]:
            if m is not mesh and _mesh_ranks(m) != ranks:
                raise ValueError(f"gnmr: tensor {label!r} lives on a device mesh over ranks "
                                 f"{_mesh_ranks(m)}, {first!r} on one over {ranks}: one controller "
                                 "watches tensors of one mesh (build one controller per mesh)")
        self.mesh = mesh
        self.group = _mesh_group(mesh)
        self.world = dist.get_world_size(self.group)
        self.rank = dist.get_rank(self.group)
        self.tensors = list(tensors)
        self.labels = list(labels)
        self.counted = [self._counts(t) for t in self.tensors]
        self._grads: List[Optional[torch.Tensor]] = [None] * len(self.tensors)
        self._index = {id(t): i for i, t in enumerate(self.tensors)}
        self._gathered: Optional[torch.Tensor] = None
        self._sum: Optional[torch.Tensor] = None

    def _counts(self, t: torch.Tensor) -> bool:
        """Whether this rank adds t's local shard into the units' sums."""
        if not is_dtensor(t):
            # A plain tensor beside DTensors: replicated on every rank of the
            # mesh (DDP-style), counted by the group's first rank.
            return self.rank == 0
        coord = t.device_mesh.get_coordinate()
        if coord is None:
            return False
        for d, pl in enumerate(t.placements):
            if _is_shard(pl):
                continue
            if pl.is_replicate():
                if coord[d] != 0:
                    return False
                continue
            raise ValueError(f"gnmr: parameter placement {pl} is not supported (Shard or "
                             "Replicate)")
        return True

    @staticmethod
    def local(t: torch.Tensor) -> torch.Tensor:
        """The local shard of t (t itself for a plain tensor)."""
        return t._local_tensor if is_dtensor(t) else t

    def local_params(self) -> List[torch.Tensor]:
        return [self.local(t) for t in self.tensors]

    # ----------------------------------------------------------------- step ---
    @torch.no_grad()
    def gather_grads(self) -> List[Optional[torch.Tensor]]:
        """This step's local gradients, one per tensor (None: no gradient),
        each redistributed first to its parameter's placements when they
        differ (a Partial gradient is reduced). Kept until the next call,
        for :meth:`local_grad`. Returns the list the norms read: None also
        for the tensors this rank does not count."""
        out: List[Optional[torch.Tensor]] = []
        for i, p in enumerate(self.tensors):
            g = p.grad
            if g is not None and is_dtensor(g) and is_dtensor(p) and tuple(g.placements) != tuple(p.placements):
                g = g.redistribute(p.device_mesh, p.placements)
                p.grad = g
            loc = self.local(g) if g is not None else None
            self._grads[i] = loc
            out.append(loc if self.counted[i] else None)
        return out

    def local_grad(self, p: torch.Tensor) -> Optional[torch.Tensor]:
        """p's local gradient as :meth:`gather_grads` last saw it."""
        return self._grads[self._index[id(p)]]

    def reduce(self, partials: torch.Tensor) -> torch.Tensor:
        """The sum over the mesh's ranks of every rank's ``partials`` (a 1-D
        float32 tensor), added in rank order: one all-gather. Returns a
        buffer reused by the next call (no allocation after the first)."""
        n = partials.numel()
        if self._gathered is None or self._gathered.device != partials.device:
            self._gathered = torch.empty(self.world * n, dtype=torch.float32, device=partials.device)
            self._sum = torch.empty(n, dtype=torch.float32, device=partials.device)
        _all_gather(self._gathered, partials, group=self.group)
        rows = self._gathered.view(self.world, n)
        out = self._sum
        out.copy_(rows[0])
        for r in range(1, self.world):
            out.add_(rows[r])
        return out

    @torch.no_grad()
    def apply(self, scale: List[float], flags: List[int], unit_of: Dict[int, int],
              skip_flag: int, global_skip: bool) -> None:
        """The decisions on the local shards: a skipped unit's tensors (every
        tensor on a global skip) get grad = None, a scaled unit's local
        gradient is scaled in place (never a multiply by a skip's 0)."""
        for p in self.tensors:
            if p.grad is None:
                continue
            u = unit_of[id(p)]
            if global_skip or flags[u] & skip_flag:
                p.grad = None
            elif scale[u] != 1.0:
                self.local(p.grad).mul_(scale[u])
