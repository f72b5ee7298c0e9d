"""mx_paper.py — the MX emulation the authors of Su et al. 2025 (arXiv
2506.20752) ran, as read in their public code (Hither1/systems-scaling,
MIT: olmo/mx, olmo/synthetic/student_teacher.py), written here afresh (no
code of theirs is copied). mx_sim.py's default emulation gives torchao's
bits (what MX hardware does); this one gives theirs, which differs in what
is rounded, where, and how:

  * Rounding is ties *away from zero* everywhere (their rounding mode
    "nearest" is sign * floor(|x| + 0.5) on the scaled value; round-half-
    to-even exists there only as "even", which their script does not set),
    for bf16 as for E4M3.
  * Every GEMM operand is rounded to bf16, then quantized to MXFP8 E4M3
    (blocks of 32 along the GEMM's contraction dimension, the OCP floor
    rule for the shared exponent, elements above 448 saturate). After the
    bf16 step an E4M3 element keeps 4 of 8 significant bits, so about one
    in sixteen sits exactly on a tie and is pushed up in magnitude: a
    systematic bias round-half-to-even does not have.
  * A linear's output is rounded to bf16, its bias (bf16) added and the sum
    rounded again; backward, the incoming gradient, both GEMM results and
    the bias gradient (a sum of the bf16 gradient) are rounded to bf16.
  * LayerNorm is a chain of bf16-rounded vector ops (PaperLayerNormFn: its
    inputs rounded, then 12 rounded ops forward and 18 backward); its gamma
    gradient is a bf16-rounded sum and its beta gets no gradient at all
    (their backward returns none for it).
  * The student's GELU is not quantized (their model binds F.gelu before
    the quantized ops are injected); the teacher's is, as a chain of bf16
    vector ops around a sigmoid approximation (teacher_forward), and the
    teacher's linears are quantized like the student's: its output is far
    below the target noise, so this should not matter, but it is theirs.
  * The residual additions and the loss are not quantized (Tensor.__add__
    and F.mse_loss are not among the functions they replace).

The "bump the overflow exponent" fix of their code adds one to a block's
shared exponent when its largest element's mantissa exceeds 1.75: torchao's
RCEIL rule, and mode "rceil" here (per block; their implementation takes
the maximum along the wrong axis of the blocked tensor, across blocks per
position; that slip is not reproduced: docs/record/mx-proxy.md).

A promoted operator (gnmr's promotion) computes in fp32 under this
emulation as under torchao's: mx_sim.py decides that before coming here.
Tests: tests/python/test_mx_proxy.py, each rule against a plain fp64
reference.
"""
from __future__ import annotations

import torch

BLOCK = 32
E4M3_MAX = 448.0
E4M3_EMAX = 8               # floor(log2(448)): the OCP floor rule's offset
_RCEIL_MANTISSA = 0x600000  # a mantissa above 1.75 (binary 1.11): RCEIL bumps the exponent
LN_EPS = 1e-5               # torch.nn.LayerNorm's, which their injected layer_norm receives


def bf16_away(x: torch.Tensor) -> torch.Tensor:
    """x (fp32) rounded to the nearest bf16 value, ties away from zero,
    returned as fp32. On the bit pattern: adding half a bf16 ulp (0x8000)
    to the magnitude bits and dropping the low 16 bits is round-half-away
    for either sign (the sign bit is not in the sum), subnormals included;
    a value past bf16's largest rounds to inf, as theirs does. Arithmetic
    NaNs (0x7FC00000, 0xFFC00000) stay NaN."""
    b = x.contiguous().view(torch.int32)
    return ((b + 0x8000) & -65536).view(torch.float32)  # -65536: 0xFFFF0000


def _e4m3_away(q: torch.Tensor) -> torch.Tensor:
    """q (fp32, |q| <= 448 after the clamp, bf16-representable) rounded to
    E4M3, ties away from zero. A bf16 value has 8 significant bits, E4M3
    keeps 4 (fewer in its subnormals): a non-tie lies at least a bf16 ulp
    from every midpoint, so moving each value one fp32 ulp away from zero
    turns exactly the ties into values just past the midpoint, and the
    native round-half-to-even cast then rounds them away."""
    nudged = (q.view(torch.int32) + 1).view(torch.float32)  # one ulp away from zero, either sign
    return nudged.to(torch.float8_e4m3fn).to(torch.float32)


