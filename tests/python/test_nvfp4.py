"""gnmr.integrations.nvfp4: the NVFP4 training recipe (arXiv 2509.25149),
emulated on the CPU. Each quantizer against a direct float64 reference
(torchao's 1-D path, our 16x16 weight blocks, our stochastic rounding, our
16x16 random Hadamard transform); NVFP4Linear's three GEMMs against their
definition; reproducible and bit-identical on resume; promotion through
gnmr.integrations.torchao. Skipped without torchao.
"""
from __future__ import annotations

import io
import math
import os

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("torchao.prototype.mx_formats.nvfp4_tensor")

import gnmr  # noqa: E402
from gnmr.integrations import _nvfp4_quant as q  # noqa: E402
from gnmr.integrations import nvfp4  # noqa: E402
from gnmr.integrations import torchao as gnmr_ao  # noqa: E402

GRID = torch.tensor(q.E2M1_GRID, dtype=torch.float64)


# ------------------------------------------------------- float64 references ---
def f32(t):
    """One fp32 rounding of an exact (float64) result: an fp32 op of fp32
    operands is the float64 op rounded once (53 >= 2 * 24 + 2)."""
    return t.to(torch.float32).to(torch.float64)


def ref_e4m3(s):
    """Nearest E4M3 (ties to even; subnormals below 2**-6), s >= 0, float64."""
    _, ex = torch.frexp(s)
    e = torch.clamp(ex.to(torch.float64) - 1, min=-6.0)
    ulp = torch.pow(2.0, e - 3)
    return torch.clamp(torch.round(s / ulp) * ulp, max=448.0)  # torch.round: half to even


def ref_e2m1(v):
    """Nearest E2M1 (ties to the even code), |v| <= 6, float64, sign kept."""
    d = (v.abs().unsqueeze(-1) - GRID).abs()
    best, lo = d.min(dim=-1)  # the first (lower) minimum
    nxt = (lo + 1).clamp(max=7)
    tie = (nxt != lo) & (d.gather(-1, nxt.unsqueeze(-1)).squeeze(-1) == best)
    idx = torch.where(tie & (lo % 2 == 1), nxt, lo)
    return torch.copysign(GRID[idx], v)


def ref_neighbours(a):
    """(lo, hi, p) for |v| = a (float64): the grid points around it (by a
    search) and the position between them (0 on the grid and past 6)."""
    lo_i = (a.unsqueeze(-1) >= GRID).sum(-1) - 1
    lo = GRID[lo_i]
    hi = GRID[(lo_i + 1).clamp(max=7)]
    return lo, hi, torch.where(hi > lo, (a - lo) / (hi - lo), torch.zeros_like(a))


def ref_sr(v, u):
    """Stochastic rounding with given draws u: up iff u < position."""
    lo, hi, p = ref_neighbours(v.abs())
    return torch.copysign(torch.where(u.double() < p, hi, lo), v)


def assert_torchaos_rne(m):
    """Our nearest-even E2M1 rounding is torchao's encoder and decoder, bit
    for bit, on m and -m."""
    from torchao.prototype.mx_formats.kernels import f32_to_f4_unpacked, f4_unpacked_to_f32
    for x in (m, -m):
        assert torch.equal(bits(q.e2m1_round_nearest_even(x)), bits(f4_unpacked_to_f32(f32_to_f4_unpacked(x))))


