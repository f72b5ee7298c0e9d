"""evidence_stability.py — the stability verdict's figures on docs/evidence.md:
the default against the stabilizer (the demo scenarios and the Hugging Face
row), the false alarms of six families and three recipes, the 10,000-step
run, and the GPU comparison, from the per-seed rows under docs/data/. A
room of evidence.py (which writes and checks the page); the statistics and
formats are evidence_base.py's. Standard library only.
"""
from __future__ import annotations

import math
from pathlib import Path

from evidence_base import (FA_ARMS, FA_GOAL, FAMILIES, FIRST_MISSES, GPU_CPU, GPU_GPU, HF, LOCK, LONG_SEED,
                           LONG_STEPS, LONG_WINDOW, MAX_UPPER, MIN_PRECISION, MIN_RECALL, OLD, RECIPES, SCENARIOS,
                           VERDICT_ARMS, VERDICT_LABEL, VERDICT_SEEDS, and_list, awaiting, boot, boot_ratio, ci,
                           fa_data, fa_episodes, fnum, load_arms, mean, num, paired, pct, pct_ci, read, says,
                           seed_range, verdict_data)


def verdict_figures(root=None):
    """The default against the stabilizer: the table, the criteria, detection, the summary's claim."""
    v = verdict_data(root)
    fig = {}
    head = ("| scenario (seeds) | default − stabilizer | seeds better / worse | default's high-precision share |\n"
            "|---|---|---:|---:|")
    lines = [head]
    res = {}
    for s in SCENARIOS + [HF]:
        label = f"{VERDICT_LABEL[s]} ({seed_range(VERDICT_SEEDS[s])})"
        if s not in v:
            lines.append(f"| {label} | {awaiting('a' if s != HF else 'b')} | | |")
            continue
        val = {arm: {k: float(r["final_val_loss"]) for k, r in v[s][arm].items()} for arm in VERDICT_ARMS}
        m, lo, hi, better, worse = paired(val["default"], val["stabilizer"])
        res[s] = (m, lo, hi)
        share = mean(float(r["hp_share"]) for r in v[s]["default"].values())
        c = ci(m, lo, hi)
        if hi < 0 or lo > 0:
            c = f"**{c}**"
        lines.append(f"| {label} | {c} | {better} / {worse} | {pct(share)} |")
    fig["verdict-table"] = "\n".join(lines)

    # the criteria (the demo's as soon as its four scenarios are in; the Hugging Face row's when it is)
    if all(s in res for s in SCENARIOS):
        oo = res["operator-outliers"]
        met = []
        parts = []
        ok = oo[2] < 0
        met.append(ok)
        parts.append(f"default − stabilizer on operator-outliers: upper end {num(oo[2])}, "
                     f"{'below zero: met' if ok else 'not below zero: missed'}")
        ups = [res[s][2] for s in SCENARIOS[1:]]
        ok = all(u <= MAX_UPPER for u in ups)
        met.append(ok)
        parts.append(f"upper ends {num(ups[0])}, {num(ups[1])} and {num(ups[2])} on grad-faults, lr-burst and "
                     f"fp4-gradients (at most {num(MAX_UPPER, 3)} allowed): {'met' if ok else 'missed'}")
        if HF in res:
            h = res[HF]
            ok = not h[1] > 0
            met.append(ok)
            parts.append("on the Hugging Face stack " + {"nd": "not distinguishable from the stabilizer",
                                                          "lower": "better than the stabilizer",
                                                          "higher": "distinguishably worse"}[says(h[1], h[2])] +
                         f" (asked: not distinguishably worse): {'met' if ok else 'missed'}")
        else:
            parts.append("on the Hugging Face stack " + awaiting("b"))
        tail = ("All met." if all(met) else f"{sum(met)} of {len(met)} met.") + \
            ("" if HF in res else " The Hugging Face row's criterion awaits its runs.")
        fig["verdict-criteria"] = "Against the criteria fixed before the runs: " + "; ".join(parts) + ". " + tail
    else:
        fig["verdict-criteria"] = awaiting("a, b")

    # the summary's first claim (the Hugging Face row named as awaiting while it is)
    if all(s in res for s in SCENARIOS):
        oo = res["operator-outliers"]
        first = {"lower": "ends lower than", "nd": "is not distinguishable from",
                 "higher": "ends higher than"}[says(oo[1], oo[2])]
        rest = {s: says(res[s][1], res[s][2]) for s in SCENARIOS[1:] + ([HF] if HF in res else [])}
        if all(x == "nd" for x in rest.values()):
            other = "on the other three scenarios and on the Hugging Face stack it is not distinguishable from it"
        else:
            groups = []
            for x, words in (("lower", "it ends lower than it"), ("higher", "it ends higher than it"),
                             ("nd", "it is not distinguishable from it")):
                ss = [s for s in rest if rest[s] == x]
                if not ss:
                    continue
                names = [s if s != HF else "the Hugging Face stack" for s in ss]
                figs_ = f" ({', '.join(ci(*res[s]) for s in ss)})" if x != "nd" else ""
                groups.append(f"on {and_list(names)} {words}{figs_}")
            other = "; ".join(groups)
        if HF not in res:
            other = other.replace("on the other three scenarios and on the Hugging Face stack",
                                  "on the other three scenarios")
            other += f" (the Hugging Face row: {awaiting('b')})"
        fig["brief-verdict"] = (f"the `default` preset {first} Stable-SPAM's normalisation alone "
                                f"({ci(*oo)} in final validation loss); {other}")
    else:
        fig["brief-verdict"] = awaiting("a, b")

    # detection
    if "operator-outliers" in v:
        d = v["operator-outliers"]["default"].values()
        rec = mean(x for x in (fnum(r["detect_recall"]) for r in d) if x is not None)
        prec = mean(x for x in (fnum(r["detect_precision"]) for r in d) if x is not None)
        ok = rec >= MIN_RECALL and prec >= MIN_PRECISION
        fig["detection"] = (f"**recall {rec:.3f}, precision {prec:.3f}**; the criteria fixed before the runs, "
                            f"at least {MIN_RECALL:.2f} and at least {MIN_PRECISION:.2f}: "
                            f"{'both met' if ok else 'not both met'}")
    else:
        fig["detection"] = awaiting("a")
    if HF in v:
        d = list(v[HF]["default"].values())
        eps = mean(float(r["episodes"]) for r in d)
        recs = [x for x in (fnum(r["detect_recall"]) for r in d) if x is not None]
        precs = [x for x in (fnum(r["detect_precision"]) for r in d) if x is not None]
        rec = mean(recs) if recs else 0.0
        prec = f"{mean(precs):.3f}" if precs else "undefined (no grant)"
        fig["detection-hf"] = (f"the default's promotions ({eps:.1f} a run on average) give recall {rec:.3f}, "
                               f"precision {prec}")
    else:
        fig["detection-hf"] = awaiting("b")
    return fig


