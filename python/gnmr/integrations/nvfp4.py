"""NVFP4 training (NVIDIA, "Pretraining Large Language Models with NVFP4",
arXiv 2509.25149), emulated on any device, as a backend of
:mod:`gnmr.integrations.torchao`:

    from gnmr.integrations import nvfp4, torchao as gnmr_ao
    nvfp4.convert_to_nvfp4_training(model, seed=0)     # nn.Linear -> NVFP4Linear
    ctl = gnmr.Controller(gnmr_ao.operator_units(model))
    gnmr_ao.enable_promotion(model, ctl)               # granted operators run in high precision
    opt = gnmr.optim.AdamW(model.parameters(), lr=3e-4, controller=ctl)
    for t, (x, y) in enumerate(loader, start=first_step):
        nvfp4.set_step(model, t)                       # the stochastic rounding's step
        loss_fn(model(x), y).backward(); opt.step(); opt.zero_grad()

Every :class:`NVFP4Linear` computes its three GEMMs on NVFP4 operands
(docs/record/nvfp4.md):

* forward ``y = x W^T``: x in 1x16 blocks along K, round-to-nearest-even
  (the bits of torchao's ``NVFP4Tensor.to_nvfp4``); W in 16x16 blocks (RNE);
* input gradient ``dX = dY W``: dY in 1x16 blocks along N with stochastic
  rounding; the same 16x16-block W as the forward;
* weight gradient ``dW = dY^T X``: both operands along the tokens (M), each
  16 tokens multiplied by a 16x16 random Hadamard matrix first (it cancels
  in the product), then 1x16 blocks: dY^T with stochastic rounding, X^T
  with RNE.

The products are fp32 GEMMs of the dequantized operands (no FP4 tensor
cores here); the bias and its gradient stay in high precision. Dimensions
that are not multiples of 16 are padded with zeros.

**Stochastic rounding, reproducibly.** Each rounding draws from a
``torch.Generator`` seeded from (``seed``, the layer's path, the step, the
backward pass within the step, the operand). The step is the layer's
``nvfp4_step``: :func:`set_step` sets it (and restarts the count of
backward passes, ``nvfp4_micro``, which separates gradient-accumulation
micro-batches); without :func:`set_step` the step stays 0 and the count runs
on. Both are in the module's ``state_dict`` (``_extra_state``), so a run
resumed from a checkpoint of the model continues bit for bit whether or not
the loop sets the step. Re-create the model with the same ``seed`` and the
same module paths.

**The noise estimate** (for the preset ``gnmr-noise-floor``): a layer
that tracks its noise (:func:`track_noise`; ``enable_promotion`` turns it
on for a controller that reads aux) also adds up, on each backward, the
expected squared norm of the noise its weight-gradient rounding added;
:func:`noise_partials` hands it to the controller. A layer that does not
track it computes nothing extra (the estimate costs about a quarter of the
weight-gradient path in this emulation) and gives the same gradients.

**Promotion.** :func:`gnmr.integrations.torchao.operator_units` and
``enable_promotion`` treat NVFP4Linear as they treat torchao's Float8Linear
and MXFP8Linear: a granted layer runs ``F.linear`` on its high-precision
weight (forward and both backward GEMMs) for the lock, then returns to
NVFP4; the weights' scales are recomputed every step, so nothing is stale.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Callable, Dict, Optional

import torch

from ._nvfp4_quant import (BLOCK, hadamard16, mix_seed, pad_to_blocks, quantize_1d, quantize_1d_sr_with_variance,
                           quantize_2d, rht, rht_signs)

__all__ = ["NVFP4Recipe", "NVFP4Linear", "convert_to_nvfp4_training", "set_step", "nvfp4_modules",
           "noise_partials"]


@dataclass(frozen=True)
class NVFP4Recipe:
    """The recipe's parts, each on by default (the paper's recipe); turning
    one off gives the ablation: 1x16 weight blocks (forward along K, the
    input gradient along N: the two GEMMs then see different weights), no
    Hadamard transform on the weight-gradient inputs, round-to-nearest-even
    gradients."""
    weight_blocks_2d: bool = True
    wgrad_hadamard: bool = True
    stochastic_gradients: bool = True


_DGRAD, _WGRAD = 0, 1
_Q_CACHE: Dict[tuple, torch.Tensor] = {}


def _hadamard(seed: int, device: torch.device) -> torch.Tensor:
    key = (int(seed), str(device))
    q = _Q_CACHE.get(key)
    if q is None:
        q = _Q_CACHE[key] = hadamard16(rht_signs(seed)).to(device)
    return q


def _path_key(path: str) -> int:
    return zlib.crc32(path.encode("utf-8"))


class _NVFP4LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, layer):
        n, k = weight.shape
        x2 = x.reshape(-1, k)
        xq = quantize_1d(pad_to_blocks(x2.float()))                     # M x Kp, RNE (torchao's bits)
        w = weight.float()
        if layer.recipe.weight_blocks_2d:
            wq = quantize_2d(pad_to_blocks(w, BLOCK, BLOCK))             # Np x Kp
            wq_fwd, wq_bwd = wq[:n], wq
        else:
            wq_fwd = quantize_1d(pad_to_blocks(w))                       # N x Kp, blocks along K
            wq_bwd = quantize_1d(pad_to_blocks(w.t())).t()               # Np x K, blocks along N
        y = xq @ wq_fwd.t()
        if bias is not None:
            y = y + bias.float()
        ctx.save_for_backward(x2, wq_bwd)
        ctx.layer, ctx.x_shape = layer, x.shape
        return y.to(x.dtype).reshape(*x.shape[:-1], n)

    @staticmethod
    def backward(ctx, gy):
        x2, wq_bwd = ctx.saved_tensors
        layer = ctx.layer
        recipe = layer.recipe
        m, k = x2.shape
        weight, bias = layer.weight, layer.bias
        dy = gy.reshape(m, -1).float()
        step, micro = layer.nvfp4_step, layer.nvfp4_micro
        layer.nvfp4_micro = micro + 1
        rounding = "sr" if recipe.stochastic_gradients else "rne"

        def gen(operand):
            g = torch.Generator(device=dy.device)
            return g.manual_seed(mix_seed(layer.nvfp4_seed, layer.nvfp4_key, step, micro, operand))

        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dyq = quantize_1d(pad_to_blocks(dy), rounding, gen(_DGRAD))      # M x Np, along N
            dx = (dyq @ wq_bwd)[:, :k].to(x2.dtype).reshape(ctx.x_shape)
        if ctx.needs_input_grad[1]:
            dyt = pad_to_blocks(dy.t())                                      # N x Mp
            xt = pad_to_blocks(x2.t().float())                               # K x Mp
            if recipe.wgrad_hadamard:
                q = _hadamard(layer.nvfp4_seed, dy.device)
                dyt, xt = rht(dyt, q), rht(xt, q)
            xq = quantize_1d(xt)
            if rounding == "sr" and layer.nvfp4_track_noise:
                # The same bits as quantize_1d(dyt, "sr", ...), and each
                # element's rounding variance V: the noise the rounding adds
                # to dW = q(dY^T) q(X^T)^T has E||e||^2 = sum_t (sum_n V[n,t])
                # (sum_k q(X^T)[k,t]^2) (independent zero-mean draws), two
                # reductions next to the GEMM (noise_partials).
                dq, var = quantize_1d_sr_with_variance(dyt, gen(_WGRAD))
                layer.nvfp4_noise = layer.nvfp4_noise.to(dy.device) + (var.sum(0) * (xq * xq).sum(0)).sum()
            else:
                dq = quantize_1d(dyt, rounding, gen(_WGRAD))
            dw = (dq @ xq.t()).to(weight.dtype)
        if bias is not None and ctx.needs_input_grad[2]:
            db = dy.sum(0).to(bias.dtype)
        return dx, dw, db, None


class NVFP4Linear(torch.nn.Linear):
    """``nn.Linear`` whose three GEMMs run on NVFP4 operands (the module
    docstring); its parameters stay high precision (the optimizer's
    weights). ``seed`` and ``key`` (the layer's part of the rounding seed;
    :func:`convert_to_nvfp4_training` takes it from the module path) fix
    the Hadamard signs and the stochastic-rounding streams."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None, *,
                 recipe: Optional[NVFP4Recipe] = None, seed: int = 0, key: int = 0):
        super().__init__(in_features, out_features, bias, device, dtype)
        self.recipe = recipe if recipe is not None else NVFP4Recipe()
        self.nvfp4_seed = int(seed)
        self.nvfp4_key = int(key)
        self.nvfp4_step = 0
        self.nvfp4_micro = 0
        # E||e||^2 of the stochastic-rounding noise in the weight gradient,
        # summed over the backward passes since the last set_step() or
        # noise_partials(), while the layer tracks it (track_noise); 0 with
        # round-to-nearest gradients (no noise).
        self.nvfp4_noise = torch.zeros((), dtype=torch.float32)
        self.nvfp4_track_noise = False

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, *, recipe: Optional[NVFP4Recipe] = None, seed: int = 0,
                    key: int = 0) -> "NVFP4Linear":
        """An NVFP4Linear over the same Parameter objects as ``linear``
        (optimizers and gnmr units stay valid)."""
        new = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta",
                  recipe=recipe, seed=seed, key=key)
        new.weight = linear.weight
        new.bias = linear.bias
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _NVFP4LinearFn.apply(x, self.weight, self.bias, self)

    def get_extra_state(self):
        return torch.tensor([self.nvfp4_step, self.nvfp4_micro], dtype=torch.int64)

    def set_extra_state(self, state):
        step, micro = (int(v) for v in torch.as_tensor(state).tolist())
        self.nvfp4_step, self.nvfp4_micro = step, micro

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)
        # An nn.Linear's checkpoint has no counters: load it, keep ours.
        extra = prefix + "_extra_state"
        if extra in missing_keys:
            missing_keys.remove(extra)

    def extra_repr(self) -> str:
        r = self.recipe
        parts = [super().extra_repr(), f"seed={self.nvfp4_seed}", f"step={self.nvfp4_step}"]
        off = [n for n, on in (("2d", r.weight_blocks_2d), ("rht", r.wgrad_hadamard),
                               ("sr", r.stochastic_gradients)) if not on]
        if off:
            parts.append("off=" + "+".join(off))
        return ", ".join(parts)


