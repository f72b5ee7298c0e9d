#!/usr/bin/env python3
"""demo/tools/summary_md.py — a suite's summary.csv as Markdown tables, one
per scenario (the columns docs/record/stability.md reports): final validation loss,
paired difference to low and to the best control (mean [95% bootstrap
interval], seeds better/worse), gap closed (ratio of means [interval]),
high-precision share, spike score, detection.

    python3 demo/tools/summary_md.py OUT/summary.csv [--title-suffix " (no recipe clip)"]
"""
import csv
import sys


def f(x, nd=4, sign=False):
    if x in ("", None):
        return ""
    return ("%+.*f" if sign else "%.*f") % (nd, float(x))


def ci(m, lo, hi, nd=4):
    if m in ("", None):
        return ""
    return f(m, nd, True) + ((" [%s, %s]" % (f(lo, nd, True), f(hi, nd, True))) if lo not in ("", None) else "")


def main():
    path = sys.argv[1]
    suffix = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--title-suffix" else ""
    rows = list(csv.DictReader(open(path)))
    for sc in dict.fromkeys(r["scenario"] for r in rows):
        rs = [r for r in rows if r["scenario"] == sc]
        print("**%s%s** (best control: %s)\n" % (sc, suffix, rs[0]["best_control"]))
        print("| arm | val | d(low) | b/w | d(best ctl) | b/w | gap closed | hp% | spike score % | detP | detR |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rs:
            print("| %s | %s ± %s | %s | %s/%s | %s | %s | %s | %.2f | %.2f | %s | %s |" % (
                r["arm"], f(r["val_mean"]), f(r["val_sd"]), ci(r["d_low_mean"], r["d_low_ci_lo"], r["d_low_ci_hi"]),
                r["better_than_low"], r["worse_than_low"],
                ci(r["d_best_mean"], r["d_best_ci_lo"], r["d_best_ci_hi"]) if r["d_best_mean"] else "–",
                (r["better_than_best"] + "/" + r["worse_than_best"]) if r["d_best_mean"] else "–",
                ci(r["gap_closed"], r["gap_closed_ci_lo"], r["gap_closed_ci_hi"], 2), 100 * float(r["hp_share"] or 0),
                float(r["spike_score"] or 0), f(r["detect_precision"], 3), f(r["detect_recall"], 2)))
        print()


if __name__ == "__main__":
    main()
