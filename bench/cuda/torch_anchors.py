#!/usr/bin/env python3
"""PyTorch anchors for the GPU benchmarks (docs/record/performance-gpu.md), measured in the
same session as gnmr_bench_cuda so the two can be compared directly.

    python3 bench/cuda/torch_anchors.py [--reps 20]

Same layouts as bench/cuda/layouts.hpp: torch._foreach_norm (fp32, bf16) on
llama-1.26B and 10k x 64K, and clip_grad_norm_(foreach) + AdamW(fused=True)
on llama-1.26B. Times are CUDA-event medians after warm-up; random inputs.
Prints lines "ANCHOR,<work>,<layout>,<ms>" and a markdown table last.
"""
import argparse
import statistics

import torch


def llama(vocab, d, ffn, layers):
    shapes = [(vocab, d)]
    for _ in range(layers):
        shapes += [(d, d)] * 4 + [(ffn, d)] * 3 + [(d,), (d,)]
    return shapes + [(d,), (vocab, d)]


LAYOUTS = {
    "llama-1.26B": llama(32000, 2048, 5632, 22),
    "10k x 64K": [(65536,)] * 10000,
}


def median_ms(fn, reps, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    rows = []

    def report(work, layout, ms):
        rows.append((work, layout, ms))
        print(f"ANCHOR,{work},{layout},{ms:.4f}", flush=True)

    dev = torch.device("cuda")
    for name, shapes in LAYOUTS.items():
        for dtype in (torch.float32, torch.bfloat16):
            grads = [torch.randn(s, device=dev, dtype=dtype) * 0.01 for s in shapes]
            report(f"torch._foreach_norm {str(dtype)[6:]}", name,
                   median_ms(lambda: torch._foreach_norm(grads), args.reps))
            del grads
            torch.cuda.empty_cache()

    shapes = LAYOUTS["llama-1.26B"]
    params = [torch.nn.Parameter(torch.randn(s, device=dev) * 0.02) for s in shapes]
    for p in params:
        p.grad = torch.randn_like(p) * 0.01
    opt = torch.optim.AdamW(params, lr=1e-6, fused=True)
    report("AdamW(fused=True).step()", "llama-1.26B", median_ms(opt.step, args.reps))

    def clip_and_step():
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        opt.step()

    report("clip_grad_norm_ + fused AdamW", "llama-1.26B", median_ms(clip_and_step, args.reps))
    report("clip_grad_norm_(foreach)", "llama-1.26B",
           median_ms(lambda: torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True), args.reps))

    print(f"\ntorch {torch.__version__} on {torch.cuda.get_device_name()}")
    print("| torch anchor | layout | median ms |\n|---|---|---:|")
    for work, layout, ms in rows:
        print(f"| {work} | {layout} | {ms:.3f} |")


if __name__ == "__main__":
    main()