def convert_to_nvfp4_training(model: torch.nn.Module, *,
                              module_filter_fn: Optional[Callable[[torch.nn.Module, str], bool]] = None,
                              seed: int = 0, recipe: Optional[NVFP4Recipe] = None) -> torch.nn.Module:
    """Swaps every ``nn.Linear`` of ``model`` (those ``module_filter_fn(module,
    path)`` accepts: keep the paper's sensitive layers in high precision by
    refusing them) for an :class:`NVFP4Linear` in place, keeping its
    parameters. ``seed``: the run's rounding and Hadamard seed; each layer's
    stream is also keyed by its path. Returns the model (the root module
    itself is not swapped)."""
    for path, mod in list(model.named_modules()):
        for cname, child in list(mod.named_children()):
            full = f"{path}.{cname}" if path else cname
            if type(child) is not torch.nn.Linear:
                continue
            if module_filter_fn is not None and not module_filter_fn(child, full):
                continue
            setattr(mod, cname, NVFP4Linear.from_linear(child, recipe=recipe, seed=seed, key=_path_key(full)))
    return model


def nvfp4_modules(model: torch.nn.Module) -> "Dict[str, NVFP4Linear]":
    """The model's NVFP4Linear layers by path."""
    return {n or "root": m for n, m in model.named_modules() if isinstance(m, NVFP4Linear)}