def fa_figures(root=None):
    """False alarms: the table of the default and gnmr-calibrated, the goal, the missed cells."""
    cells = fa_data(root)
    eps = fa_episodes(root)
    fig = {}
    lines = ["| family | recipe | `default` | `gnmr-calibrated` |", "|---|---|---:|---:|"]
    share = {}
    for fam, label in FAMILIES:
        for rec in RECIPES:
            c = cells.get((fam, rec))
            if c is None:
                lines.append(f"| {label} | {rec} | {awaiting('c')} | |")
                continue
            share[(fam, rec)] = {arm: mean(float(r["hp_share"]) for r in c[arm].values()) for arm in FA_ARMS}
            dft = pct(share[(fam, rec)]["default"])
            if share[(fam, rec)]["default"] > FA_GOAL:
                dft = f"**{dft}**"
            lines.append(f"| {label} | {rec} | {dft} | {pct(share[(fam, rec)]['gnmr-calibrated'])} |")
    fig["fa-table"] = "\n".join(lines)
    names = dict(FAMILIES)
    n_cells = len(FAMILIES) * len(RECIPES)
    if len(share) < n_cells:
        for k in ("fa-missed", "fa-first-misses", "fa-same-step"):
            fig[k] = awaiting("c")
        if not share:
            fig["fa-goal"] = fig["brief-fa"] = awaiting("c")
            return fig
        over = [k for k in share if share[k]["default"] > FA_GOAL]
        left = n_cells - len(share)
        fig["fa-goal"] = (f"**So far the goal is met on {len(share) - len(over)} of the {len(share)} cells "
                          f"measured**; the other {left} cells are {awaiting('c')}.")
        fig["brief-fa"] = (f"at most 0.5% of operator-steps on {len(share) - len(over)} of the {len(share)} "
                           f"clean cells measured so far (the other {left} of the {n_cells}: {awaiting('c')})")
        return fig
    miss = [k for k in share if share[k]["default"] > FA_GOAL]
    met = n_cells - len(miss)

    def cell_name(k):
        return f"{names[k[0]].replace(' (gnmr-demo)', '')}, {k[1]} recipe"

    if not miss:
        fig["fa-goal"] = f"**The goal is met on {met} of the {n_cells} cells.**"
        fig["brief-fa"] = f"at most 0.5% of operator-steps on all {n_cells} cells (six model families, three recipes)"
    else:
        over = "; ".join(f"{cell_name(k)}, {pct(share[k]['default'])} "
                         f"({100 * (share[k]['default'] - FA_GOAL):.2f} points over)" for k in miss)
        fig["fa-goal"] = (f"**The goal is met on {met} of the {n_cells} cells and missed on {len(miss)}: "
                          f"{over}.**")
        others = ", ".join(pct(share[k]["default"]) for k in miss)
        fig["brief-fa"] = (f"at most 0.5% of operator-steps on {met} of {n_cells} cells (six model families, three "
                           f"recipes) and {others} on the other{'s' if len(miss) > 1 else ''}")
    # each missed cell, measured from its promotions
    parts = []
    for k in miss:
        c = cells[k]["default"]
        runs = sorted(c)
        ep = [e for s in runs for e in eps.get((k[0], k[1], "default", s), [])]
        per_run = [len(eps.get((k[0], k[1], "default", s), [])) for s in runs]
        kinds = {}
        for op, _, _ in ep:
            short = op.split(".")[-1]
            kinds[short] = kinds.get(short, 0) + 1
        kinds_s = ", ".join(f"{n} on `{kk}`" for kk, n in sorted(kinds.items(), key=lambda x: (-x[1], x[0])))
        starts = sorted(st for _, st, _ in ep)
        r0 = next(iter(c.values()))
        ops, steps = int(r0["ops"]), int(r0["steps"])
        one = LOCK / (ops * steps)
        shares = sorted(float(c[s]["hp_share"]) for s in runs)
        shared = sum(1 for s in runs for st in {e[1] for e in eps.get((k[0], k[1], "default", s), [])}
                     if sum(1 for e in eps.get((k[0], k[1], "default", s), []) if e[1] == st) > 1)
        parts.append(
            f"{cell_name(k)}: {len(ep)} promotions over the {len(runs)} runs ({min(per_run)} to {max(per_run)} a "
            f"run), {kinds_s}; they start at steps {starts[0]} to {starts[-1]} (median "
            f"{starts[len(starts) // 2]}); {shared} step{'s' if shared != 1 else ''} with two or more. On a model of "
            f"{ops} operators and a run of {steps} steps one promotion costs {LOCK} / {ops * steps:,} = {pct(one)} "
            f"of the operator-steps, so the goal allows fewer than {FA_GOAL / one:.1f} a run. The cell's runs "
            f"promote {pct(shares[0])} to {pct(shares[-1])}")
    fig["fa-missed"] = ("Measured from the promotions of each missed cell: " + ". ".join(parts) + "."
                        if parts else "No cell is missed.")
    firsts = [share[k]["default"] for k in FIRST_MISSES]
    under = sum(x <= FA_GOAL for x in firsts)
    fig["fa-first-misses"] = (f"{under} of those five cells are at most 0.5% now (the five: "
                              f"{', '.join(pct(x) for x in firsts)})")
    same = total = runs = 0
    for (fam, rec), c in cells.items():
        for s in c["default"]:
            st = [e[1] for e in eps.get((fam, rec, "default", s), [])]
            same += sum(1 for x in set(st) if st.count(x) > 1)
            total += len(st)
            runs += 1
    fig["fa-same-step"] = (f"the default's {runs} runs start {total} promotions, and {same} "
                           f"step{'s' if same != 1 else ''} of them {'has' if same == 1 else 'have'} two or more "
                           f"starting together")
    return fig


