"""The noise-floor trigger from Python: each NVFP4 weight gradient's
stochastic-rounding noise (gnmr.integrations.nvfp4.noise_partials) against a
Monte-Carlo measurement of the same rounding, and the preset
gnmr-noise-floor stepped with it (Controller.step(aux=...)): the units whose
gradient is under sqrt(3) times its noise are promoted, the others not, a
step without the noise is refused and changes nothing. Skipped without
torchao (the NVFP4 quantizer).
"""
from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("torchao.prototype.mx_formats.nvfp4_tensor")

import gnmr  # noqa: E402
from gnmr.integrations import _nvfp4_quant as q  # noqa: E402
from gnmr.integrations import nvfp4  # noqa: E402


def test_variance_is_the_rounding_error_and_the_bits_are_unchanged():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 64, generator=g) * torch.logspace(-3, 2, 64)
    q1 = q.quantize_1d(x, "sr", torch.Generator().manual_seed(11))
    q2, var = q.quantize_1d_sr_with_variance(x, torch.Generator().manual_seed(11))
    assert torch.equal(q1, q2)
    assert (var >= 0).all() and torch.isfinite(var).all()
    # E[(q - x)^2] per element, measured over many draws, against var.
    r = 4000
    err2 = torch.zeros_like(x, dtype=torch.float64)
    for i in range(r):
        qi = q.quantize_1d(x, "sr", torch.Generator().manual_seed(1000 + i))
        err2 += (qi.double() - x.double()) ** 2
    # The RNE part of the rule (the block scales) is deterministic, so the
    # only randomness is the element's draw; the measured mean square error
    # is var up to sampling error (aggregate over 256 elements: ~1%).
    measured = err2 / r
    assert measured.sum().item() == pytest.approx(var.double().sum().item(), rel=0.03)
    busy = var > var.max() * 0.05
    assert busy.sum() > 20
    rel = (measured[busy] / var[busy].double() - 1).abs()
    assert rel.median().item() < 0.06  # per element: 4000 draws, ~sqrt(2/4000) relative spread


def _layer_and_grads(coherent: bool, seed: int = 0):
    torch.manual_seed(seed)
    lin = torch.nn.Linear(32, 48)
    layer = nvfp4.convert_to_nvfp4_training(torch.nn.Sequential(lin), seed=seed)[0]
    nvfp4.track_noise(layer)
    x = torch.randn(64, 32)
    # Coherent: every token pushes the weight the same way (a large mean
    # gradient); incoherent: random signs per token, whose sum cancels and
    # leaves the rounding noise on top.
    g = torch.randn(1, 48).expand(64, 48).clone() if coherent else torch.randn(64, 48)
    return layer, x, g


@pytest.mark.parametrize("coherent", [True, False])
def test_layer_noise_matches_monte_carlo(coherent):
    layer, x, gy = _layer_and_grads(coherent)
    ws = []
    noise = None
    for r in range(300):
        nvfp4.set_step(layer, r)  # a new stochastic-rounding stream, the noise restarted
        layer.weight.grad = None
        (layer(x) * gy).sum().backward()
        n = layer.nvfp4_noise.item()
        assert noise is None or n == pytest.approx(noise, rel=1e-6)  # depends on dY and X only
        noise = n
        ws.append(layer.weight.grad.double().clone())
    w = torch.stack(ws)
    measured = ((w - w.mean(0)) ** 2).sum((1, 2)).sum().item() / (len(ws) - 1)
    assert noise > 0
    assert measured == pytest.approx(noise, rel=0.08)


def test_noise_partials_sum_micro_batches_and_restart():
    layer, x, gy = _layer_and_grads(False)
    model = torch.nn.Sequential(layer)
    ctl = gnmr.Controller({"w": [layer.weight], "b": [layer.bias]}, preset="gnmr-noise-floor")
    nvfp4.set_step(model, 1)
    (layer(x) * gy).sum().backward()
    one = layer.nvfp4_noise.item()
    (layer(x) * gy).sum().backward()  # a second micro-batch, fresh draws, the same variance
    aux = nvfp4.noise_partials(model, ctl)
    assert aux.dtype == torch.float32 and aux.shape == (2,)
    assert aux[0].item() == pytest.approx(2 * one, rel=1e-6)
    assert aux[1].item() == 0.0  # the bias gradient is not rounded
    assert layer.nvfp4_noise.item() == 0.0  # taken
    assert nvfp4.noise_partials(model, ctl).sum().item() == 0.0


