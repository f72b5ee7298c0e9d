"""bench/python/mx_paper.py and the proxy's resumable runs, on the CPU: the
paper emulation (the authors' own emulator's bits, docs/record/mx-proxy.md),
each of its rules against a plain fp64 reference written here (ties away in
bf16 and E4M3 with ties built on purpose, the linear's roundings, the
LayerNorm chain within a derived bound, no beta gradient, the student's
GELU unquantized, the teacher quantized); runs survive a stop: stopped and
resumed equals uninterrupted, bit for bit, under both emulations.
"""
from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

BENCH = Path(__file__).resolve().parents[2] / "bench" / "python"
sys.path.insert(0, str(BENCH))
import mx_paper  # noqa: E402
import mx_proxy  # noqa: E402
import mx_sim  # noqa: E402

U = 2.0 ** -8                  # the largest relative error of a rounding to 8 significant bits (bf16)
BF16_MAX = (2.0 - 2.0 ** -7) * 2.0 ** 127


def _floor_log2(a):
    """floor(log2 a) for a > 0, exactly (frexp: a = m 2^e, m in [0.5, 1))."""
    return np.frexp(a)[1] - 1.0


def ref_round_away(v, quantum):
    """Round to a multiple of quantum, ties away from zero (their rule: sign * floor(|v|/q + 0.5) * q)."""
    return np.sign(v) * np.floor(np.abs(v) / quantum + 0.5) * quantum


def ref_bf16_away(x):
    """fp64 reference of rounding to bf16 (8 significant bits, subnormal quantum 2^-133), ties away;
    past bf16's largest: inf."""
    v = np.asarray(x, np.float64)
    a = np.abs(v)
    p = np.maximum(np.where(a > 0, _floor_log2(np.where(a > 0, a, 1.0)), -126.0), -126.0)
    r = ref_round_away(v, 2.0 ** (p - 7))
    return np.where(np.abs(r) > BF16_MAX, np.where(v > 0, np.inf, -np.inf), r)


def ref_mx_paper(x, mode="floor"):
    """fp64 reference of their MXFP8 E4M3 quantizer, block by block along the last dim of a 2-D
    array: e = floor(log2 amax) - 8 (+1 under rceil when amax / 2^floor(log2 amax) > 1.75), at
    least -127; each element x / 2^e rounded to E4M3 (3 mantissa bits, subnormal quantum 2^-9)
    ties away, clamped to +-448, times 2^e. A block holding inf or NaN: NaN."""
    x = np.asarray(x, np.float64)
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        for j in range(0, x.shape[1], 32):
            blk = x[i, j:j + 32]
            amax = np.abs(blk).max()
            if not np.isfinite(amax):
                out[i, j:j + 32] = np.nan
                continue
            p = _floor_log2(amax) if amax > 0 else -127.0
            if mode == "rceil" and amax > 0 and amax / 2.0 ** p > 1.75:
                p += 1
            e = max(p - 8, -127.0)
            v = blk / 2.0 ** e
            a = np.abs(v)
            pe = np.maximum(np.where(a > 0, _floor_log2(np.where(a > 0, a, 1.0)), -6.0), -6.0)
            out[i, j:j + 32] = np.clip(ref_round_away(v, 2.0 ** (pe - 3)), -448.0, 448.0) * 2.0 ** e
    return out


def _t(a):
    return torch.from_numpy(np.asarray(a, np.float64)).float()


def _is_bf16(t):
    return torch.equal(t, t.to(torch.bfloat16).float())