def ref_quantize(x, block_rows, u=None):
    """NVFP4 of x (2-D fp32) in block_rows x 16 blocks, every fp32 step of
    torchao's rule done as a float64 op rounded once; E4M3 and E2M1 by the
    references above (stochastic with draws u if given). Returns fp32."""
    r, c = x.shape
    x64 = x.double()
    amax = x64.abs().max()
    pts = f32(amax / 2688.0)
    pts = torch.where(pts == 0, torch.ones_like(pts), pts)
    xb = x64.reshape(r // block_rows, block_rows, c // 16, 16)
    bmax = xb.abs().amax(dim=(1, 3), keepdim=True)
    s = ref_e4m3(torch.clamp(f32(f32(bmax / 6.0) / pts), min=2.0 ** -6, max=448.0))
    enc = f32(f32(1.0 / pts) / s)
    v = torch.clamp(f32(xb * enc), -6.0, 6.0).reshape(r, c)
    e = ref_e2m1(v) if u is None else ref_sr(v, u)
    return f32(e.reshape(xb.shape) * f32(pts * s)).reshape(r, c).to(torch.float32)


def bits(t):
    return t.contiguous().view(torch.int32)


def hard_tensor(rows, cols, seed):
    """Random blocks over 12 decades (many block scales clamped at 2**-6,
    far below the tensor's amax), a zero block, a block of fp32 subnormals
    and an all-negative block. About half the blocks saturate: when the
    block scale rounds down in E4M3 the block's largest value lands above 6
    and is clamped."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g)
    mag = torch.pow(10.0, torch.empty(rows, cols // 16).uniform_(-8, 4, generator=g))
    x = (x.reshape(rows, cols // 16, 16) * mag.unsqueeze(-1)).reshape(rows, cols)
    x[0, :16] = 0.0
    x[1, 16:32] = torch.randn(16, generator=g) * 1e-40          # fp32 subnormals
    x[2, :16] = -x[2, :16].abs()
    x[3, 0] = 2.0e4                                             # the tensor's amax
    return x


def saturated(x, block_rows):
    """How many elements of x land beyond 6 before the clamp."""
    r, c = x.shape
    pts = q.tensor_scale(x)
    xb = x.reshape(r // block_rows, block_rows, c // 16, 16)
    _, enc = q.block_scales(xb.abs().amax(dim=(1, 3), keepdim=True), pts)
    return int(((xb * enc).abs() > 6).sum())


# ------------------------------------------------------------- quantizers ---
def test_e2m1_rne_is_torchaos_and_the_reference():
    g = torch.Generator().manual_seed(1)
    mids = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    v = torch.cat([GRID.float(), mids, torch.empty(20000).uniform_(-6, 6, generator=g), torch.tensor([-0.0])])
    v = torch.cat([v, -v])
    assert torch.equal(bits(q.e2m1_round_nearest_even(v)), bits(ref_e2m1(v.double()).float()))
    assert q.e2m1_round_nearest_even(mids).tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0]
    # torchao's encoder and decoder, on every 251st fp32 bit pattern of
    # magnitude up to 6 (both signs: 8.7 million values; every one of them was
    # checked once, 2026-11-29), the binade edges and beyond 6 (saturates)
    six = int(torch.tensor(6.0).view(torch.int32))
    m = torch.arange(0, six + 1, 251, dtype=torch.int64).to(torch.int32).view(torch.float32)
    edges = torch.tensor([2.0 ** -149, 2.0 ** -126, 0.5, 1.0, 2.0, 4.0, 6.0, 6.5, 7.0, 1e30, float("inf")])
    assert_torchaos_rne(torch.cat([m, edges, torch.nextafter(edges, torch.zeros_like(edges))]))
    assert torch.isnan(q.e2m1_round_nearest_even(torch.tensor([float("nan")]))).all()  # torchao's: 1.5


def test_a_tiny_tensor_keeps_its_zeros_and_other_float_types_are_read_as_fp32():
    """amax below about 5e-34: the encode factor of a block clamped at 2**-6
    overflows, and 0 * inf would turn the block's zeros (the padding's too)
    into NaN; they stay 0, the other elements are torchao's (1-D) or the
    reference's (2-D). And the roundings read any float dtype as its fp32
    values."""
    for amax in (1e-35, 1e-36, 1e-40):
        x = torch.zeros(16, 32)
        x[0, 0], x[3, 17], x[9, 5] = amax, -amax / 3, amax / 7
        for got in (q.quantize_1d(x), q.quantize_1d(x, "sr", torch.Generator().manual_seed(1)), q.quantize_2d(x)):
            assert torch.isfinite(got).all()
            assert torch.equal(got[x == 0], torch.zeros_like(got[x == 0]))
        ao = q.quantize_1d(x, use_torchao=True)
        assert torch.equal(bits(q.quantize_1d(x)[x != 0]), bits(ao[x != 0]))
        assert torch.equal(bits(q.quantize_2d(x)[x != 0]), bits(ref_quantize(x, 16)[x != 0]))
    # a NaN or inf still reaches every output, through the tensor scale
    for bad in (float("nan"), float("inf")):
        x = torch.randn(16, 32)
        x[2, 3] = bad
        assert not torch.isfinite(q.quantize_1d(x)).any() and not torch.isfinite(q.quantize_2d(x)).any()
    v = torch.linspace(-7, 7, 97)
    u = torch.rand(v.shape, generator=torch.Generator().manual_seed(2))
    for dt in (torch.bfloat16, torch.float16, torch.float64):
        vd = v.to(dt)
        assert torch.equal(q.e2m1_round_nearest_even(vd), q.e2m1_round_nearest_even(vd.float()))
        assert torch.equal(q.e2m1_round_stochastic(vd, draws=u), q.e2m1_round_stochastic(vd.float(), draws=u))


@pytest.mark.skipif(os.environ.get("GNMR_EXHAUSTIVE") != "1", reason="about two minutes: GNMR_EXHAUSTIVE=1 runs it")
def test_e2m1_rne_is_torchaos_on_every_fp32_up_to_6():
    """Every fp32 value of magnitude up to 6, both signs (2.17 billion), in
    chunks of 2**24: ours and torchao's encoder and decoder, bit for bit."""
    six = int(torch.tensor(6.0).view(torch.int32))
    for start in range(0, six + 1, 1 << 24):
        assert_torchaos_rne(torch.arange(start, min(start + (1 << 24), six + 1),
                                         dtype=torch.int64).to(torch.int32).view(torch.float32))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_1d_blocks_torchao_ours_and_reference_agree_bit_for_bit(seed):
    x = hard_tensor(32, 256, seed)
    ref = ref_quantize(x, 1)
    ao = q.quantize_1d(x, use_torchao=True)          # torchao's to_nvfp4 / dequantize
    ours = q.quantize_1d(x)
    assert torch.equal(bits(ao), bits(ref)) and torch.equal(bits(ours), bits(ref))
    assert torch.all(ao[0, :16] == 0) and torch.all(ao[1, 16:32] == 0)
    assert saturated(x, 1) > 50 and torch.isfinite(ao).all()
    pts, tiny = q.tensor_scale(x), 2.0 ** -6 * 6
    assert int((x.reshape(32, 16, 16).abs().amax(-1) < tiny * pts).sum()) > 50   # scales clamped at 2**-6
    # bf16 inputs give the bits of their fp32 values
    xb = x.to(torch.bfloat16)
    assert torch.equal(bits(q.quantize_1d(xb)), bits(ref_quantize(xb.float(), 1)))


