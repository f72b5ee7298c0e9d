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


class Tally:
    """The controller's figures since the last log: counts summed over the
    steps, the largest ratio, the recovery level at the last step."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.steps = 0
        self.sums = dict(triggered=0, granted=0, denied=0, nonfinite=0, systemic=0, skip_step=0)
        self.max_ratio = 0.0
        self.in_recovery = 0

    def add(self, s: Optional[StepSummary]) -> None:
        if s is None:
            return
        self.steps += 1
        for k in self.sums:
            self.sums[k] += int(getattr(s, k))
        r = float(s.max_ratio)
        if r == r:  # NaN-free
            self.max_ratio = max(self.max_ratio, r)
        self.in_recovery = int(s.in_recovery)

    def logs(self, prefix: str = "gnmr/") -> Dict[str, float]:
        out: Dict[str, float] = {prefix + k: float(v) for k, v in self.sums.items()}
        out[prefix + "max_ratio"] = self.max_ratio
        out[prefix + "in_recovery"] = float(self.in_recovery)
        return out
