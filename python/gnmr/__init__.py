"""gnmr for PyTorch: Gradient Norm-to-Mean Ratio recovery around any optimizer.

A thin, zero-copy binding of gnmr's C++/CUDA headers (the library stays the
single implementation)::

    import gnmr
    ctl = gnmr.Controller(model)                        # one unit per parameter
    opt = gnmr.optim.AdamW(model.parameters(), lr=3e-4, controller=ctl)
    loss.backward(); opt.step(); opt.zero_grad()        # guarded step

or with any optimizer: ``loss.backward(); ctl.step(opt); opt.step()``.
docs/python.md in the gnmr repository is the guide.
"""
from __future__ import annotations

import re

import torch

from . import _C
from .controller import Controller, is_global, preset_overrides, presets
from .summary import Decisions, Flag, StepSummary
from . import optim

__version__: str = _C.VERSION

_tv = tuple(int(x) for x in re.findall(r"\d+", torch.__version__)[:2])
# PyTorch 2.x is the target: CI tests 2.13 (CPU), the GPU machine 2.11.
# Debian's torch 1.13 is no longer supported (docs/python.md, "Install").
if _tv < (2, 1):
    raise ImportError(f"gnmr needs torch >= 2.1 (tested: 2.13), this is {torch.__version__}")


def cuda_built() -> bool:
    """True when this installation has the CUDA backend (built with nvcc
    against a CUDA-enabled torch)."""
    return bool(_C.cuda_built())


__all__ = ["Controller", "Decisions", "Flag", "StepSummary", "cuda_built", "is_global", "optim",
           "preset_overrides", "presets", "__version__"]
