#!/usr/bin/env python3
"""demo/tools/paired.py — paired differences of final validation losses
between benchmark arms, across one or more suite output folders, and the
"beats / worse" verdicts that docs/record/stability.md's rules use.

A suite writes one runs/<key>/result.txt per run; this reads them all, so
arms from different folders (a development variant run with --gnmr-set in
its own folder, say) can be compared with the main run's arms on the same
seeds. A folder may be given as DIR=PREFIX: its arms are then named
PREFIX/<arm> (e.g. dev-sys-skip=skip gives skip/gnmr-systemic).

    python3 demo/tools/paired.py --ref gnmr-clip --arms gnmr-promote,gnmr-systemic \
        bench-dev bench-dev-noclip

prints, per setting (scenario; "+noclip" when the recipe's clip is 0) and
arm, mean +- sample sd of d_s = L_arm(s) - L_ref(s) over the seeds both
have, the seeds better/worse, and the verdict: "beats" (mean < 0 and at
least 4 of 5 seeds better), "worse" (mean > 0, at least 4 of 5 worse), or
"-". Standard library only.
"""
import argparse
import glob
import math
import os
import sys


def read_runs(folder, prefix):
    out = {}
    for path in glob.glob(os.path.join(folder, "runs", "*", "result.txt")):
        kv = {}
        with open(path) as f:
            for line in f:
                if "=" in line and not line.startswith("#"):
                    k, v = line.rstrip("\n").split("=", 1)
                    kv[k] = v
        if "final_val_loss" not in kv or kv.get("final_val_loss", "") == "":
            continue
        clip = "1"
        for part in kv.get("config", "").split("|"):
            if part.startswith("recipe="):
                for item in part[len("recipe="):].split(","):
                    if item.startswith("clip="):
                        clip = item[len("clip="):]
        setting = kv["scenario"] + ("+noclip" if float(clip) == 0.0 else "")
        arm = (prefix + "/" if prefix else "") + kv["arm"]
        out[(setting, arm, int(kv["seed"]))] = float(kv["final_val_loss"])
    return out


def verdict(d, n_seeds):
    if not d:
        return "-"
    m = sum(d) / len(d)
    better = sum(1 for x in d if x < 0)
    worse = sum(1 for x in d if x > 0)
    need = n_seeds - 1 if n_seeds >= 5 else n_seeds
    if m < 0 and better >= need:
        return "beats"
    if m > 0 and worse >= need:
        return "worse"
    return "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", help="suite --out folders, DIR or DIR=PREFIX")
    ap.add_argument("--ref", required=True, help="the reference arm (its name after any prefix)")
    ap.add_argument("--arms", default="", help="comma-separated arms (default: every arm but --ref)")
    ap.add_argument("--markdown", action="store_true", help="a Markdown table")
    a = ap.parse_args()
    runs = {}
    for spec in a.folders:
        folder, _, prefix = spec.partition("=")
        runs.update(read_runs(folder, prefix))
    if not runs:
        sys.exit("paired.py: no runs/*/result.txt under " + ", ".join(a.folders))
    settings = sorted({s for s, _, _ in runs})
    arms = [x for x in a.arms.split(",") if x] or sorted({r for _, r, _ in runs if r != a.ref})
    if a.markdown:
        print("| setting | arm | seeds | mean d | sd d | better/worse | verdict |")
        print("|---|---|---|---|---|---|---|")
    for s in settings:
        for arm in arms:
            seeds = sorted(k for (ss, r, k) in runs if ss == s and r == arm and (s, a.ref, k) in runs)
            if not seeds:
                continue
            d = [runs[(s, arm, k)] - runs[(s, a.ref, k)] for k in seeds]
            m = sum(d) / len(d)
            sd = math.sqrt(sum((x - m) ** 2 for x in d) / (len(d) - 1)) if len(d) > 1 else float("nan")
            bw = "%d/%d" % (sum(1 for x in d if x < 0), sum(1 for x in d if x > 0))
            v = verdict(d, len(seeds))
            seed_text = "%d-%d" % (seeds[0], seeds[-1]) if seeds == list(range(seeds[0], seeds[-1] + 1)) \
                else ",".join(map(str, seeds))
            if a.markdown:
                print("| %s | %s | %s | %+.4f | %.4f | %s | %s |" % (s, arm, seed_text, m, sd, bw, v))
            else:
                print("%-22s %-28s seeds %-6s d %+.4f +- %.4f  %-5s %s" % (s, arm, seed_text, m, sd, bw, v))


if __name__ == "__main__":
    main()
