"""evidence_collect.py — `evidence.py --collect OUT`: the per-seed rows of
every complete set of runs under OUT (bench/evidence-runs.sh's folders)
copied into the data files under docs/data/evidence; a set not complete
there keeps the rows the data already hold. Standard library only.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

from evidence_base import (FA_ARMS, FAMILIES, HF, LONG_SEED, LONG_STEPS, RECIPE_ARGS, RECIPES, SCENARIOS,
                           VERDICT_ARMS, VERDICT_SEEDS, complete, fa_seeds, read)


DEMO_OPS = ("qkv", "proj", "gate", "up", "down")


def demo_op(i):
    return f"h{i // 5}.{DEMO_OPS[i % 5]}" if i < 20 else "head"


def demo_result(run_dir):
    out = {}
    for line in open(run_dir / "result.txt"):
        if "=" in line and not line.startswith("#"):
            k, _, v = line.rstrip("\n").partition("=")
            out[k] = v
    return out


def demo_episodes(run_dir):
    r = demo_result(run_dir)
    eps = []
    for e in r.get("episodes", "").split(";"):
        if e:
            op, st, ln = e.split(":")
            eps.append((demo_op(int(op)), int(st), int(ln)))
    assert sum(e[2] for e in eps) == int(r["promoted_op_steps"]), run_dir
    return eps


def demo_rows(path):
    p = Path(path) / "results.csv"
    return list(csv.DictReader(open(p, newline=""))) if p.exists() else []


def hf_rows(path):
    p = Path(path) / "results.csv"
    return list(csv.DictReader(open(p, newline=""))) if p.exists() else []


def merge(name, fields, key, new_rows, data):
    """Replace, in data/name, the rows of every set in new_rows (key(row) -> set); keep the others."""
    old = read(name, data) or []
    sets = {key(r) for r in new_rows}
    rows = [r for r in old if key(r) not in sets] + new_rows
    if not rows:
        return 0
    Path(data).mkdir(parents=True, exist_ok=True)
    with open(Path(data) / name, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in fields})
    return len(sets)


def collect(out, data):
    out = Path(out)
    # the verdict
    vfields = ["scenario", "arm", "seed", "final_val_loss", "hp_share", "detect_recall", "detect_precision",
               "episodes"]
    new = []
    for s in SCENARIOS:
        rows = [r for r in demo_rows(out / f"verdict-{s}") if r["arm"] in VERDICT_ARMS
                and int(r["seed"]) in VERDICT_SEEDS[s] and r["scenario"] == s]
        by = {}
        for r in rows:
            by.setdefault(r["arm"], {})[int(r["seed"])] = r
        if not complete(by, VERDICT_ARMS, VERDICT_SEEDS[s]):
            print(f"verdict {s}: not complete ({len(rows)} runs)")
            continue
        for r in rows:
            eps = demo_episodes(out / f"verdict-{s}" / "runs" / r["key"])
            new.append(dict(scenario=s, arm=r["arm"], seed=r["seed"], final_val_loss=r["final_val_loss"],
                            hp_share=r["hp_share"], detect_recall=r["detect_recall"],
                            detect_precision=r["detect_precision"], episodes=len(eps)))
    rows = [r for r in hf_rows(out / "hf-llama") if r["arm"] in VERDICT_ARMS and int(r["seed"]) in VERDICT_SEEDS[HF]]
    by = {}
    for r in rows:
        by.setdefault(r["arm"], {})[int(r["seed"])] = r
    if complete(by, VERDICT_ARMS, VERDICT_SEEDS[HF]):
        for r in rows:
            new.append(dict(scenario=HF, arm=r["arm"], seed=r["seed"], final_val_loss=r["val_loss"],
                            hp_share=r["hp_share"], detect_recall=r["detect_recall"],
                            detect_precision=r["detect_precision"], episodes=r["episodes"]))
    else:
        print(f"verdict {HF}: not complete ({len(rows)} runs)")
    new.sort(key=lambda r: ((SCENARIOS + [HF]).index(r["scenario"]), r["arm"], int(r["seed"])))
    n = merge("verdict.csv", vfields, lambda r: r["scenario"], new, data)
    print(f"verdict.csv: {n} set(s) written")

    # false alarms
    ffields = ["family", "recipe", "arm", "seed", "ops", "steps", "hp_share", "episodes", "final_val_loss"]
    efields = ["family", "recipe", "arm", "seed", "op", "start", "len"]
    new, new_eps = [], []
    for fam, _ in FAMILIES:
        for rec in RECIPES:
            d = out / f"fa-{fam}-{rec}"
            lr, wu, steps = RECIPE_ARGS[rec]
            if fam == "demo":
                rows = [r for r in demo_rows(d) if r["arm"] in FA_ARMS and int(r["seed"]) in fa_seeds(fam)
                        and int(r["steps"]) == steps]
            else:
                rows = [r for r in hf_rows(d) if r["arm"] in FA_ARMS and int(r["seed"]) in fa_seeds(fam)
                        and int(r["steps"]) == steps and r["model"] == fam and r["events"] == "0"]
            by = {}
            for r in rows:
                by.setdefault(r["arm"], {})[int(r["seed"])] = r
            if not complete(by, FA_ARMS, fa_seeds(fam)):
                print(f"false alarms {fam} {rec}: not complete ({len(rows)} runs)")
                continue
            for r in rows:
                if fam == "demo":
                    eps = demo_episodes(d / "runs" / r["key"])
                    row = dict(ops=21, steps=r["steps"], hp_share=r["hp_share"], final_val_loss=r["final_val_loss"])
                    assert abs(float(r["promoted_op_steps"]) / (21 * steps) - float(r["hp_share"])) < 1e-9
                else:
                    eps = [tuple(e) for e in json.loads((d / "episodes" / f"{r['arm']}-{r['seed']}.json").read_text())]
                    row = dict(ops=r["ops"], steps=r["steps"], hp_share=r["hp_share"], final_val_loss=r["val_loss"])
                row.update(family=fam, recipe=rec, arm=r["arm"], seed=r["seed"], episodes=len(eps))
                new.append(row)
                for op, st, ln in eps:
                    new_eps.append(dict(family=fam, recipe=rec, arm=r["arm"], seed=r["seed"], op=op, start=st, len=ln))
    order = lambda r: ([f for f, _ in FAMILIES].index(r["family"]), RECIPES.index(r["recipe"]),  # noqa: E731
                       r["arm"], int(r["seed"]), int(r.get("start") or 0))
    new.sort(key=order)
    new_eps.sort(key=order)
    key = lambda r: (r["family"], r["recipe"])  # noqa: E731
    n = merge("false-alarms.csv", ffields, key, new, data)
    done = {key(r) for r in new}
    # the episodes of a complete cell replace the old ones even where the cell had none
    old = [r for r in read("false-alarm-episodes.csv", data) or [] if key(r) not in done]
    if old or new_eps:
        Path(data).mkdir(parents=True, exist_ok=True)
        with open(Path(data) / "false-alarm-episodes.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=efields, lineterminator="\n")
            w.writeheader()
            w.writerows(old + new_eps)
    print(f"false-alarms.csv: {n} cell(s) written")

    # the 10,000-step run
    rows = [r for r in demo_rows(out / "long-302") if r["arm"] == "default" and int(r["seed"]) == LONG_SEED
            and int(r["steps"]) == LONG_STEPS]
    if rows:
        r = rows[0]
        eps = demo_episodes(out / "long-302" / "runs" / r["key"])
        lfields = ["arm", "seed", "steps", "ops", "op", "start", "len"]
        Path(data).mkdir(parents=True, exist_ok=True)
        with open(Path(data) / "long-run.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=lfields, lineterminator="\n")
            w.writeheader()
            for op, st, ln in eps or [("", "", "")]:
                w.writerow(dict(arm="default", seed=LONG_SEED, steps=LONG_STEPS, ops=21, op=op, start=st, len=ln))
        print("long-run.csv: written")
    else:
        print("long run: not complete")