def mx_quantize_paper(x: torch.Tensor, mode: str = "floor") -> torch.Tensor:
    """x (fp32, bf16-representable, last dim a multiple of 32) quantized to
    MXFP8 E4M3 with blocks of 32 along the last dim as their emulator does,
    and dequantized: shared exponent e = floor(log2 amax) - 8 (+1 under
    "rceil" when amax's mantissa exceeds 1.75), clamped at -127 below;
    elements x / 2^e rounded ties-away, saturating at 448; a block holding
    inf or NaN comes out NaN (their log2 of inf gives a NaN exponent)."""
    if x.shape[-1] % BLOCK:
        raise ValueError(f"mx_quantize_paper: last dim {x.shape[-1]} is not a multiple of {BLOCK}")
    if mode not in ("floor", "rceil"):
        raise ValueError(f"mx_quantize_paper: mode must be floor or rceil, got {mode!r}")
    shape = x.shape
    d = x.reshape(-1, BLOCK)
    amax = d.abs().amax(-1, keepdim=True)
    bits = amax.view(torch.int32)
    # floor(log2 amax) read off the exponent field: exact, where their fp32
    # log2 may round up just below a power of two (never for a bf16 amax).
    pow2 = (bits >> 23) - 127  # amax >= 0: no sign bit; zero and subnormals -> -127; inf/NaN -> 128
    if mode == "rceil":
        pow2 = pow2 + ((bits & 0x7FFFFF) > _RCEIL_MANTISSA).to(torch.int32)
    e = torch.clamp(pow2 - E4M3_EMAX, min=-127)  # in [-127, 121]
    # 2^e and 2^-e built on the bits (exact, where exp2 need not be): 2^-127
    # is the subnormal 0x00400000; 2^-e is always normal.
    scale = torch.where(e > -127, (e + 127) << 23, torch.full_like(e, 0x00400000)).view(torch.float32)
    scale = torch.where(pow2 >= 128, torch.full_like(scale, float("nan")), scale)
    inv = ((127 - e) << 23).view(torch.float32)
    q = torch.clamp(d * inv, -E4M3_MAX, E4M3_MAX)  # d * 2^-e is d / 2^e, bit for bit
    return (_e4m3_away(q) * scale).reshape(shape)


_quantize = mx_quantize_paper  # what the GEMMs call: it, or its compiled twin (mx_sim.use_compiled)


def _q_rows(t: torch.Tensor, mode: str) -> torch.Tensor:
    return _quantize(t.contiguous(), mode)


def _q_cols(t: torch.Tensor, mode: str) -> torch.Tensor:
    return _quantize(t.t().contiguous(), mode).t()


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    from mx_sim import _mm as mm  # TF32 on a GPU (exact for MX operands), fp32 on the CPU
    return mm(a, b)


def linear_forward(x: torch.Tensor, w: torch.Tensor, b, mode: str):
    """Their quantized linear's forward: (output, bf16 x, bf16 w)."""
    xb, wb = bf16_away(x), bf16_away(w)
    y = bf16_away(_mm(_q_rows(xb.reshape(-1, x.shape[-1]), mode), _q_rows(wb, mode).t()))
    if b is not None:
        y = bf16_away(y + bf16_away(b))
    return y.reshape(*x.shape[:-1], w.shape[0]), xb, wb


