"""How gnmr.Controller reads its ``units`` argument: which tensors form each
recoverable unit, and what each unit and tensor is called.

Accepted forms (docs/python.md, "The recipe" (units)):

* an ``nn.Module``: one unit per parameter that requires grad, named as in
  ``named_parameters()`` (tied parameters once);
* a mapping ``name -> parameters``, where parameters is a tensor, an
  ``nn.Module`` (its parameters that require grad) or an iterable of tensors;
* an iterable of parameter groups (dicts with ``"params"`` and an optional
  ``"name"``, as in ``optimizer.param_groups``): one unit per group;
* an iterable of tensors: one unit per tensor, named ``param0``, ``param1``...

Everything is checked here, before any C++ object exists, so a bad argument
raises and builds nothing.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, List

import torch

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@dataclass
class Layout:
    """Units as the C++ core takes them: one flat list of tensors in unit
    order, the unit of each, a label per tensor (for messages) and a name
    per unit (for logs and traces)."""

    names: List[str]
    tensors: List[torch.Tensor]
    units: List[int]
    labels: List[str]
    device: torch.device


def _module_params(m: torch.nn.Module) -> List[tuple]:
    return [(n, p) for n, p in m.named_parameters() if p.requires_grad]


def _tensor_list(v: Any, where: str) -> List[tuple]:
    """(label suffix, tensor) pairs of one unit's value."""
    if isinstance(v, torch.Tensor):
        return [("", v)]
    if isinstance(v, torch.nn.Module):
        return [("." + n, p) for n, p in _module_params(v)]
    if isinstance(v, (str, bytes)) or not isinstance(v, Iterable):
        raise TypeError(f"gnmr: {where}: expected a tensor, a module or an iterable of tensors, "
                        f"got {type(v).__name__}")
    out = []
    for k, t in enumerate(v):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"gnmr: {where}: element {k} is a {type(t).__name__}, not a tensor")
        out.append((f"[{k}]", t))
    return out


def _check_name(name: Any, where: str) -> str:
    if not isinstance(name, str):
        raise TypeError(f"gnmr: {where}: unit names are str, got {type(name).__name__}")
    # The trace CSV's rule (gnmr/io/trace.hpp): no quoting, so no separators.
    if (not name or any(c in name for c in ',"\r\n') or name != name.strip(" \t")):
        raise ValueError(f"gnmr: unit name {name!r} must be non-empty, without ',', '\"', CR, LF "
                         "or surrounding blanks (it is a column of the trace CSV)")
    return name


def resolve(units: Any, collapse: bool) -> Layout:
    """The Layout of ``units``; ``collapse`` (global presets) puts every
    tensor into one unit named ``global``."""
    groups: List[tuple] = []  # (unit name, [(label, tensor)])
    if isinstance(units, torch.nn.Module):
        groups = [(n, [(n, p)]) for n, p in _module_params(units)]
        if not groups:
            raise ValueError("gnmr: the model has no parameter that requires grad")
    elif isinstance(units, torch.Tensor):
        raise TypeError("gnmr: units must be a model, a mapping name -> parameters, or an iterable "
                        "of parameter groups or tensors; for one tensor pass [tensor]")
    elif isinstance(units, Mapping):
        for name, v in units.items():
            name = _check_name(name, "units")
            groups.append((name, [(name + s, t) for s, t in _tensor_list(v, f"unit {name!r}")]))
    elif isinstance(units, Iterable) and not isinstance(units, (str, bytes)):
        items = list(units)
        if items and all(isinstance(g, Mapping) for g in items):
            for k, g in enumerate(items):
                if "params" not in g:
                    raise ValueError(f"gnmr: parameter group {k} has no 'params'")
                name = _check_name(g.get("name", f"group{k}"), f"parameter group {k}")
                groups.append((name, [(name + s, t) for s, t in _tensor_list(g["params"], f"group {name!r}")]))
        elif all(isinstance(t, torch.Tensor) for t in items):
            groups = [(f"param{k}", [(f"param{k}", t)]) for k, t in enumerate(items)]
        else:
            raise TypeError("gnmr: an iterable of units must hold only parameter groups (dicts) "
                            "or only tensors")
    else:
        raise TypeError("gnmr: units must be a model, a mapping name -> parameters, or an iterable "
                        f"of parameter groups or tensors, got {type(units).__name__}")
    if not groups:
        raise ValueError("gnmr: no units given")

    names: List[str] = []
    tensors: List[torch.Tensor] = []
    unit_of: List[int] = []
    labels: List[str] = []
    seen_names = set()
    seen = {}
    for u, (name, members) in enumerate(groups):
        if name in seen_names:
            raise ValueError(f"gnmr: duplicate unit name {name!r}")
        seen_names.add(name)
        if not members:
            raise ValueError(f"gnmr: unit {name!r} has no tensor")
        names.append(name)
        for label, t in members:
            if id(t) in seen:
                raise ValueError(f"gnmr: tensor {label!r} is also {seen[id(t)]!r}: a tensor belongs "
                                 "to one unit")
            seen[id(t)] = label
            if not t.is_leaf or not t.requires_grad:
                raise ValueError(f"gnmr: tensor {label!r} must be a leaf that requires grad "
                                 "(a parameter): its .grad is what gnmr reads")
            if t.dtype not in _DTYPES:
                raise ValueError(f"gnmr: tensor {label!r} is {t.dtype}; gnmr reads float32, "
                                 "bfloat16 and float16 gradients")
            if t.layout != torch.strided:
                raise ValueError(f"gnmr: tensor {label!r} is not strided (sparse tensors are not "
                                 "supported)")
            tensors.append(t)
            unit_of.append(u)
            labels.append(label)
    device = tensors[0].device
    for t, label in zip(tensors, labels):
        if t.device != device:
            raise ValueError(f"gnmr: tensor {label!r} is on {t.device}, {labels[0]!r} on {device}: "
                             "one controller watches tensors of one device")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"gnmr: tensors on {device} are not supported (cpu or cuda)")
    if collapse:
        names = ["global"]
        unit_of = [0] * len(tensors)
    return Layout(names, tensors, unit_of, labels, device)
