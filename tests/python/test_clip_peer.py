"""The `clip` preset against torch's own clip_grad_norm_ (its foreach path,
torch/nn/utils/clip_grad.py: total = the norm of the per-tensor norms,
coef = max_norm / (total + 1e-6), clamped at 1, every gradient multiplied
by it), on the same gradients, with large and small spikes: the same
decision on every step (clip or not), the same coefficient within fp32
rounding, the same clipped gradients. docs/presets.md, clip.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import gnmr
from conftest import batch, make_model

SPIKES = {5: 30.0, 9: 1e3, 14: 0.5, 20: 3.0}


def test_clip_preset_is_clip_grad_norm_foreach():
    a, b = make_model(3), make_model(3)
    ctl = gnmr.Controller(a, "clip", max_norm=5.0)  # above the usual norm (~2.8): spikes clip
    clipped = 0
    for t in range(30):
        x, y = batch(t)
        for m in (a, b):
            m.zero_grad()
            (F.mse_loss(m(x), y) * SPIKES.get(t, 1.0)).backward()
        ctl.step()
        total = torch.nn.utils.clip_grad_norm_(b.parameters(), 5.0, foreach=True)
        coef = min(5.0 / (float(total) + 1e-6), 1.0)
        got = float(ctl.decisions().scale[0])
        assert abs(got - coef) <= 2e-6 * coef, (t, got, coef)
        assert bool(ctl.decisions().flags[0] & gnmr.Flag.TRIGGERED) == (coef < 1.0), t
        clipped += coef < 1.0
        for p, q in zip(a.parameters(), b.parameters()):
            assert torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-7), t
        with torch.no_grad():  # one SGD step from torch's gradients on both: the same weights
            for p, q in zip(a.parameters(), b.parameters()):
                q.add_(q.grad, alpha=-1e-2)
                p.copy_(q)
    assert 3 <= clipped < 30  # the rule acted, and not on every step
