#!/usr/bin/env python3
"""tests/docs/check_evidence.py — every figure of docs/evidence.md is what
its committed per-seed data give (CTest: docs_evidence, label docs).

    python3 tests/docs/check_evidence.py [ROOT]      exit 0 clean, 1 listing every problem

1. bench/python/evidence.py recomputes every marked region of the page
   (`<!-- evidence: NAME -->` ... `<!-- /evidence: NAME -->`) from
   docs/data/evidence/*.csv and the GPU comparison's two files under
   docs/data/ (means, paired bootstrap intervals, counts, shares), and the
   page must hold exactly that text.
2. How strict the prose is (evidence.stray_figures): outside the marked
   regions, outside code, and outside blocks marked `<!-- not rerun -->`
   (figures of an earlier default whose per-seed rows were not kept; each
   such block must say "not kept"), no percentage, no interval in
   brackets and no number with three or more decimals may appear, except
   the constants listed in evidence.ALLOWED (the interval's 95%, the
   false-alarm goal of 0.5%, the calibrated trigger's bound rate × lock of
   0.8%); headings are not read (they name seeds and recipes). Integers,
   seeds, step counts and criteria written with two decimals (0.8, 0.26)
   are not figures to this rule. The word "equals" is refused: an interval
   that includes zero says "not distinguishable from".
3. The interval is the one the page documents: evidence.boot is
   bench/python/compare_verdicts.boot itself.
4. The check can fail: in a temporary copy, one value of each data file is
   changed and the figures recomputed from the copy must disagree with the
   page (a region of that data's figure set named); a figure changed in a
   copy of the page, a stray percentage added to its prose and the word
   "equals" must each be reported. Nothing under the tree is modified.
"""
from __future__ import annotations

import csv
import io
import shutil
import sys
import tempfile
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]).resolve()
sys.path.insert(0, str(ROOT / "bench" / "python"))
import compare_verdicts  # noqa: E402
import evidence as ev  # noqa: E402

PAGE = ROOT / "docs" / "evidence.md"
DATA = ROOT / "docs" / "data" / "evidence"
OLD = ROOT / "docs" / "data"


def perturb(path: Path, column: str, delta: float, where=None) -> bool:
    """Add delta to the first non-empty value of column in the CSV at path,
    among the rows whose fields match `where` (column "-": repeat the first
    row instead)."""
    rows = list(csv.DictReader(open(path, newline="")))
    if not rows or (column not in rows[0] and column != "-"):
        return False
    if column == "-":
        rows.insert(0, dict(rows[0]))
    for r in rows if column != "-" else ():
        if where and any(r.get(k) != v for k, v in where.items()):
            continue
        if r[column] not in ("", None):
            whole = "." not in r[column] and "e" not in r[column] and float(delta).is_integer()
            r[column] = str(int(r[column]) + int(delta)) if whole else repr(float(r[column]) + delta)
            break
    else:
        if column != "-":
            return False
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return True


