#!/usr/bin/env python3
"""trainer_cost.py — what a Hugging Face Trainer user pays for gnmr: the
time per optimizer step of a transformers Llama (about 100M parameters at
the default size, built from a config) under transformers.Trainer, in bf16
(and with torchao float8 where the GPU supports it), four arms in one
process, interleaved:

  plain      torch AdamW (fused on CUDA), no gnmr
  callback   torch AdamW + GnmrCallback (the default preset): the controller
             between backward and the optimizer step; on CUDA it waits for
             the step's decisions (docs/python.md, "Where the host waits")
  adamw      gnmr.optim.AdamW (the default preset) as the Trainer's optimizer:
             no host sync
  adamw-ref  torch.optim.AdamW (fused on CUDA) passed the same way: the
             reference for "adamw"

    python bench/python/trainer_cost.py [--device cuda] [--steps 50] [--reps 3] [--float8]
        [--hidden 768 --layers 12]

Prints the median seconds per step of each arm over --reps repetitions of
--steps steps (after 5 warm-up steps, timed by the Trainer's own clock:
train_runtime / max_steps, with the warm-up run apart) and each arm's
ratio to its reference (callback / plain, adamw / adamw-ref). Goals
(docs/performance.md): callback at most 1.02x, adamw at most 1.01x.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch


def build(a):
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=a.hidden, intermediate_size=4 * a.hidden,
                                   num_hidden_layers=a.layers, num_attention_heads=a.hidden // 64,
                                   num_key_value_heads=a.hidden // 64, max_position_embeddings=a.seq)
    model = transformers.LlamaForCausalLM(cfg).to(a.device)
    if a.float8:
        from torchao.float8 import convert_to_float8_training
        convert_to_float8_training(model, module_filter_fn=lambda m, n: n != "lm_head")
    return model


def run(arm, a):
    import transformers
    import gnmr
    from gnmr.integrations.hf import GnmrCallback

    model = build(a)
    g = torch.Generator().manual_seed(1)
    data = [{"input_ids": x, "labels": x} for x in torch.randint(0, 32000, (a.batch * (a.steps + 5), a.seq), generator=g)]
    fused = a.device == "cuda"
    kw, cbs = {}, []
    if arm == "callback":
        cbs.append(GnmrCallback())
    elif arm == "adamw":
        if a.float8:
            from gnmr.integrations import torchao as gnmr_ao
            ctl = gnmr.Controller(gnmr_ao.operator_units(model))
        else:
            ctl = gnmr.Controller(model)
        opt = gnmr.optim.AdamW(model.parameters(), lr=1e-4, controller=ctl)
        kw["optimizers"] = (opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0))
    elif arm == "adamw-ref":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused)
        kw["optimizers"] = (opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0))
    args = transformers.TrainingArguments(
        output_dir="/tmp/gnmr-trainer-cost", max_steps=a.steps + 5, per_device_train_batch_size=a.batch,
        learning_rate=1e-4, max_grad_norm=1.0, bf16=a.device == "cuda", logging_strategy="no", save_strategy="no",
        report_to=[], use_cpu=a.device == "cpu", disable_tqdm=True, optim="adamw_torch_fused" if fused else "adamw_torch",
        dataloader_num_workers=0)
    times = []

    class Clock(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, **k):
            if a.device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter())

    transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=cbs + [Clock()], **kw).train()
    if a.device == "cuda":
        torch.cuda.synchronize()
    times.append(time.perf_counter())
    steady = times[5:]
    return (steady[-1] - steady[0]) / (len(steady) - 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--float8", action="store_true")
    a = ap.parse_args()
    arms = ["plain", "callback", "adamw-ref", "adamw"]
    res = {x: [] for x in arms}
    for _ in range(a.reps):
        for arm in arms:
            res[arm].append(run(arm, a))
    med = {x: statistics.median(v) for x, v in res.items()}
    params = sum(p.numel() for p in build(a).parameters()) / 1e6
    dev = torch.cuda.get_device_name() if a.device == "cuda" else "cpu"
    print(f"Llama {params:.0f}M params, batch {a.batch} x {a.seq}, {'float8' if a.float8 else 'bf16' if a.device == 'cuda' else 'fp32'}, "
          f"{dev}, torch {torch.__version__}")
    for x in arms:
        print(f"  {x:10s} {1e3 * med[x]:8.2f} ms/step  ({', '.join(f'{1e3 * v:.2f}' for v in res[x])})")
    print(f"  callback / plain   {med['callback'] / med['plain']:.4f}   (goal <= 1.02)")
    print(f"  adamw / adamw-ref  {med['adamw'] / med['adamw-ref']:.4f}   (goal <= 1.01)")


if __name__ == "__main__":
    main()
