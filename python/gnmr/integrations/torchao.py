"""GNMR's promotion on torchao's float8 training (``torchao.float8``).

    from torchao.float8 import convert_to_float8_training
    from gnmr.integrations import torchao as gnmr_ao
    convert_to_float8_training(model)                  # nn.Linear -> Float8Linear
    ctl = gnmr.Controller(gnmr_ao.operator_units(model), "gnmr")
    gnmr_ao.enable_promotion(model, ctl)               # granted operators run in high precision
    opt = gnmr.optim.AdamW(model.parameters(), lr=3e-4, controller=ctl)

A unit is one operator: a ``Float8Linear``'s weight and bias recover together
(and any other parameter is a unit of its own). ``enable_promotion`` makes
each ``Float8Linear`` ask the controller in its forward: while its unit
carries PROMOTE (granted at step t, it holds for the lock: steps t+1 ..
t+lock, docs/algorithm.md "Precision promotion"), the layer computes its
forward and backward GEMMs in the weights' precision (``F.linear`` on the
high-precision weight, as the ``nn.Linear`` it replaced) instead of float8;
when the lock ends it goes back to float8. torchao's tensorwise *dynamic*
scaling (its default, and the only recipe its float8 training has kept)
computes every scale from the current tensors, so the layer returns to
float8 with fresh scales; there is no amax history to reset.

Runs wherever torchao's float8 training runs: on CUDA (sm_89+), and on the
CPU with torch >= 2.13, where torch's ``_scaled_mm`` has a float8 CPU kernel
(checked by tests/python/test_integrations_torchao.py).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Dict, List

import torch
import torch.nn.functional as F

try:
    from torchao.float8.float8_linear import Float8Linear
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("gnmr.integrations.torchao needs torchao (pip install 'gnmr[torchao]')") from e

from ..controller import Controller

_PATCHED = "_gnmr_promotion"


def operator_units(model: torch.nn.Module) -> "OrderedDict[str, List[torch.Tensor]]":
    """Units for a float8 model: one per ``Float8Linear`` (weight and bias),
    named by the module's path, then one per other parameter that requires
    grad, named as in ``named_parameters()``; tied parameters once."""
    units: "OrderedDict[str, List[torch.Tensor]]" = OrderedDict()
    taken = set()
    for name, mod in model.named_modules():
        if isinstance(mod, Float8Linear):
            ps = [p for p in mod.parameters(recurse=False) if p.requires_grad and id(p) not in taken]
            if ps:
                units[name or "root"] = ps
                taken.update(id(p) for p in ps)
    for name, p in model.named_parameters():
        if p.requires_grad and id(p) not in taken:
            units[name] = [p]
            taken.add(id(p))
    return units


def float8_modules(model: torch.nn.Module) -> Dict[str, Float8Linear]:
    """The model's ``Float8Linear`` modules by path."""
    return OrderedDict((n or "root", m) for n, m in model.named_modules() if isinstance(m, Float8Linear))


def enable_promotion(model: torch.nn.Module, controller: Controller) -> List[str]:
    """Makes every ``Float8Linear`` of ``model`` whose unit (by path, as
    :func:`operator_units` names it) the controller watches run in high
    precision while that unit carries PROMOTE. Returns the paths switched.
    ValueError if a layer's unit is unknown to the controller."""
    names = set(controller.unit_names)
    done = []
    for path, mod in float8_modules(model).items():
        if path not in names:
            raise ValueError(f"gnmr: Float8Linear {path!r} is not a unit of the controller; build it "
                             "over gnmr.integrations.torchao.operator_units(model)")
        setattr(mod, _PATCHED, (controller, path))
        mod.forward = _dispatch.__get__(mod, type(mod))  # an instance attribute: the class is untouched
        done.append(path)
    return done


def disable_promotion(model: torch.nn.Module) -> None:
    """Undoes :func:`enable_promotion`: every layer back to plain float8."""
    for mod in float8_modules(model).values():
        if hasattr(mod, _PATCHED):
            delattr(mod, _PATCHED)
            mod.__dict__.pop("forward", None)


def is_promoted(mod: Float8Linear) -> bool:
    """Whether the layer's next forward runs in high precision."""
    link = getattr(mod, _PATCHED, None)
    if link is None:
        return False
    ctl, path = link
    return ctl.last_summary is not None and ctl.promoted(path)


def _dispatch(self: Float8Linear, x: torch.Tensor) -> torch.Tensor:
    if is_promoted(self):
        # The nn.Linear this layer replaced: forward and both backward GEMMs
        # in the weight's precision.
        return F.linear(x, self.weight, self.bias)
    return Float8Linear.forward(self, x)