def nvfp4_synthetic(tmp: Path) -> list:
    import math
    import random
    import evidence_nvfp4 as nv
    rng = random.Random(3)
    rows = []
    for s in nv.SEEDS:
        base = 2.5 + rng.gauss(0, 0.01)

        def row(arm, loss, share, max_o="", c=""):
            rows.append(dict(arm=arm, seed=s, final_loss=f"{loss:.6f}", hp_share=share, fired_share="", ops=42,
                             steps=600, depth=6, max_o=max_o, noise_c=c, wall_s=1))
        row("low", base + 0.024, 0.0)
        row("high", base, 1.0)
        row("static-layers", base + 0.012 + rng.gauss(0, 0.002), 1 / 3)
        row("late-switch", base + 0.010 + rng.gauss(0, 0.002), 1 / 3)
        row("default", base + 0.024 + rng.gauss(0, 0.002), 0.002)
        row("noise-floor", base + 0.024, 0.0, 14, math.sqrt(3))
        for m, sh in ((1, 0.024), (2, 0.048), (14, 0.33)):
            row("noise-floor", base + 0.024 - 2 * sh * 0.024 + rng.gauss(0, 0.002), sh, m, 8.1)
            row("random", base + 0.024 - sh * 0.024 + rng.gauss(0, 0.002), sh, m, "")

    def write(rs):
        with open(tmp / nv.DATA_FILE, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rs[0]), lineterminator="\n")
            w.writeheader()
            w.writerows(rs)
        return ev.nvfp4_figures(tmp)

    out = []
    full = write(rows)
    if any(v.startswith("*awaiting") for k, v in full.items() if k != "nvfp4-explore") or "noise-floor/c=8.1@14" not in full["nvfp4-verdict"]:
        out.append(f"self-test: the NVFP4 figures of a complete synthetic data set are not figures: {full}")
    elif "beats both" not in full["nvfp4-verdict"]:
        out.append(f"self-test: the NVFP4 verdict misses a clear synthetic win: {full['nvfp4-verdict']}")
    elif "Seeds: the intervals" not in full["nvfp4-verdict"]:
        out.append(f"self-test: the NVFP4 verdict does not apply the protocol's seed rule: {full['nvfp4-verdict']}")
    if not full["nvfp4-explore"].startswith("*awaiting"):
        out.append("self-test: the NVFP4 stabilizer region has figures without its runs")
    stab = [dict(r, arm="stabilizer", final_loss=f"{float(r['final_loss']) - 0.01:.6f}") for r in rows if r["arm"] == "low"]
    ex = write(rows + stab)["nvfp4-explore"]
    if ex.startswith("*awaiting") or "−0.0100" not in ex:
        out.append(f"self-test: the NVFP4 stabilizer region misreads its runs: {ex}")
    hst = [dict(r, arm="high-stabilizer", final_loss=f"{float(r['final_loss']) - 0.002:.6f}") for r in rows if r["arm"] == "high"]
    ex = write(rows + stab + hst)["nvfp4-explore"]
    if "awaits" in ex or "`high-stabilizer` − `high` −0.0020" not in ex:
        out.append(f"self-test: the NVFP4 stabilizer region misreads high-stabilizer's runs: {ex}")
    if not write(rows + stab[:-1])["nvfp4-explore"].startswith("*awaiting"):
        out.append("self-test: the NVFP4 stabilizer region has figures one run short")
    short = write([r for r in rows if not (r["arm"] == "random" and r["max_o"] == 2 and r["seed"] == 220)])
    if not all(v.startswith("*awaiting") for v in short.values()):
        out.append("self-test: the NVFP4 figures of a data set one run short are not 'awaiting'")
    rows[0]["final_loss"] = f"{float(rows[0]['final_loss']) + 0.05:.6f}"
    if write(rows)["nvfp4-table"] == full["nvfp4-table"]:
        out.append("self-test: a changed NVFP4 loss did not change the table")
    if not out:
        print("self-test: NVFP4 figures on synthetic data: computed when complete, awaiting when not, "
              "changed with a loss")
    return out