def set_step(model: torch.nn.Module, step: int) -> None:
    """Sets the step of every NVFP4Linear of ``model`` (call it before the
    step's first forward, with the optimizer step about to be taken, e.g.
    ``ctl.steps_done``); a new step restarts the count of backward passes."""
    step = int(step)
    for m in model.modules():
        if isinstance(m, NVFP4Linear) and m.nvfp4_step != step:
            m.nvfp4_step, m.nvfp4_micro = step, 0
            m.nvfp4_noise = torch.zeros_like(m.nvfp4_noise)


def track_noise(model: torch.nn.Module, on: bool = True) -> int:
    """Whether every NVFP4Linear of ``model`` adds up its weight gradient's
    rounding noise on each backward (for :func:`noise_partials`); off, it
    computes nothing extra. ``enable_promotion(model, ctl)`` turns it on
    when ``ctl`` reads aux. Changes no gradient bit either way. Returns the
    number of layers set."""
    n = 0
    for m in model.modules():
        if isinstance(m, NVFP4Linear):
            m.nvfp4_track_noise = bool(on)
            if not on:
                m.nvfp4_noise = torch.zeros_like(m.nvfp4_noise)
            n += 1
    return n


def noise_partials(model: torch.nn.Module, controller) -> torch.Tensor:
    """Each unit's quantization noise for ``controller.step(aux=...)``
    (the preset ``gnmr-noise-floor``): a float32 tensor of
    ``controller.num_units`` values on the controller's device, unit u the
    sum over the NVFP4Linear layers whose weight it watches of E||e||^2, the
    expected squared norm of the noise the weight-gradient GEMM's stochastic
    rounding added this step (a sum of squares, as the gradient partials
    are). Read from what the backward passes accumulated, then restarted;
    no synchronisation. Units with no NVFP4 weight (or promoted this step:
    no rounding) get 0, which the trigger never judges. RuntimeError, before
    anything is taken, if a layer a unit watches does not track its noise
    (:func:`track_noise`): its 0 would read as "no noise"."""
    out = torch.zeros(controller.num_units, dtype=torch.float32, device=controller.device)
    watched = []
    for path, m in nvfp4_modules(model).items():
        try:
            u = controller.unit_of(m.weight)
        except ValueError:
            continue
        if not m.nvfp4_track_noise:
            raise RuntimeError(f"gnmr.nvfp4: noise_partials: layer {path!r} does not track its noise; call "
                               "nvfp4.track_noise(model) before the first backward (enable_promotion(model, ctl) "
                               "does it for a controller that reads aux)")
        watched.append((u, m))
    for u, m in watched:
        out[u] += m.nvfp4_noise.to(out.device)
        m.nvfp4_noise = torch.zeros_like(m.nvfp4_noise)
    return out
