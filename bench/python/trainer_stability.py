#!/usr/bin/env python3
"""trainer_stability.py — gnmr's stability benchmark on a stack that is not
ours: a small Llama from `transformers` (config only), trained on the
fortunes text through `transformers.Trainer`, its linear layers in torchao's
float8 (tensorwise dynamic scaling, on the CPU), under the benchmark's
operator-outlier stressor. Protocol and results: docs/record/stability.md, "On the
Hugging Face stack".

Arms (every arm meets the same data, initial weights and events):
  low         float8 linears, the recipe alone (AdamW, warm-up + cosine,
              weight decay 0.1 on matrices, the Trainer's clip at 1.0)
  high        the same model without float8 (fp32 GEMMs)
  PRESET      low + GnmrCallback(PRESET) over one unit per operator: any
              gnmr preset name, layered ("stabilizer+gnmr-calibrated") or
              "default"; operators it promotes run in high precision for
              their lock (presets without promotion: "stabilizer", ...)
  PRESET-random  the stabilizer with PRESET's promotion episodes of the
              same seed moved to random operators and steps (the same
              high-precision share without PRESET's choice); PRESET's run
              must be in OUT/results.csv (it is run first)

Models (--model), each from a config, hidden 64, 2 layers, 4 heads, byte
vocabulary: llama (LlamaForCausalLM: RMSNorm, SwiGLU, rotary), neox
(GPTNeoXForCausalLM: LayerNorm, GELU MLP, parallel residual, fused QKV),
qwen2 (Llama's layout, q/k/v biases, grouped-query attention), opt
(LayerNorm, ReLU MLP, learned positions), gemma (GeGLU, RMSNorm with
1 + w, scaled embeddings), phi3 (fused qkv and gate_up). The recipe:
--lr, --warmup (linear, then cosine), --steps, --batch.
--per-100 0 turns the stressor off (false alarms: every promotion serves
nothing).

Stressor (demo/stress.hpp's operator-outliers, the same parameters): events
at `--per-100` per 100 steps from step 30, each multiplying 4 input channels
of one random float8 operator's input by a log-uniform factor in
[factor_min, factor_max] for 1-5 consecutive steps; drawn from the seed.

    python bench/python/trainer_stability.py --arms low,high,gnmr,stabilizer \
        --seeds 101-120 --out build/trainer-stability [--jobs 2]

Writes one CSV row per run (arm, seed, final validation loss, promoted
operator-steps and their share, promotion episodes, detection recall and
precision, wall seconds) to OUT/results.csv and each run's promotion
episodes to OUT/episodes/; runs already there are not run again.
--summary prints paired differences with bootstrap 95% intervals
(--pairs A:B,... adds arm-minus-arm rows).
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import random
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

SEQ = 64


def parse_seeds(s: str):
    out = []
    for part in s.split(","):
        if "-" in part:
            a, b = part.split("-")
            out += list(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return out


def load_bytes(path: str):
    import torch

    p = Path(path)
    files = sorted(f for f in p.iterdir() if f.is_file() and not f.suffix) if p.is_dir() else [p]
    data = b"".join(f.read_bytes() for f in files)
    return torch.tensor(list(data), dtype=torch.long)


def schedule(seed: int, steps: int, ops, per_100: float, fmin: float, fmax: float):
    """[(op name, start, len, factor, channels)], the demo's rules."""
    rng = random.Random(seed * 7919 + 17)
    n = round(per_100 * steps / 100)
    ev = []
    for _ in range(n):
        name, width = ops[rng.randrange(len(ops))]
        length = rng.randint(1, 5)
        factor = math.exp(rng.uniform(math.log(fmin), math.log(fmax)))
        for _ in range(1000):
            start = rng.randint(30, steps - 5)
            if all(s != start and not (o == name and start < s + ln and s < start + length)
                   for o, s, ln, _, _ in ev):
                break
        chans = sorted(rng.sample(range(width), 4))
        ev.append((name, start, length, factor, chans))
    return sorted(ev, key=lambda e: e[1])


