#!/usr/bin/env python3
"""torchao_float8.py — GNMR's promotion on torchao's float8 training: an MLP
whose linear layers are torchao Float8Linear (tensorwise dynamic scaling),
one gnmr unit per operator, gnmr.optim.AdamW; a gradient spike on one
operator gets it granted, and it runs its GEMMs in high precision for the
lock, then returns to float8. Runs on the CPU with torch 2.13 (torch's
float8 _scaled_mm has a CPU kernel) and on CUDA (sm_89+).

    .venv/bin/python examples/python/torchao_float8.py [--steps 60] [--device cpu]
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

# CPUs with AVX512-FP16: torch 2.13 sends CPU float8 GEMMs to oneDNN's
# reference kernel (~300x slower); without oneDNN, the same bits, fast.
torch.backends.mkldnn.enabled = False
from torchao.float8 import convert_to_float8_training

import gnmr
from gnmr.integrations import torchao as gnmr_ao


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--spike-at", type=int, default=40)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 256),
                                torch.nn.GELU(), torch.nn.Linear(256, 64)).to(a.device)
    convert_to_float8_training(model)  # every nn.Linear -> Float8Linear
    ctl = gnmr.Controller(gnmr_ao.operator_units(model))  # preset "default"
    print("float8 operators under gnmr:", gnmr_ao.enable_promotion(model, ctl))
    opt = gnmr.optim.AdamW(model.parameters(), lr=1e-3, controller=ctl)
    w = torch.randn(64, 64, device=a.device) / 8
    for t in range(a.steps):
        x = torch.randn(128, 64, device=a.device)
        high = [n for n, m in gnmr_ao.float8_modules(model).items() if gnmr_ao.is_promoted(m)]
        loss = F.mse_loss(model(x), torch.tanh(x @ w))
        opt.zero_grad()
        loss.backward()
        if t == a.spike_at:
            model[2].weight.grad.mul_(1e3)
        opt.step()
        s = ctl.last_summary
        if high or s.granted or t % 20 == 0:
            print(f"step {t:3d}  loss {loss.item():.4f}  high precision: {high or '-'}"
                  f"  granted {s.granted}  max ratio {s.max_ratio:.1f}")


if __name__ == "__main__":
    main()