def test_all_zero_and_non_finite_tensors():
    z = torch.zeros(4, 32)
    assert torch.equal(q.quantize_1d(z), z) and torch.equal(q.quantize_2d(torch.zeros(16, 32)), torch.zeros(16, 32))
    assert torch.equal(q.quantize_1d(z, "sr", torch.Generator().manual_seed(0)), z)
    for bad in (float("nan"), float("inf")):
        x = torch.randn(4, 32)
        x[1, 3] = bad
        for out in (q.quantize_1d(x), q.quantize_1d(x, "sr", torch.Generator().manual_seed(0)),
                    q.quantize_2d(torch.cat([x] * 4))):
            assert not torch.isfinite(out).all()     # nothing hides a NaN or inf from gnmr


@pytest.mark.parametrize("seed", [0, 1])
def test_2d_weight_blocks_against_a_per_block_reference(seed):
    w = hard_tensor(48, 80, seed)
    w[16:32, 16:32] = torch.randn(16, 16) * 1e-3       # a whole 16x16 block far below the amax
    got = q.quantize_2d(w)
    assert saturated(w, 16) > 0
    assert torch.equal(bits(got), bits(ref_quantize(w, 16)))
    # one scale per 16x16 block, computed from that block alone:
    pts = q.tensor_scale(w)
    for i in range(0, 48, 16):
        for j in range(0, 80, 16):
            blk = w[i:i + 16, j:j + 16]
            s = ref_e4m3(torch.clamp(f32(f32(blk.double().abs().max() / 6.0) / pts.double()), 2.0 ** -6, 448.0))
            values = f32(GRID * f32(pts.double() * s))  # the block's 8 magnitudes
            assert torch.all((got[i:i + 16, j:j + 16].double().abs().unsqueeze(-1) == values).any(-1))
    # the forward's W and the input gradient's W^T are the same numbers
    assert torch.equal(bits(q.quantize_2d(w).t()), bits(q.quantize_2d(w.t().contiguous())))
    # not so with 1x16 blocks (why the recipe has 2-D weights)
    assert not torch.equal(q.quantize_1d(w).t(), q.quantize_1d(w.t().contiguous()))


