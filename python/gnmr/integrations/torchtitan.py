"""gnmr in torchtitan, through its own extension point: the optimizer
container (``torchtitan.components.optimizer.OptimizersContainer``), which
torchtitan's docs invite users to subclass.

    from gnmr.integrations.torchtitan import GnmrOptimizersContainer, gnmr_adamw
    config = llama3_debugmodel()                    # any torchtitan Trainer.Config
    config.optimizer = gnmr_adamw(lr=8e-4)             # preset "default"
    trainer = config.build()                        # torchtitan builds our container

:class:`GnmrOptimizersContainer` builds one :class:`gnmr.Controller` over
every trainable parameter of the model parts (units named by their canonical
FQNs; with torchao float8 or MXFP8 on, one unit per ``Float8Linear`` or
``MXFP8Linear`` operator and GNMR's promotion enabled on them) and gives each ``AdamW`` parameter group a
:class:`gnmr.optim.AdamW` guarded by it, so the trainer's ``optimizers.step()``
is the guarded step: norms, one controller step and the guarded update, with
FSDP2/TP DTensor parameters reduced over their mesh (gnmr/sharded.py).
Everything else is torchtitan's: param-group patterns, the LR schedulers
(they see ordinary torch optimizers), the flat FQN-keyed state dict. The
controller's state rides in that state dict under ``gnmr.controller.*``,
so torchtitan's CheckpointManager saves and reloads it with the optimizer,
resharded by torch.distributed.checkpoint like the rest.

Limits: only ``AdamW`` groups (gnmr's guarded kernel is AdamW); pipeline
parallelism is refused (each stage would hold other units: the ranks of
different stages could not take one decision). torchtitan 0.3.0's Trainer
does not run on a CPU-only torch (docs/python.md, "At scale", says why);
this module does, and tests/python/test_integrations_torchtitan.py drives
the container as the Trainer does; bench/torchtitan_gpu.sh runs the Trainer
on a GPU session.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Dict, List

import torch

try:
    from torchtitan.components.checkpointer.utils import canonical_fqn
    from torchtitan.components.optimizer import OptimizersContainer
    from torchtitan.components.optimizer.optimizer import ParamGroupConfig
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("gnmr.integrations.torchtitan needs torchtitan (pip install 'gnmr[torchtitan]')") from e

from ..controller import Controller
from ..optim import AdamW

_KEY = "gnmr.controller."


def _float8_modules(parts: List[torch.nn.Module]) -> bool:
    """Whether the parts hold torchao low-precision linears (float8's
    Float8Linear, MXFP8's MXFP8Linear: torchtitan's float8 and MX
    converters make them)."""
    try:
        from .torchao import LOW_PRECISION_LINEARS
    except ImportError:  # no torchao: no low-precision linears either
        return False
    return any(isinstance(m, LOW_PRECISION_LINEARS) for part in parts for m in part.modules())


def _units(parts: List[torch.nn.Module], operator_units: bool) -> Dict[str, Any]:
    """Unit name -> parameters over every model part."""
    if operator_units:
        from . import torchao as gnmr_ao

        units: Dict[str, Any] = {}
        for part in parts:
            units.update(gnmr_ao.operator_units(part))
        return units
    return {canonical_fqn(n): p for part in parts for n, p in part.named_parameters() if p.requires_grad}


class GnmrOptimizersContainer(OptimizersContainer):
    """torchtitan's optimizer container, every AdamW group guarded by one
    :class:`gnmr.Controller` (``self.controller``).

    Config fields beyond torchtitan's: ``preset`` and ``overrides`` (the
    controller's, as :class:`gnmr.Controller` takes them), ``float8_promotion``
    (default True: when the model parts hold torchao ``Float8Linear`` or
    ``MXFP8Linear`` modules, e.g. from torchtitan's float8 or MX converters,
    the units are the operators and granted ones run in high precision for
    the lock).

    Determinism: the controller's (same gradients, same decisions on every
    rank and run); the update is gnmr.optim.AdamW's.
    """

    @dataclass(kw_only=True, slots=True)
    class Config(OptimizersContainer.Config):
        preset: str = "default"
        overrides: Dict[str, Any] = field(default_factory=dict)
        float8_promotion: bool = True

    def __init__(self, config: "GnmrOptimizersContainer.Config", *,
                 model_parts: List[torch.nn.Module]) -> None:
        if len(model_parts) != 1:
            raise ValueError("gnmr: GnmrOptimizersContainer does not support pipeline parallelism "
                             f"({len(model_parts)} model parts): every rank must watch the same units")
        for pg in config.param_groups:
            if pg.optimizer_name != "AdamW":
                raise ValueError(f"gnmr: GnmrOptimizersContainer guards AdamW groups only; group "
                                 f"{pg.pattern!r} asks for {pg.optimizer_name!r}")
        promote = config.float8_promotion and _float8_modules(model_parts)
        self.controller = Controller(_units(model_parts, promote), config.preset, **config.overrides)
        if promote:
            from . import torchao as gnmr_ao

            gnmr_ao.enable_promotion(model_parts[0], self.controller)
        super().__init__(config, model_parts=model_parts)

    def _resolve_optimizer_factory(self, name: str):  # type: ignore[override]
        # torchtitan calls it on the instance: AdamW becomes gnmr's, guarded
        # by this container's controller (fused/foreach are accepted there).
        return functools.partial(AdamW, controller=self.controller)

    def state_dict(self) -> Dict[str, Any]:
        """torchtitan's flat FQN-keyed optimizer state, plus the controller's
        state under ``gnmr.controller.*`` (identical on every rank)."""
        sd = super().state_dict()
        for k, v in self.controller.state_dict().items():
            sd[_KEY + k] = v
        return sd

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        ctl = {k[len(_KEY):]: v for k, v in state_dict.items() if k.startswith(_KEY)}
        rest = {k: v for k, v in state_dict.items() if not k.startswith(_KEY)}
        super().load_state_dict(rest)
        if ctl:
            self.controller.load_state_dict(ctl)


def gnmr_adamw(lr: float = 8e-4, *, preset: str = "default", overrides: Dict[str, Any] = None,
               float8_promotion: bool = True, **kwargs: Any) -> GnmrOptimizersContainer.Config:
    """torchtitan's ``default_adamw`` (one catch-all AdamW group, its
    defaults: betas (0.9, 0.95), eps 1e-8, weight decay 0.1), guarded."""
    return GnmrOptimizersContainer.Config(
        param_groups=[ParamGroupConfig(pattern=r".*", optimizer_name="AdamW", optimizer_kwargs={
            "lr": lr, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1, **kwargs})],
        preset=preset, overrides=dict(overrides or {}), float8_promotion=float8_promotion)