def test_controller_promotes_the_units_under_their_floor():
    torch.manual_seed(0)
    a = torch.nn.Linear(32, 48, bias=False)
    b = torch.nn.Linear(32, 48, bias=False)
    model = nvfp4.convert_to_nvfp4_training(torch.nn.ModuleDict({"a": a, "b": b}), seed=1)
    nvfp4.track_noise(model)
    la, lb = model["a"], model["b"]
    ctl = gnmr.Controller({"a": [la.weight], "b": [lb.weight]}, preset="gnmr-noise-floor",
                          warmup=0, max_o=2)
    assert ctl.needs_aux
    # Unit a: every token pushes its weight the same way. Unit b: tokens in
    # pairs with the same input and opposite output gradients (plus a small
    # common part): its exact gradient nearly cancels, its rounding noise
    # does not (the pair's draws are independent): under its floor.
    x0 = torch.randn(32, 32)
    x = torch.cat([x0, x0])
    coherent = torch.randn(1, 48).expand(64, 48)
    d0 = torch.randn(32, 48)
    pairs = torch.cat([d0, -d0]) + 0.01 * torch.randn(1, 48)
    nvfp4.set_step(model, 1)
    ((la(x) * coherent).sum() + (lb(x) * pairs).sum()).backward()
    grads = [la.weight.grad.clone(), lb.weight.grad.clone()]
    before = ctl.state_dict()
    with pytest.raises(RuntimeError, match="aux"):
        ctl.step()
    assert ctl.steps_done == 0 and torch.equal(la.weight.grad, grads[0])
    assert torch.equal(ctl.state_dict()["blob"], before["blob"])
    with pytest.raises(ValueError, match="aux"):
        ctl.step(aux=torch.zeros(3))
    aux = nvfp4.noise_partials(model, ctl)
    ctl.step(aux=aux)
    r = ctl.reports()
    norms = torch.stack([g.double().norm() for g in grads])
    floors = math.sqrt(3) * aux.double().sqrt()
    # The rule itself, on these two units: n < sqrt(3) a.
    want = norms < floors
    assert bool(want[1]) and not bool(want[0])  # the cases are what they are meant to be
    flags = r["flags"].tolist()
    assert [bool(f & gnmr.Flag.PROMOTE) for f in flags] == want.tolist()
    assert r["risk"][1].item() == pytest.approx((floors[1] / norms[1]).item(), rel=1e-5)
    assert ctl.promoted("b") and not ctl.promoted("a")
    # Nothing is clipped: the gradients are the ones the backward produced.
    assert torch.equal(la.weight.grad, grads[0]) and torch.equal(lb.weight.grad, grads[1])


def test_other_presets_ignore_aux():
    torch.manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(8)) for _ in range(3)]
    c1 = gnmr.Controller({f"p{i}": [p] for i, p in enumerate(ps)}, preset="gnmr-calibrated")
    c2 = gnmr.Controller({f"p{i}": [p] for i, p in enumerate(ps)}, preset="gnmr-calibrated")
    assert not c1.needs_aux
    for t in range(15):
        for p in ps:
            p.grad = torch.randn(8) * (50.0 if t == 12 else 1.0)
        g = [p.grad.clone() for p in ps]
        c1.step()
        for p, gi in zip(ps, g):
            p.grad = gi
        c2.step(aux=torch.rand(3))
    assert torch.equal(c1.state_dict()["blob"], c2.state_dict()["blob"])