def test_stochastic_rounding_matches_the_reference_and_stays_on_the_grid():
    g = torch.Generator().manual_seed(3)
    v = torch.cat([torch.empty(50000).uniform_(-7, 7, generator=g), GRID.float(), -GRID.float()])
    u = torch.rand(v.shape, generator=torch.Generator().manual_seed(4))
    got = q.e2m1_round_stochastic(v, draws=u)
    assert torch.equal(bits(got), bits(ref_sr(v.double(), u).float()))
    assert torch.all((got.abs().double().unsqueeze(-1) == GRID).any(-1))
    # lands on one of the two neighbours; grid points stay put for any draw
    assert torch.all((got.double() - v.clamp(-6, 6).double()).abs() <= 2.0)
    on = torch.cat([GRID.float(), -GRID.float()])
    for s in range(5):
        assert torch.equal(q.e2m1_round_stochastic(on, torch.Generator().manual_seed(s)), on)


def test_stochastic_rounding_at_the_edges_of_its_arithmetic():
    """The rounding finds lo and hi from |v|'s exponent (the grid's spacing
    doubles at 2 and 4): every grid point and both its fp32 neighbours, the
    exponent boundaries 1, 2, 4, subnormals, saturation past 6, inf and NaN,
    against the search-based reference; the variance against p (1 - p)
    (hi - lo)^2 from the reference's lo and hi, in the rule's fp32 order."""
    g64 = GRID.float()
    up, down = torch.full_like(g64, 100.0), torch.full_like(g64, -100.0)
    mag = torch.cat([g64, torch.nextafter(g64, up), torch.nextafter(g64, down).clamp(min=0),
                     torch.tensor([1e-45, 1e-40, 2.0 ** -126, 0.25, 0.7499999, 5.9999995, 6.0000005, 7.0, 1e30,
                                   float("inf")])])
    v = torch.cat([mag, -mag])
    for seed in range(4):
        u = torch.rand(v.shape, generator=torch.Generator().manual_seed(seed))
        n = len(g64)                   # mag: grid points, their upper, their lower neighbours
        u[:n] = 0.0                    # the extremes of a draw: on the grid, p = 0: stays;
        u[n:2 * n] = 0.0               # just above a grid point, p > 0 (tiny): up;
        u[2 * n:3 * n] = 1.0 - 2.0 ** -24  # just below one, p = 1 - 2**-23 or so: down
        got, var = q.e2m1_round_stochastic(v, draws=u, with_variance=True)
        assert torch.equal(bits(got), bits(ref_sr(v.double(), u).float()))
        lo, hi, p = ref_neighbours(v.double().abs())
        p, step = p.float(), (hi - lo).float()  # exact in fp32
        assert torch.equal(bits(var), bits(p * (1 - p) * (step * step)))  # the rule's fp32 operations
    nan = torch.tensor([float("nan"), -float("nan")])
    got, var = q.e2m1_round_stochastic(nan, torch.Generator().manual_seed(0), with_variance=True)
    assert torch.isnan(got).all() and torch.isnan(var).all()


def test_stochastic_rounding_is_deterministic_per_generator_state():
    v = torch.empty(4096).uniform_(-6, 6, generator=torch.Generator().manual_seed(5))
    a = q.e2m1_round_stochastic(v, torch.Generator().manual_seed(11))
    b = q.e2m1_round_stochastic(v, torch.Generator().manual_seed(11))
    c = q.e2m1_round_stochastic(v, torch.Generator().manual_seed(12))
    assert torch.equal(a, b) and not torch.equal(a, c)
    g = torch.Generator().manual_seed(11)
    state = g.get_state()
    first = q.e2m1_round_stochastic(v, g)
    g.set_state(state)
    assert torch.equal(q.e2m1_round_stochastic(v, g), first)
    x = hard_tensor(16, 128, 0)
    assert torch.equal(q.quantize_1d(x, "sr", torch.Generator().manual_seed(2)),
                       q.quantize_1d(x, "sr", torch.Generator().manual_seed(2)))