def run(arm: str, seed: int, a) -> dict:
    import torch
    import transformers
    from torchao.float8 import convert_to_float8_training

    import gnmr
    from gnmr.integrations import torchao as gnmr_ao
    from gnmr.integrations.hf import GnmrCallback

    torch.set_num_threads(1)
    # On CPUs with AVX512-FP16, torch 2.13 sends float8 GEMMs (torch._scaled_mm)
    # to oneDNN's reference kernel (~300x slower); without oneDNN the same
    # call returns the same bits: the run's speed then does not depend on
    # which CPU it lands on.
    torch.backends.mkldnn.enabled = False
    t0 = time.time()
    data = load_bytes(a.text)
    n_val = 64 * SEQ
    train, val = data[:-n_val], data[-n_val:].view(-1, SEQ)
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(train) - SEQ, (a.steps * a.batch,), generator=g)
    xs = torch.stack([train[s:s + SEQ] for s in starts.tolist()])

    class DS(torch.utils.data.Dataset):
        def __len__(self):
            return len(xs)

        def __getitem__(self, i):
            return {"input_ids": xs[i], "labels": xs[i]}

    torch.manual_seed(seed)
    model = build_model(a.model)
    lin = [(n, m.in_features) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    events = schedule(seed, a.steps, lin, a.per_100, a.factor_min, a.factor_max)
    step = {"t": 0}
    mods = dict(model.named_modules())
    for name, width in lin:
        def hook(mod, args, name=name, width=width):
            for o, s, ln, f, ch in events:
                if o == name and s <= step["t"] < s + ln:
                    gain = torch.ones(width)
                    gain[ch] = f
                    return (args[0] * gain,)
            return None
        mods[name].register_forward_pre_hook(hook)
    if arm != "high":
        convert_to_float8_training(model)
    callbacks = []
    ctl = None
    table = None  # (path, t) -> promoted, for a -random arm
    preset = None if arm in ("low", "high") else ("stabilizer" if arm.endswith("-random") else arm)
    if preset is not None:
        ctl = gnmr.Controller(gnmr_ao.operator_units(model), preset)
        if a.trace:  # the per-operator norm trace gnmr-replay reads
            (Path(a.out) / "traces").mkdir(parents=True, exist_ok=True)
            ctl.trace(Path(a.out) / "traces" / f"{arm}-{seed}.csv")
        if arm.endswith("-random"):
            src = json.loads((Path(a.out) / "episodes" / f"{arm[:-len('-random')]}-{seed}.json").read_text())
            table = random_table(src, [n for n, _ in lin], a.steps, seed)
            for path, mod in gnmr_ao.float8_modules(model).items():
                mod.forward = _table_dispatch(mod, path, table, step)
        else:
            gnmr_ao.enable_promotion(model, ctl)
        callbacks.append(GnmrCallback(ctl))
    promoted = {"n": 0}
    masks = {}  # t -> promoted operator names at the start of step t

    class Clock(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            step["t"] = state.global_step
            if table is not None:
                on = [n for n, _ in lin if (n, step["t"]) in table]
            elif ctl is not None and ctl.last_summary is not None:
                on = [n for n in ctl.promoted_units() if n in mods]
            else:
                on = []
            promoted["n"] += len(on)
            if on:
                masks[step["t"]] = on

    callbacks.append(Clock())
    args = transformers.TrainingArguments(
        output_dir=os.path.join(a.out, "tmp", f"{arm}-{seed}"), max_steps=a.steps,
        per_device_train_batch_size=a.batch, learning_rate=a.lr, warmup_steps=a.warmup,
        lr_scheduler_type="cosine", weight_decay=0.1, max_grad_norm=1.0, adam_beta2=0.95,
        logging_strategy="no", save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
        seed=seed, data_seed=seed)
    tr = transformers.Trainer(model=model, args=args, train_dataset=DS(), callbacks=callbacks)
    tr.train()
    if ctl is not None and a.trace:
        ctl.close()
    model.eval()
    with torch.no_grad():
        gnmr_ao.disable_promotion(model)
        for mod in gnmr_ao.float8_modules(model).values():
            mod.__dict__.pop("forward", None)
        val_loss = float(model(input_ids=val, labels=val).loss)
    eps = episodes_of(masks)
    (Path(a.out) / "episodes").mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "episodes" / f"{arm}-{seed}.json").write_text(json.dumps(eps))
    rec, prec = detection(eps, events, a.detect_k)
    return {"arm": arm, "seed": seed, "model": a.model, "val_loss": val_loss, "promoted_op_steps": promoted["n"],
            "hp_share": round(promoted["n"] / (len(lin) * a.steps), 6), "episodes": len(eps),
            "detect_recall": rec, "detect_precision": prec,
            "ops": len(lin), "steps": a.steps, "events": len(events), "wall_s": round(time.time() - t0, 1)}


def build_model(kind: str):
    import transformers

    if kind == "llama":
        cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=192,
                                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                       max_position_embeddings=SEQ)
        return transformers.LlamaForCausalLM(cfg)
    if kind == "neox":
        cfg = transformers.GPTNeoXConfig(vocab_size=256, hidden_size=64, intermediate_size=256,
                                         num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=SEQ,
                                         use_parallel_residual=True, rotary_pct=0.25)
        return transformers.GPTNeoXForCausalLM(cfg)
    if kind == "qwen2":  # Llama's layout with q/k/v biases and grouped-query attention
        cfg = transformers.Qwen2Config(vocab_size=256, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQ)
        return transformers.Qwen2ForCausalLM(cfg)
    if kind == "opt":  # LayerNorm, ReLU MLP, learned positions, biases everywhere
        cfg = transformers.OPTConfig(vocab_size=256, hidden_size=64, ffn_dim=256, num_hidden_layers=2,
                                     num_attention_heads=4, max_position_embeddings=SEQ, word_embed_proj_dim=64)
        return transformers.OPTForCausalLM(cfg)
    if kind == "gemma":  # GeGLU MLP, RMSNorm (1 + w), embeddings scaled by sqrt(hidden)
        cfg = transformers.GemmaConfig(vocab_size=256, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=4, head_dim=16,
                                       max_position_embeddings=SEQ)
        return transformers.GemmaForCausalLM(cfg)
    if kind == "phi3":  # fused qkv and gate_up projections
        cfg = transformers.Phi3Config(vocab_size=256, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=SEQ,
                                      pad_token_id=0, bos_token_id=1, eos_token_id=2)
        return transformers.Phi3ForCausalLM(cfg)
    raise ValueError(f"--model must be one of {', '.join(MODELS)}, got {kind!r}")