def test_a_noise_floor_run_resumes_bit_for_bit():
    def build():
        torch.manual_seed(0)
        model = nvfp4.convert_to_nvfp4_training(
            torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU(), torch.nn.Linear(32, 16)), seed=2)
        # noise_c 12: at initialisation these weight gradients are about 8
        # times their rounding noise, so units cross the floor and the run
        # has promotions to carry across the checkpoint.
        ctl = gnmr.Controller(model, "gnmr-noise-floor", warmup=1, max_o=1, lock=2, noise_c=12.0)
        nvfp4.track_noise(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        return model, ctl, opt

    g = torch.Generator().manual_seed(5)
    data = [(torch.randn(32, 32, generator=g), torch.randn(32, 16, generator=g)) for _ in range(12)]

    def train(model, ctl, opt, steps):
        promoted = 0
        for t in steps:
            nvfp4.set_step(model, t)
            opt.zero_grad()
            x, y = data[t]
            torch.nn.functional.mse_loss(model(x), y).backward()
            ctl.step(aux=nvfp4.noise_partials(model, ctl))
            promoted += len(ctl.promoted_units())
            opt.step()
        return promoted

    m1, c1, o1 = build()
    promoted = train(m1, c1, o1, range(12))
    m2, c2, o2 = build()
    train(m2, c2, o2, range(6))
    state = {"model": m2.state_dict(), "optim": o2.state_dict(), "gnmr": c2.state_dict()}
    m3, c3, o3 = build()
    m3.load_state_dict(state["model"])
    o3.load_state_dict(state["optim"])
    c3.load_state_dict(state["gnmr"])
    train(m3, c3, o3, range(6, 12))
    assert promoted > 0  # the run had promotions to carry across the checkpoint
    assert torch.equal(c1.state_dict()["blob"], c3.state_dict()["blob"])
    for p, q_ in zip(m1.parameters(), m3.parameters()):
        assert torch.equal(p, q_)


def test_set_aux_feeds_the_guarded_adamw_step():
    torch.manual_seed(0)
    model = nvfp4.convert_to_nvfp4_training(torch.nn.Sequential(torch.nn.Linear(32, 32)), seed=3)
    nvfp4.track_noise(model)
    ctl = gnmr.Controller(model, "gnmr-noise-floor", warmup=0)
    opt = gnmr.optim.AdamW(model.parameters(), lr=1e-3, controller=ctl)
    x, y = torch.randn(16, 32), torch.randn(16, 32)
    torch.nn.functional.mse_loss(model(x), y).backward()
    w = model[0].weight.detach().clone()
    with pytest.raises(RuntimeError, match="set_aux"):
        opt.step()
    assert torch.equal(model[0].weight, w) and ctl.steps_done == 0  # nothing changed
    with pytest.raises(TypeError):
        ctl.set_aux([1.0, 2.0])
    ctl.set_aux(nvfp4.noise_partials(model, ctl))
    opt.step()
    assert ctl.steps_done == 1 and not torch.equal(model[0].weight, w)
    with pytest.raises(RuntimeError):  # used by that step only
        opt.step()


def test_a_layer_computes_its_noise_only_while_it_tracks_it():
    """Untracked (the default), a layer adds up no noise and gives the same
    gradients; noise_partials then refuses, naming the layer, before taking
    anything. enable_promotion turns tracking on for a controller that reads
    aux, not for one that does not."""
    from gnmr.integrations import torchao as gnmr_ao

    def run(track):
        layer, x, gy = _layer_and_grads(False)
        nvfp4.track_noise(layer, track)
        nvfp4.set_step(layer, 3)
        (layer(x) * gy).sum().backward()
        return layer, layer.weight.grad.clone()

    on, g_on = run(True)
    off, g_off = run(False)
    assert torch.equal(g_on, g_off)  # the estimate changes no bit
    assert on.nvfp4_noise.item() > 0 and off.nvfp4_noise.item() == 0.0
    model = torch.nn.Sequential(off)
    ctl = gnmr.Controller({"w": [off.weight]}, preset="gnmr-noise-floor")
    with pytest.raises(RuntimeError, match="track_noise"):
        nvfp4.noise_partials(model, ctl)
    assert nvfp4.track_noise(model) == 1 and off.nvfp4_track_noise

    def converted():
        torch.manual_seed(0)
        return nvfp4.convert_to_nvfp4_training(torch.nn.Sequential(torch.nn.Linear(32, 32)), seed=1)

    for preset, tracks in (("gnmr-noise-floor", True), ("default", False)):
        m = converted()
        assert not m[0].nvfp4_track_noise
        gnmr_ao.enable_promotion(m, gnmr.Controller(gnmr_ao.operator_units(m), preset))
        assert m[0].nvfp4_track_noise == tracks