def test_stochastic_rounding_with_the_draw_fixed_is_round_to_nearest():
    g = torch.Generator().manual_seed(6)
    v = torch.cat([torch.empty(20000).uniform_(-6, 6, generator=g), torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])])
    v = torch.cat([v, -v])
    half = q.e2m1_round_stochastic(v, draws=torch.full_like(v, 0.5))
    rne = q.e2m1_round_nearest_even(v)
    mid = torch.isin(v.abs(), torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]))
    assert torch.equal(half[~mid], rne[~mid])
    # at midpoints u = 1/2 rounds toward zero; RNE agrees at 0.25, 1.25, 2.5, 5
    even_down = torch.isin(v.abs(), torch.tensor([0.25, 1.25, 2.5, 5.0]))
    assert torch.equal(half[even_down], rne[even_down])
    assert torch.all(half[mid & ~even_down].abs() < rne[mid & ~even_down].abs())
    # draws just above 0 / just below 1: always up / always down from the lower neighbour
    off = v[~torch.isin(v.abs(), GRID.float())]
    up = q.e2m1_round_stochastic(off, draws=torch.zeros_like(off))
    down = q.e2m1_round_stochastic(off, draws=torch.full_like(off, 1 - 2 ** -24))
    assert torch.all(up.abs() > off.abs()) and torch.all(down.abs() < off.abs())


def test_stochastic_rounding_is_unbiased():
    """n draws of q(v) lie in [lo, hi], a step h = hi - lo wide, so by
    Hoeffding P(|mean - E q| >= t) <= 2 exp(-2 n t^2 / h^2); with
    t = h sqrt(ln(2 / delta) / (2 n)), delta = 1e-9 per value (40 values:
    a false failure below 4e-8 for a fresh seed; the seed is fixed). E q
    is v to within h 2**-24 (the draws are multiples of 2**-24)."""
    n, delta = 20000, 1e-9
    v = torch.tensor([0.1, 0.3, 0.6, 0.9, 1.1, 1.3, 1.6, 1.9, 2.2, 2.7, 3.1, 3.9, 4.4, 5.5, 5.9,
                      0.013, 0.499, 1.499, 2.999, 4.001], dtype=torch.float32)
    v = torch.cat([v, -v])
    draws = q.e2m1_round_stochastic(v.expand(n, -1).contiguous(), torch.Generator().manual_seed(7))
    mean = draws.double().mean(0)
    a = v.abs().double()
    lo = GRID[(a.unsqueeze(-1) >= GRID).sum(-1) - 1]
    hi = GRID[(a.unsqueeze(-1) >= GRID).sum(-1)]
    h = hi - lo
    t = h * math.sqrt(math.log(2 / delta) / (2 * n)) + h * 2.0 ** -24
    assert torch.all((mean - v.double()).abs() <= t)
    # the test has power: round-to-nearest misses the bound on most values
    rne_bias = (q.e2m1_round_nearest_even(v).double() - v.double()).abs()
    assert (rne_bias > t).float().mean() > 0.7
    # and through the block scales: E[quantize_1d(x, "sr")] = x up to fp32 rounding
    x = torch.randn(2, 64, generator=torch.Generator().manual_seed(8))
    reps = torch.stack([q.quantize_1d(x, "sr", torch.Generator().manual_seed(100 + i)) for i in range(2000)])
    pts = q.tensor_scale(x)
    s, enc = q.block_scales(x.reshape(2, 4, 16).abs().amax(-1, keepdim=True), pts)
    inside = ((x.reshape(2, 4, 16) * enc).abs() <= 6).reshape(2, 64)   # saturated values are clamped: biased
    step = (2.0 * pts * s).expand(2, 4, 16).reshape(2, 64).double()  # the widest grid step, scaled
    tol = step * math.sqrt(math.log(2 / delta) / (2 * 2000)) + 1e-6 * x.abs().double()
    assert inside.sum() > 100
    assert torch.all(((reps.double().mean(0) - x.double()).abs() <= tol)[inside])