def test_bf16_rounding_is_ties_away_from_zero():
    g = torch.Generator().manual_seed(3)
    rand = (torch.randn(4096, generator=g) * torch.exp2(torch.randint(-60, 60, (4096,), generator=g).float()))
    # ties built on purpose: a bf16 value plus half its ulp, either sign, in
    # normal and subnormal binades, one carrying into the next binade, and
    # at the top of the range (there a tie rounds to inf, as theirs does)
    b = rand.to(torch.bfloat16).float()
    ulp = torch.exp2(torch.floor(torch.log2(b.abs())) - 7)
    ties = b + torch.sign(b) * ulp / 2
    special = torch.tensor([
        1.0 + 2.0 ** -8, -(1.0 + 2.0 ** -8), 1.0 + 3 * 2.0 ** -8, -(1.0 + 3 * 2.0 ** -8),
        (2.0 - 2.0 ** -7) + 2.0 ** -8, -((2.0 - 2.0 ** -7) + 2.0 ** -8),   # carries to 2
        2.0 ** -133 * 0.5, -(2.0 ** -133) * 1.5, 2.0 ** -130 + 2.0 ** -134,  # subnormal ties
        BF16_MAX, -BF16_MAX, BF16_MAX + 2.0 ** 119, -(BF16_MAX + 2.0 ** 119),  # top: the tie -> inf
        BF16_MAX + 2.0 ** 119 - 2.0 ** 104, 0.0, -0.0, float("inf"), -float("inf")], dtype=torch.float64).float()
    for x in (rand, ties, special):
        got = mx_paper.bf16_away(x)
        ref = ref_bf16_away(x.double().numpy())
        assert np.array_equal(got.double().numpy(), ref), (x[got.double().numpy() != ref][:5])
    # every constructed tie goes away from zero, where round-half-to-even sends half of them down
    assert (mx_paper.bf16_away(ties).abs() > ties.abs()).all()
    assert (ties.to(torch.bfloat16).float().abs() < ties.abs()).float().mean() > 0.3
    assert mx_paper.bf16_away(special)[11] == float("inf") and mx_paper.bf16_away(special)[13] == BF16_MAX


def _paper_blocks():
    """bf16 values (what their quantizer is given) in blocks of 32: random
    blocks over 40 binades, E4M3 ties of either sign in every binade and in
    the subnormals, the saturation edge, a zero block, a block of values too
    small to survive, and an inf."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(48, 256, generator=g) * torch.exp2(torch.randint(-20, 20, (48, 1), generator=g).float())
    x = mx_paper.bf16_away(x)
    k = 2.0 ** 5  # a block scale: its amax at 256 * 2^k, so that e = k
    # ties: (m + 1/2) E4M3 quanta, scaled values from 2^-10 (half the least subnormal) to 240
    m = torch.randint(0, 8, (31,), generator=g).float()
    pe = torch.randint(-6, 8, (31,), generator=g).float()
    tie = (8 + m + 0.5) * torch.exp2(pe - 3)                      # normal E4M3 binades
    tie[:6] = torch.tensor([1, 3, 5, 7, 9, 15]) * 2.0 ** -10       # subnormal ones (quantum 2^-9)
    sign = torch.where(torch.arange(31) % 2 == 0, 1.0, -1.0)
    x[0, :32] = torch.cat([torch.tensor([256.0]), sign * tie]) * k
    x[0, 32:64] = -x[0, :32]
    # saturation edge: amax scaled to 448 (exact), 450 and 464 (a tie between 448 and 480), 480, 511
    for j, top in enumerate([448.0, 450.0, 464.0, 480.0, 496.0]):
        x[1, 32 * j] = top * k
        x[1, 32 * j + 1] = -top * k
        x[1, 32 * j + 2:32 * j + 32] = sign[:30] * tie[:30] * k
    x[2, :32] = 0.0
    x[2, 32:64] = torch.tensor([2.0 ** 20] + [2.0 ** -20] * 31)    # the small ones flush to zero
    x[3, 64:96] = float("inf")
    return x


@pytest.mark.parametrize("mode", ["floor", "rceil"])
def test_paper_mx_quantizer_is_the_rule_of_their_code(mode):
    x = _paper_blocks()
    got = mx_paper.mx_quantize_paper(x, mode)
    ref = ref_mx_paper(x.double().numpy(), mode)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(got.double().numpy()), nan) and nan[3, 64:96].all()
    assert np.array_equal(got.double().numpy()[~nan], ref[~nan])
    k = 2.0 ** 5
    # the constructed ties all go away from zero
    ties = x[0, 1:32]
    assert (got[0, 1:32].abs() > ties.abs()).all() and (got[0, 33:64].abs() > ties.abs()).all()
    # the saturation edge: the floor rule saturates a top element above 448;
    # rceil bumps the exponent instead (448 itself: no bump, no saturation),
    # and there 464 and 496 scale to 232 and 248, ties again, rounded up
    tops = got[1, 0::32][:5] / k
    if mode == "floor":
        assert tops.tolist() == [448.0, 448.0, 448.0, 448.0, 448.0]
    else:
        assert tops.tolist() == [448.0, 448.0, 480.0, 480.0, 512.0]
    assert (got[2, :32] == 0).all() and (got[2, 33:64] == 0).all()


def test_the_paper_quantizer_biases_operands_up_and_torchaos_does_not():
    """After the bf16 step about one element in sixteen is an E4M3 tie; ties
    away push every one of them up in magnitude (round-half-to-even: half up,
    half down). Under rceil (no saturation) the mean magnitude of Gaussian
    operands grows in theirs (+0.2% here), and ends 0.3% above torchao's."""
    g = torch.Generator().manual_seed(11)
    x = mx_paper.bf16_away(torch.randn(512, 1024, generator=g))
    paper, hw = mx_paper.mx_quantize_paper(x, "rceil"), mx_sim.mx_quantize(x, "rceil")
    d = x.reshape(-1, 32)
    amax = d.abs().amax(-1, keepdim=True)
    e = torch.floor(torch.log2(amax)) - 8 + (amax / torch.exp2(torch.floor(torch.log2(amax))) > 1.75).float()
    v = (d / torch.exp2(e)).abs()
    quantum = torch.exp2(torch.clamp(torch.floor(torch.log2(v)), min=-6) - 3)
    tie = torch.frac(v / quantum) == 0.5
    assert 1 / 20 < tie.float().mean() < 1 / 12
    bias_paper = (paper.abs() - x.abs()).mean() / x.abs().mean()
    bias_hw = (hw.abs() - x.abs()).mean() / x.abs().mean()
    assert bias_paper > 1e-3 and bias_paper - bias_hw > 2e-3


