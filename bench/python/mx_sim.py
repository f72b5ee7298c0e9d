"""mx_sim.py — the microscaling (MX) emulation and the synthetic proxy model
of Su, Kwun, Gil, Kakade, Anand 2025, "Characterization and Mitigation of
Training Instabilities in Microscaling Formats" (arXiv 2506.20752), written
here from the paper's description (no code of theirs is copied).

The MX format (OCP Microscaling Formats v1.0): blocks of 32 consecutive
elements along a GEMM's contraction dimension share one power-of-two scale
(E8M0); each element is FP8 E4M3 (largest normal 448). Two rules for the
shared exponent:
  floor  (OCP's): e = floor(log2(amax)) - 8, so amax / 2^e lies in [256, 512):
         elements above 448 saturate ("the top E4M3 bucket overflows");
  rceil  (torchao's default): e = ceil(log2(amax / 448)): nothing saturates.
Both are written to give torchao's emulated quantizer's bits
(torchao.prototype.mx_formats.mx_tensor.to_mx, its torch fallback path);
tests/python/test_mx_proxy.py checks that on the CPU. Every GEMM of a
layer (forward, and both backward GEMMs) takes MX operands, each blocked
along its own contraction dimension, as torchao's mx_mm does; the product
of dequantized operands is computed in fp32.

The proxy (the paper's synthetic setting): a student of L residual blocks
x + fc2(GELU(fc1(LayerNorm(x)))), fc1 D->4D without bias, fc2 4D->D with
bias, torch's default init, learns a frozen teacher of L blocks
Linear(D, D) -> GELU -> Linear(D, D) (no bias, no LayerNorm, no residual)
from x ~ N(0, I), target teacher(x) + 0.005 N(0, I), MSE. In the paper's MX
recipe the LayerNorm (its affine included) and GELU are rounded to bf16
(forward and backward: a round trip through bfloat16).

Two emulations of that recipe (Recipe.emulation): "torchao", the default,
gives torchao's bits as above (round-half-to-even, the LayerNorm one op in
fp32 rounded once, what MX hardware does); "paper" gives the bits of the
authors' own emulator (mx_paper.py: ties away from zero, every GEMM
operand and result in bf16, the LayerNorm a chain of bf16 vector ops whose
beta gets no gradient, the student's GELU unquantized, the teacher
quantized).

Each operator (every block's LayerNorm, fc1, fc2) can be *promoted*: its
GEMMs in fp32, and for a LayerNorm its normalisation and affine unrounded,
under either emulation.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F

import mx_paper

BLOCK = 32
E4M3_MAX = 448.0
E4M3_MAX_POW2 = 8          # floor(log2(448))
E8M0_BIAS = 127
F32_MIN_NORMAL = 2.0 ** -126


def mx_quantize(x: torch.Tensor, mode: str = "floor") -> torch.Tensor:
    """x (contiguous, last dim a multiple of 32) quantized to MXFP8 E4M3
    with blocks of 32 along the last dim, and dequantized to fp32."""
    if x.shape[-1] % BLOCK:
        raise ValueError(f"mx_quantize: last dim {x.shape[-1]} is not a multiple of {BLOCK}")
    shape = x.shape
    d = x.reshape(*shape[:-1], shape[-1] // BLOCK, BLOCK).to(torch.float32)
    amax = d.abs().amax(-1, keepdim=True)
    if mode == "floor":
        pow2 = ((amax.view(torch.int32) >> 23) & 0xFF) - 127  # the exponent field: floor(log2 amax)
        e = torch.clamp(pow2 - E4M3_MAX_POW2, min=-E8M0_BIAS, max=E8M0_BIAS + 1)
        biased = (e + E8M0_BIAS).to(torch.uint8)
        biased = torch.where(torch.isnan(amax), torch.full_like(biased, 255), biased)
        scale = torch.clamp((biased.to(torch.int32) << 23).view(torch.float32), min=F32_MIN_NORMAL)
        q = torch.clamp(d / scale, -E4M3_MAX, E4M3_MAX)
    elif mode == "rceil":
        descale = amax / E4M3_MAX
        expo = torch.where(torch.isnan(descale), torch.full_like(descale, 255.0),
                           torch.where(torch.isinf(descale), torch.full_like(descale, 254.0),
                                       torch.clamp(torch.ceil(torch.log2(descale)), -E8M0_BIAS, E8M0_BIAS)
                                       + E8M0_BIAS)).to(torch.uint8)
        rcp = torch.where(expo == 255, descale,
                          torch.where(expo == 254, torch.full_like(descale, 2.0 ** -127),
                                      torch.where(expo == 0, torch.ones_like(descale),
                                                  torch.exp2(E8M0_BIAS - expo.to(torch.float32)))))
        q = torch.clamp(d * rcp, -E4M3_MAX, E4M3_MAX)
        scale = torch.exp2(expo.to(torch.float32) - E8M0_BIAS)
    else:
        raise ValueError(f"mx_quantize: mode must be floor or rceil, got {mode!r}")
    q = q.to(torch.float8_e4m3fn).to(torch.float32)
    return (q * scale).reshape(shape)


_quantize = mx_quantize  # what the GEMMs call: mx_quantize, or its compiled twin (use_compiled)


def use_compiled(device: str, emulation: str = "torchao") -> bool:
    """Routes the GEMMs' quantization through torch.compile(mx_quantize)
    (one fused kernel per call instead of about twenty: the emulation's cost
    on a GPU) when the compiled function gives eager's bits on a probe of
    every kind of block (zeros, saturation, 40 binades) under both rules;
    under emulation "paper" the same for mx_paper's quantizer instead
    (probed on bf16 values, what it is given). Returns whether the
    emulation's quantizer is compiled; eager stays in use otherwise."""
    global _quantize
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 512, generator=g) * torch.exp2(torch.randint(-20, 20, (256, 1), generator=g).float())
    x[0, :32] = 0.0
    x[1, :32] = 511.0 / 512.0
    x = x.to(device)

    def compiled_if_same(eager, probe):
        try:
            fn = torch.compile(eager, dynamic=True)
            same = all(torch.equal(fn(p, m), eager(p, m)) for p in (probe, probe.t().contiguous())
                       for m in ("floor", "rceil"))
        except Exception:  # no compiler toolchain: eager
            same = False
        return fn if same else None

    if emulation == "paper":
        fn = compiled_if_same(mx_paper.mx_quantize_paper, mx_paper.bf16_away(x))
        if fn is not None:
            mx_paper._quantize = fn
    else:
        fn = compiled_if_same(mx_quantize, x)
        if fn is not None:
            _quantize = fn
    return fn is not None