def test_hadamard_is_orthonormal_and_matches_a_dense_fp64_reference():
    signs = q.rht_signs(0)
    assert set(signs.tolist()) == {-1.0, 1.0} and torch.equal(signs, q.rht_signs(0))
    assert not torch.equal(signs, q.rht_signs(1))
    H = torch.tensor([[(-1.0) ** bin(i & j).count("1") for j in range(16)] for i in range(16)], dtype=torch.float64)
    Q = q.hadamard16(signs)
    assert torch.equal(Q.double(), torch.diag(signs.double()) @ H / 4)
    assert (Q.double() @ Q.double().t() - torch.eye(16, dtype=torch.float64)).abs().max() == 0
    assert (Q @ Q.t() - torch.eye(16)).abs().max() <= 1e-6
    g = torch.Generator().manual_seed(9)
    a, b = torch.randn(24, 64, generator=g), torch.randn(40, 64, generator=g)
    dense = torch.block_diag(*[Q.double()] * 4)                  # 64 x 64, the transform along dim 1
    assert torch.allclose(q.rht(a, Q).double(), a.double() @ dense, rtol=0, atol=1e-6 * a.abs().max())
    # applied to both GEMM inputs along the contraction it cancels
    assert torch.allclose(q.rht(a.double(), Q) @ q.rht(b.double(), Q).t(), a.double() @ b.double().t(),
                          rtol=0, atol=1e-12)
    exact = a.double() @ b.double().t()
    assert (q.rht(a, Q) @ q.rht(b, Q).t() - exact).abs().max() <= 1e-5 * exact.abs().max()


# ------------------------------------------------------------ NVFP4Linear ---
def test_nvfp4_linear_computes_the_three_gemms_of_the_recipe():
    torch.manual_seed(0)
    lin = torch.nn.Linear(40, 24)                       # neither a multiple of 16: padded
    layer = nvfp4.NVFP4Linear.from_linear(lin, seed=5, key=77)
    x = torch.randn(3, 10, 40, requires_grad=True)      # M = 30 tokens
    y = layer(x)
    x2, w = x.detach().reshape(30, 40), lin.weight.detach()
    pad = q.pad_to_blocks
    wq = q.quantize_2d(pad(w, 16, 16))                  # 32 x 48
    xq = q.quantize_1d(pad(x2))
    assert torch.equal(y.reshape(30, 24), xq @ wq[:24].t() + lin.bias.detach())
    gy = torch.randn(3, 10, 24)
    layer.nvfp4_step = 4
    y.backward(gy)
    dy = gy.reshape(30, 24)
    gen = lambda op: torch.Generator().manual_seed(q.mix_seed(5, 77, 4, 0, op))  # noqa: E731
    dx = (q.quantize_1d(pad(dy), "sr", gen(0)) @ wq)[:, :40]
    Q = q.hadamard16(q.rht_signs(5))
    dw = q.quantize_1d(q.rht(pad(dy.t()), Q), "sr", gen(1)) @ q.quantize_1d(q.rht(pad(x2.t()), Q)).t()
    assert torch.equal(x.grad.reshape(30, 40), dx)
    assert torch.equal(lin.weight.grad, dw)
    assert torch.equal(lin.bias.grad, dy.sum(0))
    assert layer.nvfp4_micro == 1
    # close to the fp32 gradients, and not equal to them
    exact_dw = dy.t() @ x2
    rel = ((dw - exact_dw).norm() / exact_dw.norm()).item()
    assert 0 < rel < 0.5