def ref_linear(x, w, b, gy, mode):
    """Their linear from the fp64 reference roundings (the GEMMs and the bias
    sum in torch fp32, as theirs): forward and the three gradients."""
    Qb = lambda t: _t(ref_bf16_away(t.double().numpy()))  # noqa: E731
    rows = lambda t: _t(ref_mx_paper(t.double().numpy(), mode))  # noqa: E731
    cols = lambda t: _t(ref_mx_paper(t.t().double().numpy(), mode)).t()  # noqa: E731
    xb, wb, gb = Qb(x), Qb(w), Qb(gy)
    y = Qb(rows(xb) @ rows(wb).t())
    y = Qb(y + Qb(b))
    return y, Qb(rows(gb) @ cols(wb)), Qb(cols(gb).t() @ cols(xb)), Qb(gb.sum(0))


@pytest.mark.parametrize("mode", ["floor", "rceil"])
def test_paper_linear_rounds_operands_results_and_gradients_as_theirs(mode):
    g = torch.Generator().manual_seed(2)
    x = (torch.randn(64, 64, generator=g) * 3).requires_grad_(True)
    w = (torch.randn(96, 64, generator=g) / 8).requires_grad_(True)
    b = (torch.randn(96, generator=g) / 8).requires_grad_(True)
    gy = torch.randn(64, 96, generator=g) / 64
    y = mx_paper.PaperLinearFn.apply(x, w, b, mode)
    y.backward(gy)
    ry, rgx, rgw, rgb = ref_linear(x.detach(), w.detach(), b.detach(), gy, mode)
    for got, ref in ((y, ry), (x.grad, rgx), (w.grad, rgw), (b.grad, rgb)):
        assert torch.equal(got, ref)
        assert _is_bf16(got)
    assert not torch.equal(y, F.linear(x, w, b).to(torch.bfloat16).float())


def _ln_case():
    g = torch.Generator().manual_seed(4)
    B, D = 64, 256
    sig = 0.5 + 3.5 * torch.rand(B, 1, generator=g)
    mu = sig * (2 * torch.rand(B, 1, generator=g) - 1)
    x = mu + sig * torch.randn(B, D, generator=g)
    w = 1 + 0.2 * torch.randn(D, generator=g)
    b = 0.1 * torch.randn(D, generator=g)
    gy = torch.randn(B, D, generator=g)
    return x, w, b, gy


