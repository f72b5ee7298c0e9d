"""The NVFP4 quantizers behind :mod:`gnmr.integrations.nvfp4`, emulated with
plain torch ops on any device (each returns the *dequantized* fp32 values a
GEMM of the recipe would consume).

NVFP4: E2M1 elements (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives) in
blocks of 16 along a GEMM's contraction dimension, one E4M3 scale per block
and one FP32 scale per tensor. The two-level rule is torchao's
(``torchao.prototype.mx_formats.nvfp4_tensor.nvfp4_quantize``), kept here
operation for operation so that every path gives torchao's bits:

    pts   = amax(|x|) / (448 * 6)                       per tensor (fp32)
    s_b   = e4m3(clamp((amax_b / 6) / pts, 2**-6, 448)) per block (RNE)
    v     = clamp(x * ((1 / pts) / s_b), -6, 6)         then rounded to E2M1
    x_q   = e2m1(v) * (pts * s_b)                       what the GEMM sees

What is torchao's and what is ours:

* 1-D blocks with round-to-nearest-even: torchao's ``NVFP4Tensor.to_nvfp4``
  and ``dequantize`` (:func:`quantize_1d` with ``rounding="rne"`` runs our
  copy of that rule, the same bits, or with ``use_torchao=True`` torchao's
  own);
* E2M1 round-to-nearest-even of a scaled value: the bits of torchao's
  ``f32_to_f4_unpacked`` / ``f4_unpacked_to_f32``, computed by arithmetic
  (:func:`e2m1_round_nearest_even`: the same value for every fp32 input of
  magnitude up to 6; torchao's maps NaN to 1.5, ours keeps it NaN);
* 16x16 weight blocks (:func:`quantize_2d`), stochastic rounding to E2M1
  (:func:`e2m1_round_stochastic`, :func:`quantize_1d` with ``rounding="sr"``)
  and the 16x16 random Hadamard transform (:func:`hadamard16`,
  :func:`rht`): ours. tests/python/test_nvfp4.py checks each against a
  direct float64 reference, and torchao's 1-D path against both.

Two exceptions to "torchao's rule everywhere": a tensor whose amax is 0
gets the tensor scale 1 (torchao would divide 0 by 0); its values are all
zero either way. And in a tensor whose amax is below about 5e-34 the encode
factor of a block whose scale is clamped at 2**-6 overflows to inf, so a
zero there would encode as 0 * inf = NaN: ours keeps it 0, torchao's
encoder maps that NaN to 1.5 (a value out of nothing). A non-finite amax
stays non-finite, so a NaN or inf in an operand reaches the GEMM's output
(gnmr counts it; nothing hides it).
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from torchao.prototype.mx_formats.constants import F4_E2M1_MAX, F8E4M3_MAX
from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale

BLOCK = 16
#: torchao's lower clamp on a block scale: the smallest normal E4M3 (2**-6).
E4M3_TINY = torch.finfo(torch.float8_e4m3fn).tiny
#: The non-negative E2M1 values, in code order (code = index, sign bit apart).
E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)

_MASK64 = (1 << 64) - 1


def mix_seed(*values: int) -> int:
    """A 63-bit seed from integers (splitmix64 chained over them): the same
    on every machine and Python process (unlike ``hash``)."""
    h = 0x9E3779B97F4A7C15
    for v in values:
        h = (h ^ (int(v) & _MASK64)) & _MASK64
        h = (h + 0x9E3779B97F4A7C15) & _MASK64
        z = h
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        h = z ^ (z >> 31)
    return h & ((1 << 63) - 1)


def pad_to_blocks(x: torch.Tensor, rows: int = 1, cols: int = BLOCK) -> torch.Tensor:
    """``x`` (2-D) padded with zeros at the end to multiples of ``rows`` x
    ``cols``; contiguous. Zeros change no amax and add nothing to a GEMM."""
    r, c = x.shape
    pr, pc = (-r) % rows, (-c) % cols
    if pr or pc:
        return F.pad(x, (0, pc, 0, pr))
    return x.contiguous()


def tensor_scale(x: torch.Tensor) -> torch.Tensor:
    """The FP32 per-tensor scale amax / (448 * 6) (torchao's
    ``per_tensor_amax_to_scale``), 1 for an all-zero tensor; 0-dim."""
    pts = per_tensor_amax_to_scale(x.abs().amax())
    return torch.where(pts == 0, torch.ones_like(pts), pts)


def block_scales(block_amax: torch.Tensor, pts: torch.Tensor):
    """(E4M3 block scales as fp32, the encode factor (1/pts)/s_b): torchao's
    two-level rule, operation for operation."""
    s = torch.clamp((block_amax / F4_E2M1_MAX) / pts, min=E4M3_TINY, max=F8E4M3_MAX)
    s = s.to(torch.float8_e4m3fn).to(torch.float32)
    return s, (1.0 / pts) / s


def _e2m1_spacing(a: torch.Tensor) -> torch.Tensor:
    """The E2M1 grid's spacing around ``a`` (fp32, 0 <= a <= 6): 0.5 below
    2, 1 below 4, 2 up to 6, that is 2^(clamp(exponent of a, 0, 2) - 1),
    built on the bits (exact; NaN gives 2)."""
    return (((a.view(torch.int32) >> 23).clamp_(127, 129) - 1) << 23).view(torch.float32)


def e2m1_round_nearest_even(v: torch.Tensor) -> torch.Tensor:
    """``v`` (fp32, |v| <= 6; larger magnitudes saturate to 6) rounded to
    E2M1, ties to even: torchao's encoder and decoder
    (``f32_to_f4_unpacked``, ``f4_unpacked_to_f32``) bit for bit, computed
    as round(|v| / spacing) * spacing with the sign put back (|v| / spacing
    is exact, and torch.round rounds half to even, which is E2M1's even
    code: 0, 1, 2, 4). Checked against torchao's on every fp32 value of
    magnitude up to 6, both signs (tests/python/test_nvfp4.py samples them);
    several times faster on a CPU. NaN stays NaN."""
    v = v.float()  # the bit arithmetic below reads fp32 (another float dtype is converted)
    a = v.abs().clamp_(max=F4_E2M1_MAX)
    spacing = _e2m1_spacing(a)
    return torch.copysign(torch.round(a / spacing).mul_(spacing), v)


def e2m1_round_stochastic(v: torch.Tensor, generator: Optional[torch.Generator] = None,
                          draws: Optional[torch.Tensor] = None, *, with_variance: bool = False):
    """``v`` (fp32) rounded stochastically to E2M1: |v| between grid points
    lo < hi rounds to hi with probability p = (|v| - lo) / (hi - lo), else
    to lo (the sign kept; |v| >= 6 saturates to 6; NaN stays NaN). One
    uniform draw u in [0, 1) per element, from ``generator`` (or ``draws``,
    same shape, for tests): up iff u < p. p is exact in fp32 (|v| - lo is
    exact by Sterbenz's lemma, hi - lo a power of two) and u is a multiple of
    2**-24, so P(up) = ceil(p * 2**24) / 2**24: unbiased to 2**-24 of a grid
    step. With u fixed at 1/2 this is round-to-nearest with ties toward zero
    (= RNE except at the midpoints 0.75, 1.75, 3.5, where RNE rounds up).

    ``with_variance``: also returns each element's rounding variance
    E[(q - v)^2] = p (1 - p) (hi - lo)^2 = (hi - |v|)(|v| - lo) (0 on the
    grid and where |v| saturates; NaN for NaN), computed from the same lo, hi
    and p, without another draw; the rounded values are the same bits."""
    v = v.float()  # the bit arithmetic below reads fp32 (another float dtype is converted)
    a = v.abs()
    # lo, hi: the grid points around |v|, found by arithmetic on the bits,
    # not by a search or a select (the same values, several times faster on
    # a CPU). The grid's spacing is 0.5 below 2, 1 below 4 and 2 up to 6:
    # 2^(clamp(exponent of |v|, 0, 2) - 1); then lo = floor(|v| / spacing) *
    # spacing, every operation exact. |v| >= 6 (inf too) is clamped to 6,
    # where lo = hi = 6 and p = 0: the value saturates.
    ac = a.clamp(max=F4_E2M1_MAX)
    spacing = _e2m1_spacing(ac)
    lo = torch.floor(ac / spacing).mul_(spacing)
    step = (lo + spacing).clamp_(max=F4_E2M1_MAX).sub_(lo)  # hi - lo, exact
    # p where step > 0; 0 where saturated (0 / 0 or x / 0 there) and for NaN
    p = (a - lo).div_(step).nan_to_num_(nan=0.0, posinf=0.0)
    if draws is None:
        draws = torch.rand(v.shape, generator=generator, dtype=torch.float32, device=v.device)
    # lo + step * up is hi or lo exactly; NaN stays NaN (lo is NaN there)
    q = torch.copysign(lo + step * (draws < p), v)
    if not with_variance:
        return q
    return q, p * (1.0 - p) * (step * step)


def _fake_quantize(x: torch.Tensor, block_rows: int, rounding: str,
                   generator: Optional[torch.Generator], pts: Optional[torch.Tensor], with_variance: bool = False):
    r, c = x.shape
    if r % block_rows or c % BLOCK:
        raise ValueError(f"gnmr.nvfp4: shape {tuple(x.shape)} is not a multiple of the blocks; pad first")
    x = x.float()
    if pts is None:
        pts = tensor_scale(x)
    xb = x.reshape(r // block_rows, block_rows, c // BLOCK, BLOCK)
    s, enc = block_scales(xb.abs().amax(dim=(1, 3), keepdim=True), pts)
    # A tensor whose amax is below about 5e-34 overflows the encode factor
    # of a block whose scale is clamped at 2**-6 (enc = inf): its zeros (the
    # padding's too) would become 0 * inf = NaN. They are zeros: v = 0
    # there (torchao's encoder turns that NaN into 1.5, a finite value out
    # of nothing). A NaN or inf in x still reaches the output, through the
    # tensor scale (amax is non-finite, so every pts * s_b is).
    v = torch.clamp(xb * enc, -F4_E2M1_MAX, F4_E2M1_MAX).nan_to_num_(nan=0.0).reshape(r, c)
    if rounding == "rne":
        q = e2m1_round_nearest_even(v)
    elif rounding == "sr":
        if with_variance:
            q, var = e2m1_round_stochastic(v, generator, with_variance=True)
            scale = pts * s
            return ((q.reshape(xb.shape) * scale).reshape(r, c),
                    (var.reshape(xb.shape) * (scale * scale)).reshape(r, c))
        q = e2m1_round_stochastic(v, generator)
    else:
        raise ValueError(f"gnmr.nvfp4: rounding must be 'rne' or 'sr', got {rounding!r}")
    return (q.reshape(xb.shape) * (pts * s)).reshape(r, c)


def quantize_1d(x: torch.Tensor, rounding: str = "rne", generator: Optional[torch.Generator] = None,
                *, use_torchao: bool = False) -> torch.Tensor:
    """NVFP4 with 1x16 blocks along the last dimension of ``x`` (2-D, the
    last dimension a multiple of 16), dequantized to fp32. ``rounding``:
    "rne" (our copy of torchao's rule, the same bits as torchao's
    ``NVFP4Tensor.to_nvfp4`` and ``dequantize``, about five times faster on
    a CPU; ``use_torchao=True`` calls torchao's own) or "sr" (stochastic,
    draws from ``generator``)."""
    if rounding == "rne" and use_torchao:
        x = x.float().contiguous()
        return NVFP4Tensor.to_nvfp4(x, BLOCK, per_tensor_scale=tensor_scale(x)).dequantize(torch.float32)
    return _fake_quantize(x, 1, rounding, generator, None)


def quantize_1d_sr_with_variance(x: torch.Tensor, generator: Optional[torch.Generator] = None):
    """``quantize_1d(x, "sr", generator)`` (the same bits, the same draws)
    and each element's stochastic-rounding variance in x's units: p (1 - p)
    (hi - lo)^2 (pts s_b)^2, the expected squared error the rounding adds to
    that element (docs/algorithm.md, "Noise-floor trigger")."""
    return _fake_quantize(x, 1, "sr", generator, None, with_variance=True)


def quantize_2d(w: torch.Tensor) -> torch.Tensor:
    """NVFP4 with one E4M3 scale per 16x16 block (the recipe's weights:
    ``quantize_2d(w).t()`` equals ``quantize_2d(w.t())`` bit for bit, so the
    forward and the input-gradient GEMMs see the same weights), both
    dimensions multiples of 16, round-to-nearest-even; dequantized fp32."""
    return _fake_quantize(w, BLOCK, "rne", None, None)


def _sylvester(n: int) -> torch.Tensor:
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.kron(torch.tensor([[1.0, 1.0], [1.0, -1.0]], dtype=torch.float64), h)
    return h


def rht_signs(seed: int) -> torch.Tensor:
    """The 16 random signs (+-1, fp32) of the transform, drawn once from
    ``seed``: one fixed vector for every layer and step of a run."""
    g = torch.Generator().manual_seed(mix_seed(seed, 0x524854))  # "RHT"
    return torch.randint(0, 2, (BLOCK,), generator=g).to(torch.float32) * 2 - 1


def hadamard16(signs: torch.Tensor) -> torch.Tensor:
    """Q = diag(signs) H / 4, H the 16x16 Sylvester-Hadamard matrix: an
    orthonormal fp32 matrix (entries +-1/4, exact; Q Q^T = I exactly)."""
    return (torch.diag(signs.double()) @ _sylvester(BLOCK) / 4.0).to(torch.float32)


def rht(x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``x`` (2-D, last dimension a multiple of 16) times Q in every 16-wide
    block of its last dimension: applied to both inputs of a GEMM along
    their contraction dimension, the product is unchanged in exact
    arithmetic ((a Q)(b Q)^T = a b^T)."""
    r, c = x.shape
    return (x.reshape(r, c // BLOCK, BLOCK) @ q.to(x.device, x.dtype)).reshape(r, c)
