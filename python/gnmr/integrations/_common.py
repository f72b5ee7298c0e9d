"""What the framework integrations share: running the controller on a torch
optimizer's gradients, the recipe's global clip after gnmr's decisions, and
the per-interval figures they log.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch

from ..controller import Controller
from ..optim import AdamW as GnmrAdamW
from ..summary import StepSummary


def unwrap_optimizer(optimizer: Any) -> Any:
    """The torch optimizer under a framework's wrapper (accelerate's
    AcceleratedOptimizer, Lightning's LightningOptimizer keep it in
    ``.optimizer``)."""
    seen = 0
    while hasattr(optimizer, "optimizer") and seen < 4:
        optimizer = optimizer.optimizer
        seen += 1
    return optimizer


def guarded_step(ctl: Controller, optimizer: Any, max_norm: float) -> Optional[StepSummary]:
    """One controller step on ``optimizer``'s gradients before it steps,
    then (``max_norm > 0``) torch's global clip over the gradients left:
    GNMR reads the raw per-unit norms and the recipe's clip acts after its
    decisions, the order of gnmr's stability benchmark. A gnmr.optim.AdamW
    runs the controller itself: nothing to do (returns None)."""
    inner = unwrap_optimizer(optimizer)
    if isinstance(inner, GnmrAdamW):
        return None
    s = ctl.step(inner)
    if max_norm > 0:
        grads: List[torch.Tensor] = [p for g in inner.param_groups for p in g["params"]
                                     if p.grad is not None]
        if grads:
            torch.nn.utils.clip_grad_norm_(grads, max_norm)
    return s


def check_aux(ctl: Controller, aux: Any, what: str) -> None:
    """A callback's aux function against its controller, before training
    starts: a preset that reads aux needs one; under data parallelism (more
    than one rank) the callbacks refuse one, because each rank's local aux
    (its own micro-batches' rounding noise) differs and the ranks would
    decide differently: combine it yourself (for NVFP4's noise in an
    averaged gradient, all-reduce the partials and divide by the world size
    squared) and call ``Controller.set_aux`` before the optimizer step."""
    if ctl.needs_aux and aux is None:
        raise ValueError(f"gnmr: GnmrCallback: preset {ctl.preset!r} reads each unit's aux signal: pass "
                         f"aux=<function of ({what}, controller)>, e.g. gnmr.integrations.nvfp4.noise_partials")
    if aux is not None and torch.distributed.is_available() and torch.distributed.is_initialized() \
            and torch.distributed.get_world_size() > 1:
        raise ValueError("gnmr: GnmrCallback: aux= is refused with more than one rank: each rank's local aux "
                         "differs, so the ranks would decide differently; combine it across ranks yourself and "
                         "call controller.set_aux() before each optimizer step")


class Tally:
    """The controller's figures since the last log: counts summed over the
    steps, the largest ratio, the recovery level at the last step.

    It keeps the steps' summaries and reads them only in :meth:`logs`: on
    CUDA a summary is a lazy copy, and reading one every step would wait for
    the device every step (gnmr.optim.AdamW's step has no host sync
    otherwise). The controller's ring of summary slots keeps a kept summary
    valid (docs/python.md, "Where the host waits, and what it costs")."""

    _SUMS = ("triggered", "granted", "denied", "nonfinite", "systemic", "skip_step")

    def __init__(self) -> None:
        self._kept: List[StepSummary] = []

    def reset(self) -> None:
        self._kept = []

    @property
    def steps(self) -> int:
        return len(self._kept)

    def add(self, s: Optional[StepSummary]) -> None:
        """Keeps ``s`` (once: the same summary added again is ignored)."""
        if s is not None and not (self._kept and self._kept[-1] is s):
            self._kept.append(s)

    def logs(self, prefix: str = "gnmr/") -> Dict[str, float]:
        out: Dict[str, float] = {prefix + k: float(sum(int(getattr(s, k)) for s in self._kept))
                                 for k in self._SUMS}
        ratios = [float(s.max_ratio) for s in self._kept]
        out[prefix + "max_ratio"] = max([r for r in ratios if r == r], default=0.0)  # NaN-free
        out[prefix + "in_recovery"] = float(self._kept[-1].in_recovery) if self._kept else 0.0
        return out