def test_paper_layernorm_chain_against_fp64_within_its_derived_bound():
    """The chain (mx_paper.PaperLayerNormFn) against fp64 LayerNorm. The bound,
    first order in u = 2^-8 (each rounding: at most u relative to what it
    rounds), per row with rho = |mean|/std, xn the fp64 normalised x:
      mean err <= u(std + 3|mean|); x - mean err <= u(2|s| + std + 4|mean|);
      var rel <= 9u + 8u rho (+u for eps); 1/std rel <= 7u + 4u rho;
      xn err e_n <= u(10|xn| + 1 + 4 rho (1 + |xn|));
      y err <= u(|gamma|(13|xn| + 1 + 4 rho (1 + |xn|)) + 2|beta|);
      dgamma err <= u sum_rows |g|(13|xn| + 1 + 4 rho (1 + |xn|));
      dx (gh = g gamma, G1 = mean|gh|, G2 = mean|gh xn| per row): each
      element D_j = (u/std)[(12 + 4 rho)|gh| + |xn|((47 + 20 rho) G2 +
      (1 + 4 rho) G1) + (1 + 4 rho) G2] before the mean is taken off, the
      mean's error mean(D) + (2u/std)(G1 + G2 mean|xn|), and the last
      rounding (u/std)(|gh| + G1 + (1 + |xn|) G2).
    Second-order terms and the fp32 sums (relative 256 * 2^-24, far below
    u) are covered by a factor 1.25."""
    x, w, b, gy = _ln_case()
    xs, ws, bs = (t.clone().requires_grad_(True) for t in (x, w, b))
    y = mx_paper.PaperLayerNormFn.apply(xs, ws, bs, mx_paper.LN_EPS)
    y.backward(gy)
    assert bs.grad is None  # their beta gets no gradient
    assert _is_bf16(y) and _is_bf16(xs.grad) and _is_bf16(ws.grad)
    X, W, Bb, G = (t.double() for t in (x, w, b, gy))
    mu = X.mean(-1, keepdim=True)
    var = ((X - mu) ** 2).mean(-1, keepdim=True)
    sd = torch.sqrt(var + mx_paper.LN_EPS)
    xn = (X - mu) / sd
    rho = mu.abs() / sd
    y_ref = W * xn + Bb
    gh = G * W
    G1, G2 = gh.abs().mean(-1, keepdim=True), (gh * xn).abs().mean(-1, keepdim=True)
    dx_ref = (gh - gh.mean(-1, keepdim=True) - xn * (gh * xn).mean(-1, keepdim=True)) / sd
    dw_ref = (G * xn).sum(0)
    en = 10 * xn.abs() + 1 + 4 * rho * (1 + xn.abs())
    y_bound = U * (W.abs() * (en + 3 * xn.abs()) + 2 * Bb.abs())
    dw_bound = U * (G.abs() * (en + 3 * xn.abs())).sum(0)
    Dj = (U / sd) * ((12 + 4 * rho) * gh.abs() + xn.abs() * ((47 + 20 * rho) * G2 + (1 + 4 * rho) * G1)
                     + (1 + 4 * rho) * G2)
    dmean = Dj.mean(-1, keepdim=True) + (2 * U / sd) * (G1 + G2 * xn.abs().mean(-1, keepdim=True))
    dx_bound = Dj + dmean + (U / sd) * (gh.abs() + G1 + (1 + xn.abs()) * G2)
    for got, ref, bound in ((y, y_ref, y_bound), (xs.grad, dx_ref, dx_bound), (ws.grad, dw_ref, dw_bound)):
        err = (got.double() - ref).abs()
        assert (err <= 1.25 * bound).all(), float((err / bound).max())
        assert err.max() > 0.02 * bound.max()  # the bound is not vacuous: the chain does round
    # the chain is not torch's LayerNorm rounded once (the torchao emulation's)
    once = F.layer_norm(x.to(torch.bfloat16), (256,), w.to(torch.bfloat16), b.to(torch.bfloat16)).float()
    assert (y != once).float().mean() > 0.05