def test_recipe_ablations_change_what_they_say():
    torch.manual_seed(1)
    x = torch.randn(32, 48)
    gy = torch.randn(32, 32)
    grads = {}
    for name, recipe in [("full", nvfp4.NVFP4Recipe()),
                         ("no2d", nvfp4.NVFP4Recipe(weight_blocks_2d=False)),
                         ("norht", nvfp4.NVFP4Recipe(wgrad_hadamard=False)),
                         ("nosr", nvfp4.NVFP4Recipe(stochastic_gradients=False))]:
        torch.manual_seed(2)
        layer = nvfp4.NVFP4Linear(48, 32, recipe=recipe)
        xi = x.clone().requires_grad_(True)
        out = layer(xi)
        out.backward(gy)
        grads[name] = (out.detach(), xi.grad, layer.weight.grad)
    assert torch.equal(grads["full"][0], grads["norht"][0]) and torch.equal(grads["full"][1], grads["norht"][1])
    assert not torch.equal(grads["full"][2], grads["norht"][2])          # only wgrad sees the transform
    assert not torch.equal(grads["full"][0], grads["no2d"][0])
    assert not torch.equal(grads["full"][1], grads["nosr"][1]) and not torch.equal(grads["full"][2], grads["nosr"][2])
    assert "off=sr" in repr(nvfp4.NVFP4Linear(16, 16, recipe=nvfp4.NVFP4Recipe(stochastic_gradients=False)))


def test_non_finite_gradients_reach_the_parameters():
    layer = nvfp4.NVFP4Linear(32, 16)
    x = torch.randn(8, 32, requires_grad=True)
    gy = torch.randn(8, 16)
    gy[2, 5] = float("nan")
    layer(x).backward(gy)
    assert not torch.isfinite(layer.weight.grad).all() and not torch.isfinite(x.grad).all()


def make(seed=0, recipe=None, rng_seed=0):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.GELU(), torch.nn.Linear(32, 48),
                            torch.nn.GELU(), torch.nn.Linear(48, 8), torch.nn.LayerNorm(8))
    return nvfp4.convert_to_nvfp4_training(m, seed=rng_seed, recipe=recipe)


def test_conversion_keeps_parameters_filters_and_loads_plain_checkpoints():
    torch.manual_seed(0)
    plain = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.Linear(32, 8), torch.nn.Linear(8, 4))
    sd = {k: v.clone() for k, v in plain.state_dict().items()}
    ids = [id(p) for p in plain.parameters()]
    nvfp4.convert_to_nvfp4_training(plain, module_filter_fn=lambda mod, path: path != "2")
    assert [id(p) for p in plain.parameters()] == ids
    assert [type(m).__name__ for m in plain] == ["NVFP4Linear", "NVFP4Linear", "Linear"]
    assert list(nvfp4.nvfp4_modules(plain)) == ["0", "1"]
    assert plain[0].nvfp4_key != plain[1].nvfp4_key
    plain.load_state_dict(sd)                            # an nn.Linear checkpoint: no counters, still strict
    nvfp4.set_step(plain, 9)
    state = plain.state_dict()
    assert state["0._extra_state"].tolist() == [9, 0]
    fresh = nvfp4.convert_to_nvfp4_training(torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.Linear(32, 8),
                                                                torch.nn.Linear(8, 4)),
                                            module_filter_fn=lambda mod, path: path != "2")
    fresh.load_state_dict(state)
    assert fresh[1].nvfp4_step == 9


def train(m, steps, *, start=0, set_steps=True, accum=1, opt=None):
    opt = opt or torch.optim.AdamW(m.parameters(), lr=1e-2)
    for t in range(start, start + steps):
        g = torch.Generator().manual_seed(1000 + t)
        if set_steps:
            nvfp4.set_step(m, t)
        opt.zero_grad()
        for _ in range(accum):
            x, y = torch.randn(24, 20, generator=g), torch.randn(24, 8, generator=g)
            F.mse_loss(m(x), y).backward()
        opt.step()
    return opt