MODELS = ("llama", "neox", "qwen2", "opt", "gemma", "phi3")


def episodes_of(masks):
    """[(op, start, length)]: runs of consecutive promoted steps per operator."""
    eps, open_ = [], {}
    for t in sorted(masks):
        on = set(masks[t])
        for op in list(open_):
            if op not in on or open_[op][1] + open_[op][2] != t:
                eps.append(tuple(open_.pop(op)))
        for op in on:
            if op in open_:
                open_[op][2] += 1
            else:
                open_[op] = [op, t, 1]
    eps += [tuple(v) for v in open_.values()]
    return sorted(eps, key=lambda e: (e[1], e[0]))


def random_table(src_eps, ops, steps, seed):
    """The source's episodes, each moved to a random operator and start."""
    rng = random.Random(seed * 104729 + 3)
    table = set()
    for _, _, length in src_eps:
        op = ops[rng.randrange(len(ops))]
        start = rng.randint(1, max(1, steps - length))
        table.update((op, t) for t in range(start, start + length))
    return table


def _table_dispatch(mod, path, table, step):
    import torch.nn.functional as F
    from torchao.float8.float8_linear import Float8Linear

    def forward(x):
        if (path, step["t"]) in table:
            return F.linear(x, mod.weight, mod.bias)
        return Float8Linear.forward(mod, x)
    return forward


def detection(eps, events, k):
    """(recall, precision) of promotion episodes against the injected events.
    An act is an episode's start s, decided on step s - 1's gradients; it
    detects an event on the same operator when start <= s - 1 <= start + k."""
    if not events:
        return "", ""
    acts = [(op, s - 1) for op, s, _ in eps]
    hit = lambda a, e: a[0] == e[0] and e[1] <= a[1] <= e[1] + k  # noqa: E731
    found = sum(any(hit(x, e) for x in acts) for e in events)
    good = sum(any(hit(x, e) for e in events) for x in acts)
    return round(found / len(events), 4), (round(good / len(acts), 4) if acts else "")


def bootstrap(d, reps=10000, rng=None):
    rng = rng or random.Random(0)
    n = len(d)
    means = sorted(sum(d[rng.randrange(n)] for _ in range(n)) / n for _ in range(reps))
    return means[int(0.025 * reps)], means[int(0.975 * reps) - 1]


def mean_of(rows, arm, key):
    v = [float(r[key]) for r in rows if r["arm"] == arm and r.get(key) not in (None, "")]
    return sum(v) / len(v) if v else float("nan")