def long_run_figures(root=None):
    """The 10,000-step run: the share per thousand steps, its slope, the windows' promotion counts."""
    rows = read("long-run.csv", root)
    if not rows:
        return {"long-run": awaiting("d")}
    r0 = rows[0]
    steps, ops = int(r0["steps"]), int(r0["ops"])
    if steps != LONG_STEPS or int(r0["seed"]) != LONG_SEED:
        return {"long-run": awaiting("d")}
    nwin = steps // LONG_WINDOW
    opsteps = [0] * nwin
    starts = [0] * nwin
    lens = []
    for r in rows:
        if r["op"] == "":
            continue  # a run without any promotion keeps one row with an empty op
        st, ln = int(r["start"]), int(r["len"])
        lens.append(ln)
        starts[(st - 1) // LONG_WINDOW] += 1
        for t in range(st, st + ln):
            if 1 <= t <= steps:
                opsteps[(t - 1) // LONG_WINDOW] += 1
    share = [x / (LONG_WINDOW * ops) for x in opsteps]
    xs = list(range(1, nwin + 1))
    mx, my = mean(xs), mean(100 * s for s in share)
    slope = sum((x - mx) * (100 * s - my) for x, s in zip(xs, share)) / sum((x - mx) ** 2 for x in xs)
    noise = math.sqrt(mean(starts)) * (mean(lens) if lens else LOCK) / (LONG_WINDOW * ops) * 100
    trend = "does not drift up" if slope <= 0 else "drifts up"
    return {"long-run": (f"{', '.join(pct(s) for s in share)} (the whole run: {pct(sum(opsteps) / (steps * ops))}). "
                         f"It {trend}: a least-squares slope of {num(slope, 3)} points per thousand steps "
                         f"({min(starts)} to {max(starts)} promotions start in a window, whose Poisson noise "
                         f"alone is about ±{noise:.2f} points)")}


def gpu_figures(root=None):
    """The previous default's operator-outliers verdict on a GPU against the CPU (seeds 201-240)."""
    base = Path(root) if root else OLD

    def load(name):
        p = base / name
        return load_arms(str(p), "operator-outliers") if p.exists() else None

    cpu, gpu = load(GPU_CPU), load(GPU_GPU)
    if cpu is None or gpu is None:
        return {"gpu": "*the data files are missing*"}
    pairs = [("default", "stabilizer"), ("default", "low"), ("stabilizer", "low"), ("high", "low")]
    same = 0
    res = {}
    for x, y in pairs:
        seeds = sorted(set(cpu[x]) & set(cpu[y]) & set(gpu[x]) & set(gpu[y]))
        out = []
        for d in (cpu, gpu):
            diff = [d[x][s] - d[y][s] for s in seeds]
            lo, hi = boot(diff)
            out.append((mean(diff), lo, hi))
        res[(x, y)] = out
        same += says(out[0][1], out[0][2]) == says(out[1][1], out[1][2])

    def gap(d, arm):
        seeds = sorted(set(d["low"]) & set(d["high"]) & set(d[arm]) & set(cpu[arm]) & set(gpu[arm]))
        num_ = [d["low"][s] - d[arm][s] for s in seeds]
        den = [d["low"][s] - d["high"][s] for s in seeds]
        return (sum(num_) / sum(den),) + boot_ratio(num_, den)

    ds = res[("default", "stabilizer")]
    return {"gpu": (f"the same conclusion on {same} of the {len(pairs)} pairs (default − stabilizer, default − low, "
                    f"stabilizer − low, high − low): default − stabilizer {ci(*ds[1])} on the GPU against "
                    f"{ci(*ds[0])} on the CPU; the default closes {pct_ci(*gap(gpu, 'default'))} of the low–high "
                    f"gap on the GPU, {pct_ci(*gap(cpu, 'default'))} on the CPU")}