@pytest.mark.parametrize("set_steps,accum", [(True, 1), (True, 2), (False, 2)])
def test_a_resumed_run_is_bit_identical(set_steps, accum):
    straight = make(0)
    train(straight, 6, set_steps=set_steps, accum=accum)

    first = make(0)
    opt = train(first, 3, set_steps=set_steps, accum=accum)
    buf = io.BytesIO()
    torch.save({"model": first.state_dict(), "opt": opt.state_dict()}, buf)
    buf.seek(0)
    ck = torch.load(buf)
    resumed = make(123)                                  # other initial weights, overwritten by the load
    resumed.load_state_dict(ck["model"])
    opt2 = torch.optim.AdamW(resumed.parameters(), lr=1e-2)
    opt2.load_state_dict(ck["opt"])
    train(resumed, 3, start=3, set_steps=set_steps, accum=accum, opt=opt2)
    for (n, a), (_, b) in zip(straight.named_parameters(), resumed.named_parameters()):
        assert torch.equal(a, b), n
    if not set_steps:
        # the counters matter: a resume that forgot them draws other roundings
        lost = make(123)
        lost.load_state_dict(ck["model"])
        for mod in nvfp4.nvfp4_modules(lost).values():
            mod.nvfp4_micro = 0
        opt3 = torch.optim.AdamW(lost.parameters(), lr=1e-2)
        opt3.load_state_dict(ck["opt"])
        train(lost, 3, start=3, set_steps=False, accum=accum, opt=opt3)
        assert not torch.equal(lost[0].weight, straight[0].weight)


def test_the_seed_and_the_step_choose_the_roundings():
    runs = {}
    for name, rng_seed in [("a", 0), ("b", 0), ("c", 1)]:
        m = make(0, rng_seed=rng_seed)
        train(m, 2)
        runs[name] = m[0].weight.detach().clone()
    assert torch.equal(runs["a"], runs["b"]) and not torch.equal(runs["a"], runs["c"])
    # same layer, two steps: different draws
    m = make(0)
    x = torch.randn(16, 20)
    grads = []
    for step in (5, 5, 6):
        nvfp4.set_step(m, step)
        for mod in nvfp4.nvfp4_modules(m).values():
            mod.nvfp4_micro = 0
        m.zero_grad()
        m(x).sum().backward()
        grads.append(m[2].weight.grad.clone())
    assert torch.equal(grads[0], grads[1]) and not torch.equal(grads[0], grads[2])


# -------------------------------------------------------------- promotion ---
def test_a_granted_nvfp4_operator_runs_in_high_precision_for_its_lock():
    m = make(1)
    units = gnmr_ao.operator_units(m)
    assert list(units) == ["0", "2", "4", "5.weight", "5.bias"]
    ctl = gnmr.Controller(units, "gnmr", warmup=5, lock=4)
    assert gnmr_ao.enable_promotion(m, ctl) == ["0", "2", "4"]
    opt = gnmr.optim.AdamW(m.parameters(), lr=1e-3, controller=ctl)
    layers = gnmr_ao.low_precision_modules(m)
    assert all(isinstance(mod, nvfp4.NVFP4Linear) for mod in layers.values())
    spike_at, promoted_steps = 30, {}
    g = torch.Generator().manual_seed(5)
    for t in range(45):
        nvfp4.set_step(m, t)
        x = torch.randn(32, 20, generator=g)
        y = torch.randn(32, 8, generator=g)
        for name, mod in layers.items():
            inp = torch.randn(16, mod.in_features, generator=g)
            with torch.no_grad():
                out = mod(inp)
                if gnmr_ao.is_promoted(mod):
                    promoted_steps.setdefault(name, []).append(t)
                    assert torch.equal(out, F.linear(inp, mod.weight, mod.bias))
                else:
                    assert torch.equal(out, type(mod).forward(mod, inp))
                    assert not torch.equal(out, F.linear(inp, mod.weight, mod.bias))
        micro = {n: mod.nvfp4_micro for n, mod in layers.items()}
        opt.zero_grad()
        F.mse_loss(m(x), y).backward()
        for n, mod in layers.items():   # a promoted layer's backward is F.linear's: no NVFP4 rounding drawn
            assert mod.nvfp4_micro - micro[n] == (0 if gnmr_ao.is_promoted(mod) else 1)
        if t == spike_at:
            m[2].weight.grad.mul_(1000.0)
        opt.step()
    assert promoted_steps.get("2") == list(range(spike_at + 1, spike_at + 5))
    assert "0" not in promoted_steps and "4" not in promoted_steps
    assert all(torch.isfinite(p).all() for p in m.parameters())
    gnmr_ao.disable_promotion(m)
    assert all(not gnmr_ao.is_promoted(mod) for mod in layers.values())
