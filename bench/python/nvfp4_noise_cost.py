"""What the noise-floor trigger's estimate costs in the NVFP4 emulation
(docs/record/nvfp4.md, "The noise in each weight gradient"): the
weight-gradient path of one NVFP4Linear backward (quantize dY^T with
stochastic rounding and X^T to nearest, then the GEMM) with and without the
per-element variance and its two reductions; the bits of dW are checked to
be the same. CPU time of this process (time.process_time: what other work
on the machine does not inflate as much as wall time), the two paths called
alternately, medians of --calls calls each (31) after 3 warm-ups, one
thread.

    python bench/python/nvfp4_noise_cost.py [--tokens 2048] [--out 256] [--in 256] [--repeat 3] [--calls 31]
"""
from __future__ import annotations

import argparse
import time

import torch

from gnmr.integrations import _nvfp4_quant as q


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--out", type=int, default=256)
    ap.add_argument("--in", dest="inp", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3, help="measurements, each the medians of --calls alternated calls")
    ap.add_argument("--calls", type=int, default=31, help="timed calls of each path a measurement")
    a = ap.parse_args()
    if a.calls < 1 or a.repeat < 1:
        ap.error("--calls and --repeat must be positive")
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    dyt = torch.randn(a.out, a.tokens, generator=g)
    xt = torch.randn(a.inp, a.tokens, generator=g)

    def plain():
        dq = q.quantize_1d(dyt, "sr", torch.Generator().manual_seed(1))
        return dq @ q.quantize_1d(xt).t()

    def with_noise():
        dq, var = q.quantize_1d_sr_with_variance(dyt, torch.Generator().manual_seed(1))
        xq = q.quantize_1d(xt)
        return dq @ xq.t(), (var.sum(0) * (xq * xq).sum(0)).sum()

    def medians():
        tp, tn = [], []
        for _ in range(a.calls + 3):
            for f, ts in ((plain, tp), (with_noise, tn)):
                t0 = time.process_time()
                f()
                ts.append(time.process_time() - t0)
        return [sorted(ts[3:])[len(ts[3:]) // 2] for ts in (tp, tn)]

    if not torch.equal(plain(), with_noise()[0]):
        raise SystemExit("nvfp4_noise_cost: the weight gradient changed with the estimate")
    for _ in range(a.repeat):
        p, n = medians()
        print(f"tokens {a.tokens} out {a.out} in {a.inp}: wgrad path {p * 1e3:.1f} ms, "
              f"with the noise estimate {n * 1e3:.1f} ms ({(n / p - 1) * 100:+.1f}%)")


if __name__ == "__main__":
    main()