def _q_rows(t: torch.Tensor, mode: str) -> torch.Tensor:
    """Blocks along dim 1 of a 2-D tensor."""
    return _quantize(t.contiguous(), mode)


def _q_cols(t: torch.Tensor, mode: str) -> torch.Tensor:
    """Blocks along dim 0 of a 2-D tensor (quantize the transpose, give it back)."""
    return _quantize(t.t().contiguous(), mode).t()


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A product of MX operands. On a GPU through TF32 tensor cores: an MX
    element (E4M3 times a power of two) is exact in TF32, and the products
    accumulate in fp32, as MX hardware does; fp32 on the CPU."""
    if not a.is_cuda:
        return a @ b
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        return a @ b
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


class MXLinearFn(torch.autograd.Function):
    """y = x W^T with every GEMM operand in MXFP8, blocked along that
    GEMM's contraction dimension (torchao's mx_mm, emulated):
    forward x[M,K] W[N,K] over K; grad_x = g[M,N] W over N; grad_W = g^T x over M."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, mode: str) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        ctx.mode = mode
        x2 = x.reshape(-1, x.shape[-1])
        y = _mm(_q_rows(x2, mode), _q_rows(w, mode).t())
        return y.reshape(*x.shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        x, w = ctx.saved_tensors
        mode = ctx.mode
        g2 = g.reshape(-1, g.shape[-1]).contiguous()
        x2 = x.reshape(-1, x.shape[-1])
        grad_x = _mm(_q_rows(g2, mode), _q_cols(w, mode))                 # over N
        grad_w = _mm(_q_cols(g2, mode).t(), _q_cols(x2, mode))            # over M
        return grad_x.reshape(x.shape), grad_w, None


def bf16_round(t: torch.Tensor) -> torch.Tensor:
    """A round trip through bfloat16; its gradient takes the same trip."""
    return t.to(torch.bfloat16).to(t.dtype)


EMULATIONS = ("torchao", "paper")


class Recipe:
    """What a run computes in low precision. mx: None (fp32 GEMMs), "floor"
    or "rceil" (the shared exponent's rule); ln_bf16: the LayerNorm
    (affine included) in bf16; gelu_bf16: the student's GELU rounded to
    bf16; emulation: whose bits, "torchao" or "paper" (module docstring).
    Under "paper" the student's GELU is never quantized (theirs is not) and
    the teacher is quantized whenever mx is set."""

    def __init__(self, mx: Optional[str] = "floor", ln_bf16: bool = True, gelu_bf16: bool = True,
                 emulation: str = "torchao"):
        if emulation not in EMULATIONS:
            raise ValueError(f"Recipe: emulation must be one of {EMULATIONS}, got {emulation!r}")
        if emulation == "paper" and gelu_bf16:
            raise ValueError("Recipe: the paper emulation's student GELU is unquantized (gelu_bf16=False)")
        self.mx, self.ln_bf16, self.gelu_bf16, self.emulation = mx, ln_bf16, gelu_bf16, emulation


HIGH = Recipe(None, False, False)


class Op(torch.nn.Module):
    """An operator that may be promoted: `self.promoted()` (set by the run)
    says whether this step computes in high precision."""

    def __init__(self) -> None:
        super().__init__()
        self.recipe: Recipe = HIGH
        self.promoted: Callable[[], bool] = lambda: False


class MXLinear(Op):
    def __init__(self, d_in: int, d_out: int, bias: bool) -> None:
        super().__init__()
        lin = torch.nn.Linear(d_in, d_out, bias=bias)  # torch's default init
        self.weight = lin.weight
        self.bias = lin.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recipe.mx is None or self.promoted():
            return F.linear(x, self.weight, self.bias)
        if self.recipe.emulation == "paper":
            return mx_paper.PaperLinearFn.apply(x, self.weight, self.bias, self.recipe.mx)
        y = MXLinearFn.apply(x, self.weight, self.recipe.mx)
        return y + self.bias if self.bias is not None else y


class RoundedLayerNorm(Op):
    def __init__(self, d: int) -> None:
        super().__init__()
        ln = torch.nn.LayerNorm(d)
        self.weight, self.bias = ln.weight, ln.bias
        self.ran_chain = False  # whether the latest forward ran the paper's chain (no beta gradient)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.ran_chain = False
        if not self.recipe.ln_bf16 or self.promoted():
            return F.layer_norm(x, x.shape[-1:], self.weight, self.bias)
        if self.recipe.emulation == "paper":
            self.ran_chain = True
            return mx_paper.PaperLayerNormFn.apply(x, self.weight, self.bias, mx_paper.LN_EPS)
        xb = x.to(torch.bfloat16)
        y = F.layer_norm(xb, x.shape[-1:], self.weight.to(torch.bfloat16), self.bias.to(torch.bfloat16))
        return y.to(x.dtype)


class Block(torch.nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.ln = RoundedLayerNorm(d)
        self.fc1 = MXLinear(d, 4 * d, bias=False)
        self.fc2 = MXLinear(4 * d, d, bias=True)

    def act(self, h: torch.Tensor) -> torch.Tensor:
        """The GELU: rounded to bf16 when the recipe says so (torchao's
        emulation of the paper's recipe), fp32 otherwise."""
        h = F.gelu(h)
        return bf16_round(h) if self.fc1.recipe.gelu_bf16 else h

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.act(self.fc1(self.ln(x))))


class Student(torch.nn.Module):
    def __init__(self, d: int, depth: int) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(d) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return x

    def operators(self) -> "Dict[str, Op]":
        """The units: every block's ln, fc1, fc2, by path."""
        return {n: m for n, m in self.named_modules() if isinstance(m, Op)}

    def set_recipe(self, recipe: Recipe) -> None:
        for op in self.operators().values():
            op.recipe = recipe

    def drop_chain_beta_grads(self) -> None:
        """After backward: the beta of every LayerNorm that ran the paper's
        chain this step has no gradient (None, where a buffer zeroed in place
        would remain from a promoted step), so that torch's Adam and gnmr's
        AdamW skip it, moments and all, as the authors' Adam does."""
        for op in self.operators().values():
            if isinstance(op, RoundedLayerNorm) and op.ran_chain:
                op.bias.grad = None


class Teacher(torch.nn.Module):
    def __init__(self, d: int, depth: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(d, d, bias=False), torch.nn.GELU(), torch.nn.Linear(d, d, bias=False))
            for _ in range(depth))
        self.requires_grad_(False)

    def forward(self, x: torch.Tensor, recipe: Optional[Recipe] = None) -> torch.Tensor:
        """fp32; quantized as the authors' MX phase does (mx_paper) when
        recipe is a paper-emulation recipe with MX GEMMs."""
        if recipe is not None and recipe.emulation == "paper" and recipe.mx is not None:
            return mx_paper.teacher_forward(self.layers, x, recipe.mx)
        for layer in self.layers:
            x = layer(x)
        return x


def units_of(student: Student) -> "Dict[str, List[torch.Tensor]]":
    """One gnmr unit per operator (its weight and bias together)."""
    return {n: [p for p in op.parameters(recurse=False)] for n, op in student.operators().items()}