def main() -> int:
    bad = []
    page = PAGE.read_text()
    figs = ev.figures(DATA, OLD)

    # 1-2: the page as committed
    problems = ev.check(page, figs)
    bad += [f"docs/evidence.md: {p}" for p in problems]
    regions = [m.group(1) for m in ev.REGION.finditer(page)]
    if not regions:
        bad.append("docs/evidence.md has no marked region")

    # 3: the interval is compare_verdicts.boot's (the function itself, not a copy)
    if ev.boot is not compare_verdicts.boot:
        bad.append("evidence.boot is not compare_verdicts.boot: the page's intervals must come from the documented code")

    # 4: the check fails when a figure or a value is changed
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # (file, column, delta, figure set, where the file lives, the rows to change,
        #  the region whose figures read the value: skipped while it awaits its runs)
        cases = [
            ("verdict.csv", "final_val_loss", 0.05, ev.verdict_figures, DATA, None, "verdict-table"),
            ("verdict.csv", "detect_recall", -0.5, ev.verdict_figures, DATA,
             {"scenario": "operator-outliers", "arm": "default"}, "detection"),
            ("false-alarms.csv", "hp_share", 0.01, ev.fa_figures, DATA, None, "fa-table"),
            ("false-alarm-episodes.csv", "-", 0.0, ev.fa_figures, DATA, None, "fa-same-step"),
            ("long-run.csv", "len", 200.0, ev.long_run_figures, DATA, None, "long-run"),
            ("nvfp4-arms.csv", "final_loss", 0.05, ev.nvfp4_figures, DATA, {"arm": "static-layers"}, "nvfp4-table"),
            (ev.GPU_GPU, "final_val_loss", 0.05, ev.gpu_figures, OLD, None, "gpu"),
        ]
        tried = 0
        for name, column, delta, fn, home, where, region in cases:
            if not (home / name).exists():
                continue
            if figs.get(region, "").startswith("*awaiting"):
                print(f"self-test: {name} ({column}) not tried: region {region} awaits its runs")
                continue
            d = tmp / f"{name}-{column}"
            d.mkdir()
            for f in home.glob("*.csv"):
                shutil.copy(f, d / f.name)
            if not perturb(d / name, column, delta, where):
                continue
            tried += 1
            changed = dict(figs)
            changed.update(fn(d))
            found = [p for p in ev.check(page, changed) if p.startswith("region ")]
            what = f"{name}: a row repeated" if column == "-" else f"{name}'s {column} changed by {delta}"
            if not found:
                bad.append(f"self-test: {what}, and the check found no mismatch")
            else:
                print(f"self-test: {what}: {len(found)} mismatch(es), first: {found[0].splitlines()[0]}")
        if tried == 0:
            bad.append("self-test: no data file could be changed")

    # The NVFP4 figures before their data exist: on a synthetic complete data
    # set they are figures, not "awaiting", a seed short they are "awaiting"
    # again, and a changed loss changes the table.
    with tempfile.TemporaryDirectory() as tmp:
        bad += nvfp4_synthetic(Path(tmp))

    # a figure changed on the page
    for m in ev.REGION.finditer(page):
        body = m.group(2)
        i = next((k for k, c in enumerate(body) if c.isdigit()), None)
        if i is None:
            continue
        wrong = page[:m.start(2) + i] + str((int(body[i]) + 1) % 10) + page[m.start(2) + i + 1:]
        found = [p for p in ev.check(wrong, figs) if p.startswith(f"region {m.group(1)}:")]
        if not found:
            bad.append(f"self-test: a digit of region {m.group(1)} changed on the page, not reported")
        else:
            print(f"self-test: a digit of region {m.group(1)} changed on the page: reported")
        break
    # a stray figure and the word "equals" in the prose
    anchor = "## How to read the figures\n"
    if anchor in page:
        for extra, what in (("The default closes 87.5% of the gap.\n", "stray"), ("It equals the stabilizer.\n",
                                                                                     "equals")):
            wrong = page.replace(anchor, anchor + "\n" + extra, 1)
            found = [p for p in ev.check(wrong, figs) if not p.startswith("region ")]
            if not found:
                bad.append(f"self-test: {extra.strip()!r} added to the prose, not reported")
            else:
                print(f"self-test: {what} sentence added to the prose: reported ({found[0]})")
    else:
        bad.append("self-test: the page has no 'How to read the figures' section")

    # --write leaves the page as it is (the page is what the data give)
    buf = io.StringIO()
    with redirect_stdout(buf):
        new, problems = ev.render(page, figs)
    if new != page and not bad:
        bad.append("--write would change the page although --check passed")

    for b in bad:
        print(b)
    print(f"check_evidence: {len(regions)} regions, {len(bad)} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
