"""GNMR's promotion on torchao's low-precision training: float8
(``torchao.float8``'s ``Float8Linear``) and MXFP8 (``torchao.prototype.
moe_training``'s ``MXFP8Linear``).

    from torchao.float8 import convert_to_float8_training
    from gnmr.integrations import torchao as gnmr_ao
    convert_to_float8_training(model)                  # nn.Linear -> Float8Linear
    # or, MXFP8: gnmr_ao.convert_to_mxfp8_training(model)   # nn.Linear -> MXFP8Linear
    ctl = gnmr.Controller(gnmr_ao.operator_units(model))    # the default preset
    gnmr_ao.enable_promotion(model, ctl)               # granted operators run in high precision
    opt = gnmr.optim.AdamW(model.parameters(), lr=3e-4, controller=ctl)

A unit is one operator: a low-precision linear's weight and bias recover
together (and any other parameter is a unit of its own).
``enable_promotion`` makes each such layer ask the controller in its
forward: while its unit carries PROMOTE (granted at step t, it holds for
the lock: steps t+1 .. t+lock, docs/algorithm.md "Precision promotion"),
the layer computes its forward and both backward GEMMs in the weights'
precision (``F.linear`` on the high-precision weight, as the ``nn.Linear``
it replaced) instead of float8 or MXFP8; when the lock ends it goes back.
Both recipes compute every scale from the current tensors (torchao's
tensorwise dynamic float8 scaling, MX's per-block scales), so a layer
returns to low precision with fresh scales; there is no amax history to
reset.

Runs wherever torchao's training runs: float8 on CUDA (sm_89+) and on the
CPU with torch >= 2.13 (``_scaled_mm`` has a float8 CPU kernel); MXFP8 on
sm_100 with torchao's kernels, and anywhere in torchao's emulated mode
(``KernelPreference.EMULATED``, what :func:`convert_to_mxfp8_training`
picks off sm_100). tests/python/test_integrations_torchao.py checks both on
the CPU. torchao's other MXFP8 route, ``quantize_(model,
MXFP8TrainingOpConfig(...))``, wraps the weight tensors instead of the
modules; :func:`operator_units` refuses such a model with a message.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F

try:
    from torchao.float8.float8_linear import Float8Linear
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("gnmr.integrations.torchao needs torchao (pip install 'gnmr[torchao]')") from e
try:  # MXFP8 training (a prototype in torchao 0.18)
    from torchao.prototype.moe_training.mxfp8_linear import MXFP8Linear
except ImportError:  # pragma: no cover - an older torchao
    MXFP8Linear = None

try:  # NVFP4 training, emulated (gnmr.integrations.nvfp4)
    from .nvfp4 import NVFP4Linear, track_noise
except ImportError:  # pragma: no cover - a torchao without NVFP4
    NVFP4Linear = track_noise = None

# The low-precision linears gnmr promotes: each keeps its high-precision
# weight and bias as nn.Linear's, so F.linear on them is the promoted path.
LOW_PRECISION_LINEARS = tuple(t for t in (Float8Linear, MXFP8Linear, NVFP4Linear) if t is not None)

from ..controller import Controller

_PATCHED = "_gnmr_promotion"


def operator_units(model: torch.nn.Module) -> "OrderedDict[str, List[torch.Tensor]]":
    """Units for a float8 or MXFP8 model: one per ``Float8Linear`` or
    ``MXFP8Linear`` (weight and bias), named by the module's path, then one
    per other parameter that requires grad, named as in
    ``named_parameters()``; tied parameters once. ValueError for weights
    wrapped by ``quantize_(model, MXFP8TrainingOpConfig(...))`` (no module
    to switch: convert with :func:`convert_to_mxfp8_training` instead)."""
    for name, p in model.named_parameters():
        if "TrainingWeightWrapperTensor" in type(p.data).__name__:
            raise ValueError(f"gnmr: {name} is a torchao {type(p.data).__name__} (quantize_ with a "
                             "training op config): promotion needs low-precision modules; convert the "
                             "model with gnmr.integrations.torchao.convert_to_mxfp8_training (MXFP8) or "
                             "torchao.float8.convert_to_float8_training (float8)")
    units: "OrderedDict[str, List[torch.Tensor]]" = OrderedDict()
    taken = set()
    for name, mod in model.named_modules():
        if isinstance(mod, LOW_PRECISION_LINEARS):
            ps = [p for p in mod.parameters(recurse=False) if p.requires_grad and id(p) not in taken]
            if ps:
                units[name or "root"] = ps
                taken.update(id(p) for p in ps)
    for name, p in model.named_parameters():
        if p.requires_grad and id(p) not in taken:
            units[name] = [p]
            taken.add(id(p))
    return units


def float8_modules(model: torch.nn.Module) -> Dict[str, torch.nn.Module]:
    """The model's low-precision linears (``Float8Linear``, ``MXFP8Linear``)
    by path: the operators :func:`enable_promotion` switches."""
    return OrderedDict((n or "root", m) for n, m in model.named_modules() if isinstance(m, LOW_PRECISION_LINEARS))


low_precision_modules = float8_modules


def convert_to_mxfp8_training(model: torch.nn.Module, *, scale_mode: str = "rceil",
                              emulated: Optional[bool] = None,
                              module_filter_fn: Optional[Callable[[torch.nn.Module, str], bool]] = None
                              ) -> torch.nn.Module:
    """Swaps every ``nn.Linear`` of ``model`` (those ``module_filter_fn(module,
    path)`` accepts, and whose dimensions are multiples of 32, MX's block)
    for torchao's ``MXFP8Linear`` in place, keeping its parameters: every
    GEMM (forward and both backward) with MXFP8 E4M3 operands in blocks of
    32. ``scale_mode``: "rceil" (torchao's default: the shared exponent
    rounded up, nothing saturates) or "floor" (the OCP spec's rule).
    ``emulated``: torchao's emulated kernels (any device); None picks them
    unless the model is on an sm_100+ GPU. Returns the model, as torchao's
    ``convert_to_float8_training`` does."""
    if MXFP8Linear is None:  # pragma: no cover
        raise ImportError("gnmr: this torchao has no MXFP8 training (torchao.prototype.moe_training)")
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.quantization.quantize_.common.kernel_preference import KernelPreference

    modes = {"rceil": ScaleCalculationMode.RCEIL, "floor": ScaleCalculationMode.FLOOR}
    if scale_mode not in modes:
        raise ValueError(f"gnmr: scale_mode must be 'rceil' or 'floor', got {scale_mode!r}")
    if emulated is None:
        p = next(model.parameters(), None)
        emulated = not (p is not None and p.is_cuda and torch.cuda.get_device_capability(p.device)[0] >= 10)
    pref = KernelPreference.EMULATED if emulated else KernelPreference.AUTO
    for path, mod in list(model.named_modules()):
        for cname, child in list(mod.named_children()):
            full = f"{path}.{cname}" if path else cname
            if type(child) is not torch.nn.Linear:
                continue
            if child.in_features % 32 or child.out_features % 32:
                continue
            if module_filter_fn is not None and not module_filter_fn(child, full):
                continue
            new = MXFP8Linear(child.in_features, child.out_features, bias=child.bias is not None,
                              kernel_preference=pref, scale_calculation_mode=modes[scale_mode],
                              device="meta")
            new.weight = child.weight  # the same Parameter objects: optimizers and units stay valid
            new.bias = child.bias
            setattr(mod, cname, new)
    return model


def enable_promotion(model: torch.nn.Module, controller: Controller) -> List[str]:
    """Makes every ``Float8Linear`` of ``model`` whose unit (by path, as
    :func:`operator_units` names it) the controller watches run in high
    precision while that unit carries PROMOTE. Returns the paths switched.
    ValueError if a layer's unit is unknown to the controller. For a
    controller that reads aux (``gnmr-noise-floor``), the model's NVFP4
    layers also start tracking their rounding noise
    (``gnmr.integrations.nvfp4.track_noise``), which ``noise_partials``
    reads."""
    names = set(controller.unit_names)
    done = []
    for path, mod in float8_modules(model).items():
        if path not in names:
            raise ValueError(f"gnmr: {type(mod).__name__} {path!r} is not a unit of the controller; build it "
                             "over gnmr.integrations.torchao.operator_units(model)")
        setattr(mod, _PATCHED, (controller, path))
        mod.forward = _dispatch.__get__(mod, type(mod))  # an instance attribute: the class is untouched
        done.append(path)
    if track_noise is not None and controller.needs_aux:
        track_noise(model)
    return done


def disable_promotion(model: torch.nn.Module) -> None:
    """Undoes :func:`enable_promotion`: every layer back to plain float8."""
    for mod in float8_modules(model).values():
        if hasattr(mod, _PATCHED):
            delattr(mod, _PATCHED)
            mod.__dict__.pop("forward", None)


def is_promoted(mod: torch.nn.Module) -> bool:
    """Whether the layer's next forward runs in high precision."""
    link = getattr(mod, _PATCHED, None)
    if link is None:
        return False
    ctl, path = link
    return ctl.last_summary is not None and ctl.promoted(path)


def _dispatch(self: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    if is_promoted(self):
        # The nn.Linear this layer replaced: forward and both backward GEMMs
        # in the weight's precision.
        return F.linear(x, self.weight, self.bias)
    return type(self).forward(self, x)