def summary(path: Path, pairs=()) -> None:
    rows = list(csv.DictReader(open(path)))
    by = {}
    for r in rows:
        by.setdefault(r["arm"], {})[int(r["seed"])] = float(r["val_loss"])
    if rows and "hp_share" in rows[0]:
        print(f"{'arm':28s} {'hp share %':>10s} {'episodes':>9s} {'recall':>7s} {'precision':>9s}")
        for arm in by:
            print(f"{arm:28s} {100 * mean_of(rows, arm, 'hp_share'):10.3f} {mean_of(rows, arm, 'episodes'):9.2f} "
                  f"{mean_of(rows, arm, 'detect_recall'):7.3f} {mean_of(rows, arm, 'detect_precision'):9.3f}")
    for pa in pairs:
        x, y = pa.split(":")
        seeds = sorted(set(by.get(x, {})) & set(by.get(y, {})))
        if not seeds:
            continue
        d = [by[x][s] - by[y][s] for s in seeds]
        lo, hi = bootstrap(d)
        print(f"{x} - {y}: {sum(d) / len(d):+.4f} [{lo:+.4f}, {hi:+.4f}] over {len(d)} seeds, "
              f"{sum(v < 0 for v in d)} better, sd {statistics.pstdev(d):.4f}")
    arms = list(by)
    print(f"{'arm':28s} {'n':>3s} {'val mean':>9s} {'d(low)':>9s} {'95% CI':>22s} {'better':>7s}")
    low = by.get("low", {})
    for arm in arms:
        v = by[arm]
        seeds = sorted(set(v) & set(low))
        mean = sum(v.values()) / len(v)
        if arm == "low" or not seeds:
            print(f"{arm:28s} {len(v):3d} {mean:9.4f}")
            continue
        d = [v[s] - low[s] for s in seeds]
        lo, hi = bootstrap(d)
        better = sum(x < 0 for x in d)
        print(f"{arm:28s} {len(seeds):3d} {mean:9.4f} {sum(d) / len(d):+9.4f} [{lo:+.4f}, {hi:+.4f}] "
              f"{better:3d}/{len(d)}")
    if "high" in by and low:
        seeds = sorted(set(by["high"]) & set(low))
        gap = [low[s] - by["high"][s] for s in seeds]
        glo, ghi = bootstrap(gap)
        if not glo > 0:
            print(f"low-high gap {sum(gap) / len(gap):+.4f} [{glo:+.4f}, {ghi:+.4f}]: high precision is not "
                  "better than low by an interval that excludes zero, so a gap-closed ratio is not defined")
            return
        for arm in arms:
            if arm in ("low", "high"):
                continue
            ss = [s for s in seeds if s in by[arm]]
            if not ss:
                continue
            rng = random.Random(1)
            ratios = []
            for _ in range(5000):
                pick = [ss[rng.randrange(len(ss))] for _ in ss]
                num = sum(low[s] - by[arm][s] for s in pick)
                den = sum(low[s] - by["high"][s] for s in pick)
                if den != 0:
                    ratios.append(num / den)
            ratios.sort()
            point = sum(low[s] - by[arm][s] for s in ss) / sum(low[s] - by["high"][s] for s in ss)
            print(f"gap closed by {arm}: {point:.2f} [{ratios[int(0.025 * len(ratios))]:.2f}, "
                  f"{ratios[int(0.975 * len(ratios)) - 1]:.2f}] (ratio of mean differences; "
                  f"low-high gap {sum(gap) / len(gap):+.4f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arms", default="low,high,gnmr,stabilizer")
    ap.add_argument("--seeds", default="1-3")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--per-100", type=float, default=2.0)
    ap.add_argument("--factor-min", type=float, default=50.0)
    ap.add_argument("--factor-max", type=float, default=500.0)
    ap.add_argument("--model", default="llama", choices=MODELS)
    ap.add_argument("--warmup", type=int, default=20, help="learning-rate warm-up steps (then cosine)")
    ap.add_argument("--trace", action="store_true",
                    help="write each controlled run's per-operator norm trace to OUT/traces/ARM-SEED.csv")
    ap.add_argument("--detect-k", type=int, default=3, help="an act within k steps of an event's start detects it")
    ap.add_argument("--pairs", default="", help="A:B[,C:D]: paired differences arm A minus arm B in the summary")
    ap.add_argument("--text", default="/usr/share/games/fortunes")
    ap.add_argument("--out", default="build/trainer-stability")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--summary", action="store_true", help="only print the summary of OUT/results.csv")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res = out / "results.csv"
    pairs = [p for p in a.pairs.split(",") if p]
    if a.summary:
        summary(res, pairs)
        return
    fields = ["arm", "seed", "model", "val_loss", "promoted_op_steps", "hp_share", "episodes", "detect_recall",
              "detect_precision", "ops", "steps", "events", "wall_s"]
    if res.exists() and next(csv.reader(open(res)), []) != fields:
        sys.exit(f"{res} was written by another version of this script (columns differ); use another --out")
    arms = a.arms.split(",")
    # a -random arm reads its source's episodes: sources run in the first wave
    for wave in ([x for x in arms if not x.endswith("-random")], [x for x in arms if x.endswith("-random")]):
        done = set()
        if res.exists():
            done = {(r["arm"], int(r["seed"])) for r in csv.DictReader(open(res))}
        todo = [(arm, s) for s in parse_seeds(a.seeds) for arm in wave if (arm, s) not in done]
        new = not res.exists()
        with open(res, "a", newline="") as f, ProcessPoolExecutor(a.jobs) as pool:
            w = csv.DictWriter(f, fieldnames=fields)
            if new:
                w.writeheader()
            for r in pool.map(run, [t[0] for t in todo], [t[1] for t in todo], [a] * len(todo)):
                w.writerow(r)
                f.flush()
                print(f"{r['arm']:11s} seed {r['seed']:4d}  val {r['val_loss']:.4f}  "
                      f"promoted op-steps {r['promoted_op_steps']:4d}  {r['wall_s']:.0f} s", flush=True)
    summary(res, pairs)


if __name__ == "__main__":
    sys.exit(main())