class PaperLinearFn(torch.autograd.Function):
    """y = x W^T + b under their emulation. Backward: the gradient rounded
    to bf16, grad_x = g W over N and grad_W = g^T x over M from MX operands
    (the bf16 x and W of the forward), each result rounded to bf16;
    grad_b = bf16(sum of the bf16 gradient)."""

    @staticmethod
    def forward(ctx, x, w, b, mode):
        y, xb, wb = linear_forward(x, w, b, mode)
        ctx.save_for_backward(xb, wb)
        ctx.mode, ctx.has_bias = mode, b is not None
        return y

    @staticmethod
    def backward(ctx, g):
        xb, wb = ctx.saved_tensors
        mode = ctx.mode
        gb = bf16_away(g.reshape(-1, g.shape[-1]))
        x2 = xb.reshape(-1, xb.shape[-1])
        grad_x = bf16_away(_mm(_q_rows(gb, mode), _q_cols(wb, mode)))
        grad_w = bf16_away(_mm(_q_cols(gb, mode).t(), _q_cols(x2, mode)))
        grad_b = bf16_away(gb.sum(0)) if ctx.has_bias else None
        return grad_x.reshape(xb.shape), grad_w, grad_b, None


class PaperLayerNormFn(torch.autograd.Function):
    """LayerNorm over the last dim as their chain of bf16-rounded vector ops
    (every line below that calls Q is one rounding, ties away). Forward:
    x, gamma, beta rounded; mean = Q(Q(sum x)/D); s = Q(x - mean);
    var = Q(Q(sum Q(s*s))/D); vare = Q(var + eps); std = Q(sqrt vare);
    inv = Q(1/std); xn = Q(s*inv); y = Q(Q(gamma*xn) + beta). Backward (g the
    incoming gradient): g = Q(g); dgamma = Q(sum over rows Q(g*xn));
    dxn = Q(g*gamma); std, inv again from vare; a = Q(dxn*inv);
    t = Q(Q(dxn*xn)*std), its row mean Q(Q(sum)/D), times Q(1/vare), Q'd;
    b = Q(-t*xn); dx = Q(a + b); dx = Q(dx - Q(Q(sum dx)/D)). dbeta: none."""

    @staticmethod
    def forward(ctx, x, w, b, eps):
        Q = bf16_away
        d = x.shape[-1]
        xq, wq, bq = Q(x), Q(w), Q(b)
        mean = Q(Q(xq.sum(-1, keepdim=True)) / d)
        s = Q(xq - mean)
        var = Q(Q(Q(s * s).sum(-1, keepdim=True)) / d)
        vare = Q(var + eps)
        std = Q(torch.sqrt(vare))
        inv = Q(1.0 / std)
        xn = Q(s * inv)
        ctx.save_for_backward(xn, vare, wq)
        return Q(Q(wq * xn) + bq)

    @staticmethod
    def backward(ctx, g):
        Q = bf16_away
        xn, vare, wq = ctx.saved_tensors
        d = g.shape[-1]
        g = Q(g)
        rows = tuple(range(g.dim() - 1))
        grad_w = Q(Q(g * xn).sum(rows))
        dxn = Q(g * wq)
        std = Q(torch.sqrt(vare))
        inv = Q(1.0 / std)
        a = Q(dxn * inv)
        t = Q(Q(dxn * xn) * std)
        t = Q(Q(t.sum(-1, keepdim=True)) / d)
        t = Q(t * Q(1.0 / vare))
        dx = Q(a + Q(-t * xn))
        dx = Q(dx - Q(Q(dx.sum(-1, keepdim=True)) / d))
        return dx, grad_w, None, None  # beta: no gradient, as theirs


def teacher_gelu(x: torch.Tensor) -> torch.Tensor:
    """The teacher's GELU under their injection (forward only): x Q'd, then
    x * sigmoid(1.59375 (x + 0.044677734 x^3)) with every op rounded to
    bf16 (their bf16 coefficients of the tanh approximation)."""
    Q = bf16_away
    q = Q(x)
    s = Q(Q(q * q) * q)
    s = Q(Q(0.044677734 * s) + q)
    s = Q(1.59375 * s)
    phi = Q(1.0 / Q(Q(torch.exp(-s)) + 1.0))
    return Q(q * phi)


@torch.no_grad()
def teacher_forward(layers, x: torch.Tensor, mode: str) -> torch.Tensor:
    """The teacher (torch.nn.Sequential blocks Linear, GELU, Linear without
    bias) as their MX phase computes it."""
    for layer in layers:
        x = linear_forward(x, layer[0].weight, None, mode)[0]
        x = teacher_gelu(x)
        x = linear_forward(x, layer[2].weight, None, mode)[0]
    return x