def test_paper_student_beta_has_no_gradient_gelu_unquantized_and_teacher_quantized():
    torch.manual_seed(0)
    s = mx_sim.Student(64, 2)
    s.set_recipe(mx_proxy.recipe_of("low", "paper"))
    x = torch.randn(32, 64)
    s(x).square().mean().backward()
    blk = s.blocks[0]
    assert blk.ln.bias.grad is None and _is_bf16(blk.ln.weight.grad)
    assert all(_is_bf16(p.grad) for p in (blk.fc1.weight, blk.fc2.weight, blk.fc2.bias))
    # GELU: fp32 and its fp32 gradient under the paper's emulation, bf16 under torchao's
    u = torch.randn(32, 256, requires_grad=True)
    h = blk.act(u)
    assert torch.equal(h, F.gelu(u)) and not _is_bf16(h)
    h.sum().backward()
    u2 = u.detach().clone().requires_grad_(True)
    F.gelu(u2).sum().backward()
    assert torch.equal(u.grad, u2.grad)
    s.set_recipe(mx_proxy.recipe_of("low", "torchao"))
    assert torch.equal(blk.act(u.detach()), mx_sim.bf16_round(F.gelu(u.detach())))
    # a promoted LayerNorm computes in fp32, beta's gradient included, under either emulation
    s.set_recipe(mx_proxy.recipe_of("low", "paper"))
    blk.ln.promoted = lambda: True
    s.zero_grad(set_to_none=True)
    s(x).square().mean().backward()
    assert blk.ln.bias.grad is not None and torch.equal(blk.ln(x), F.layer_norm(x, (64,), blk.ln.weight, blk.ln.bias))
    # back to the chain: the buffer a promoted step left is dropped after
    # backward (None, not zero: the optimizer skips beta, as theirs)
    blk.ln.promoted = lambda: False
    s(x).square().mean().backward()
    assert blk.ln.bias.grad is not None  # the stale buffer, until dropped
    s.drop_chain_beta_grads()
    assert blk.ln.bias.grad is None and s.blocks[1].ln.bias.grad is None
    # the teacher: quantized in the paper's MX arms only, its output bf16 and
    # close to fp32's (each rounding relative 2^-8 or, in E4M3, 2^-4)
    t = mx_sim.Teacher(64, 2)
    ref = t(x)
    q = t(x, mx_proxy.recipe_of("low", "paper"))
    assert _is_bf16(q) and not torch.equal(q, ref)
    assert (q - ref).norm() < 0.15 * ref.norm()
    assert torch.equal(t(x, mx_proxy.recipe_of("low", "torchao")), ref)
    assert torch.equal(t(x, mx_proxy.recipe_of("high", "paper")), ref)
    # their teacher GELU: the tanh approximation with bf16 coefficients, every op rounded
    v = torch.linspace(-6, 6, 2001)
    assert ((mx_paper.teacher_gelu(v) - F.gelu(v, approximate="tanh")).abs() <= 0.02 + 0.01 * v.abs()).all()


def _ckpt_state(path):
    ck = torch.load(path, weights_only=False)
    return ck["t"], ck["student"], ck["opt"]


def _same(a, b):
    """Equal bit for bit, through nested dicts and lists of tensors and numbers."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a.view(-1).view(torch.uint8)
                                                                                 if a.dtype != torch.uint8 else a,
                                                                                 b.view(-1).view(torch.uint8)
                                                                                 if b.dtype != torch.uint8 else b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("emulation", ["torchao", "paper"])
@pytest.mark.parametrize("arm", ["low", "default"])
def test_a_run_stopped_and_resumed_is_the_uninterrupted_run(tmp_path, arm, emulation):
    """Stopped at a checkpoint, resumed: the same trace, grants, result and
    final state (model, moments, controller) bit for bit. At lr 0.1 the
    default grants promotions early in the run; the stop is the first
    checkpoint one of them is still running at, so the promotion state
    crosses it (the low arm stops at step 30)."""
    if arm == "default":
        pytest.importorskip("gnmr", reason="the default arm needs the gnmr package (pip install ./python)")
    common = ["--arms", arm, "--emulation", emulation, "--width", "64", "--depth", "2", "--batch", "128",
              "--lr", "0.1", "--steps", "60", "--seeds", "7", "--ckpt-every", "10"]
    whole = mx_proxy.parser().parse_args(common + ["--out", str(tmp_path / "whole")])
    row = mx_proxy.run(arm, 7, whole)
    name = mx_proxy.run_name(arm, emulation, 7)
    stop = 30
    if arm == "default":
        eps = json.loads((tmp_path / "whole" / "grants" / f"{name}.json").read_text())["episodes"]
        spanned = [c for c in range(10, 60, 10) if any(start <= c < start + n for _, start, n in eps)]
        assert spanned, eps  # some promotion is running at a checkpoint
        stop = spanned[0]
    cut = mx_proxy.parser().parse_args(common + ["--out", str(tmp_path / "cut"), "--stop-after", str(stop)])
    assert mx_proxy.run(arm, 7, cut) is None
    assert _ckpt_state(tmp_path / "cut" / "ckpt" / f"{name}.pt")[0] == stop
    with pytest.raises(RuntimeError, match="--resume"):
        mx_proxy.run(arm, 7, cut)  # a checkpoint is never overwritten silently
    cut.stop_after, cut.resume = 0, True
    row2 = mx_proxy.run(arm, 7, cut)
    assert {k: v for k, v in row.items() if k != "wall_s"} == {k: v for k, v in row2.items() if k != "wall_s"}
    for sub in ("traces", "grants") if arm == "default" else ("traces",):
        ext = "json" if sub == "grants" else "csv"
        assert (tmp_path / "whole" / sub / f"{name}.{ext}").read_bytes() == \
            (tmp_path / "cut" / sub / f"{name}.{ext}").read_bytes()
    a, b = _ckpt_state(tmp_path / "whole" / "ckpt" / f"{name}.pt"), _ckpt_state(tmp_path / "cut" / "ckpt" / f"{name}.pt")
    assert a[0] == b[0] == 60 and _same(a[1], b[1]) and _same(a[2], b[2])


def test_a_results_file_of_the_old_columns_is_refused(tmp_path):
    (tmp_path / "results.csv").write_text("arm,seed,diverged_at,final_loss,high_share,grants,steps,width,depth,"
                                          "batch,lr,device,wall_s\n")
    with pytest.raises(SystemExit, match="columns differ"):
        mx_proxy.main(["--arms", "high", "--width", "64", "--depth", "1", "--steps", "2", "--out", str(tmp_path)])


def test_a_short_run_of_every_arm_under_the_paper_emulation(tmp_path):
    """The smoke under --emulation paper (40 steps, in this process): every
    arm runs, rows and files are named by emulation, high is recorded once
    for both emulations, and the -random twin reads the paper default's grants."""
    pytest.importorskip("gnmr", reason="the gnmr arms need the gnmr package (pip install ./python)")
    arms = "high,low,low-rceil,low-ln-high,stabilizer,default,default-random"
    base = ["--width", "64", "--depth", "2", "--batch", "128", "--lr", "1e-3", "--steps", "40", "--seeds", "7",
            "--out", str(tmp_path)]
    assert mx_proxy.main(["--arms", arms, "--emulation", "paper"] + base) == 0
    assert mx_proxy.main(["--arms", "high,low", "--emulation", "torchao"] + base) == 0
    rows = list(csv.DictReader(open(tmp_path / "results.csv")))
    got = sorted((r["arm"], r["emulation"]) for r in rows)
    assert got == sorted([(a, "paper") for a in arms.split(",") if a != "high"] + [("high", "none"), ("low", "torchao")])
    for r in rows:
        assert r["steps"] == "40" and r["diverged_at"] == "" and 0.0 < float(r["final_loss"]) < 10.0
        name = mx_proxy.run_name(r["arm"], r["emulation"] if r["emulation"] != "none" else "paper", 7)
        assert len((tmp_path / "traces" / f"{name}.csv").read_text().splitlines()) == 41
    assert (tmp_path / "grants" / "default.paper-7.json").exists()
    assert (tmp_path / "traces" / "low-7.csv").read_text() != (tmp_path / "traces" / "low.paper-7.csv").read_text()


def test_a_run_resumed_with_the_compiled_quantizer_is_the_eager_run(tmp_path, monkeypatch):
    """The CPU pilot's runs fuse the quantizer (--compile); a run started
    eager and resumed compiled (as the queue's runs were when it switched)
    ends bit for bit where the eager run ends. Skipped where torch.compile
    has no toolchain (mx_sim.use_compiled then keeps eager)."""
    # use_compiled swaps module globals: monkeypatch puts them back
    monkeypatch.setattr(mx_sim, "_quantize", mx_sim._quantize)
    monkeypatch.setattr(mx_paper, "_quantize", mx_paper._quantize)
    common = ["--arms", "low", "--emulation", "paper", "--width", "64", "--depth", "2", "--batch", "128",
              "--lr", "0.1", "--steps", "30", "--seeds", "7", "--ckpt-every", "10"]
    name = mx_proxy.run_name("low", "paper", 7)
    whole = mx_proxy.parser().parse_args(common + ["--out", str(tmp_path / "whole")])
    row = mx_proxy.run("low", 7, whole)
    cut = mx_proxy.parser().parse_args(common + ["--out", str(tmp_path / "cut"), "--stop-after", "10"])
    assert mx_proxy.run("low", 7, cut) is None
    cut.stop_after, cut.resume, cut.compile = 0, True, True
    row2 = mx_proxy.run("low", 7, cut)
    if row2["device"] != "cpu+compiled":
        pytest.skip("torch.compile gave no fused quantizer here (no toolchain, or not eager's bits)")
    assert mx_paper._quantize is not mx_paper.mx_quantize_paper
    assert {k: v for k, v in row.items() if k not in ("wall_s", "device")} == \
        {k: v for k, v in row2.items() if k not in ("wall_s", "device")}
    a, b = _ckpt_state(tmp_path / "whole" / "ckpt" / f"{name}.pt"), _ckpt_state(tmp_path / "cut" / "ckpt" / f"{name}.pt")
    assert a[0] == b[0] == 30 and _same(a[1], b[1]) and _same(a[2], b[2])
