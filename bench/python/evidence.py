#!/usr/bin/env python3
"""evidence.py — every figure of docs/evidence.md, recomputed from the
per-seed rows committed under docs/data/.

    python3 bench/python/evidence.py --check docs/evidence.md    exit 1 listing every mismatch
    python3 bench/python/evidence.py --write docs/evidence.md    rewrite every marked region
    python3 bench/python/evidence.py --collect build/evidence [--data docs/data/evidence]
        copy the per-seed rows of every complete set of runs under OUT (bench/evidence-runs.sh)
        into the data files; a set not complete there keeps the rows the data already hold

The page marks each generated figure: a table or a span of prose between
`<!-- evidence: NAME -->` and `<!-- /evidence: NAME -->` (a region whose
opening marker ends its line is a block, rewritten with the markers on lines
of their own; otherwise the span is inline). --write replaces each region's
content with what the function for NAME computes; --check recomputes it and
reports, per region, the expected and the found text. Figures measured on an
earlier build whose per-seed rows were not kept sit between `<!-- not rerun
-->` and `<!-- /not rerun -->`: they are not checked, and each such block
must say so in its own words ("not kept"). --check also fails on a figure
left in unmarked prose (stray_figures: a percentage, an interval in
brackets, or a number with three or more decimals, outside code, outside
every region and every not-rerun block, other than the fixed constants of
ALLOWED) and on the word "equals" (an interval that includes zero says "not
distinguishable from", never "equals").

How a figure is computed (stated on the page, "How to read the figures"):
a paired difference is the mean over seeds of arm A's final validation loss
minus arm B's on the same seed; its 95% interval is boot(): 10,000
resamples of the seeds with random.Random(20), fresh for every interval,
the bounds being the sorted resampled means at positions int(0.025 * 10000)
and int(0.975 * 10000) - 1 (compare_verdicts.boot, the same code). A gap
closed is a ratio of means, mean(low - arm) / mean(low - high), its interval
the same resampling applied to the ratio. Shares are means over the runs of
a cell; recall and precision means over the runs where they are defined.
A data set that is not complete (seeds or arms missing) gives "awaiting
the rerun" with the command, never a partial figure.

Standard library only: CI runs it with the system python3.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The rooms: the shared statistics and data, one module per part of the page,
# and the collector. Names tests/docs/check_evidence.py reads are re-exported.
import evidence_nvfp4  # noqa: E402
from evidence_base import DATA, GPU_GPU, OLD, boot  # noqa: E402,F401
from evidence_collect import collect  # noqa: E402
from evidence_stability import fa_figures, gpu_figures, long_run_figures, verdict_figures  # noqa: E402

# Figures in unmarked prose that are constants, not measurements.
ALLOWED = {"95%": "the interval's level", "0.5%": "the false-alarm goal",
           "0.8%": "rate x lock, the calibrated trigger's bound"}


def nvfp4_figures(root=None):
    """The NVFP4 comparison's regions (evidence_nvfp4.py)."""
    return evidence_nvfp4.figures(root)


FIGURE_SETS = (verdict_figures, fa_figures, long_run_figures, gpu_figures, nvfp4_figures)


def figures(data=None, old=None):
    out = {}
    for f in FIGURE_SETS:
        out.update(f(old if f is gpu_figures else data))
    return out


# --------------------------------------------------------------------------------------------- the page

REGION = re.compile(r"<!-- evidence: ([\w-]+) -->(.*?)<!-- /evidence: \1 -->", re.S)
OPEN = re.compile(r"<!-- evidence: ([\w-]+) -->")
CLOSE = re.compile(r"<!-- /evidence: ([\w-]+) -->")
NOT_RERUN = re.compile(r"<!-- not rerun -->(.*?)<!-- /not rerun -->", re.S)
FIGURE = re.compile(r"\[\s*[+−-]?\d[\d.,%]*\s*,\s*[+−-]?\d[\d.,%]*\s*\]"  # an interval
                    r"|[+−-]?\d+(?:\.\d+)?%"                               # a percentage
                    r"|[+−-]?\b\d+\.\d{3,}\b")                             # three or more decimals


def render(page, figs):
    """The page with every region's content replaced; (new page, problems)."""
    problems = []

    def sub(m):
        name, body = m.group(1), m.group(2)
        if name not in figs:
            problems.append(f"region {name}: no figure set computes it")
            return m.group(0)
        block = body.startswith("\n")
        new = f"\n{figs[name]}\n" if block else figs[name]
        return f"<!-- evidence: {name} -->{new}<!-- /evidence: {name} -->"

    out = REGION.sub(sub, page)
    found = [m.group(1) for m in REGION.finditer(page)]
    for name in figs:
        if name not in found:
            problems.append(f"region {name}: computed but not on the page")
    opens, closes = OPEN.findall(page), CLOSE.findall(page)
    if sorted(opens) != sorted(found) or sorted(closes) != sorted(found):
        problems.append(f"unbalanced or nested markers: opened {opens}, closed {closes}")
    if len(set(found)) != len(found):
        problems.append("a region appears twice: " + ", ".join(sorted({n for n in found if found.count(n) > 1})))
    return out, problems


def check(page, figs):
    """Every mismatch between the page and the figures, and every stray figure."""
    new, problems = render(page, figs)
    have = {m.group(1): m.group(2).strip() for m in REGION.finditer(page)}
    for name, text in figs.items():
        if name in have and have[name] != text.strip():
            problems.append(f"region {name}:\n    expected: {text.strip()}\n    found:    {have[name]}")
    return problems + stray_figures(page)


def strip_code(text):
    text = re.sub(r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "``", text)


def stray_figures(page):
    """Figures in prose outside every region and not-rerun block (see the module's docstring)."""
    problems = []
    for m in NOT_RERUN.finditer(page):
        if "not kept" not in m.group(1):
            line = page[:m.start()].count("\n") + 1
            problems.append(f"line {line}: a not-rerun block that does not say its per-seed data were not kept")
    blank = REGION.sub(lambda m: "\n" * m.group(0).count("\n"), page)
    blank = NOT_RERUN.sub(lambda m: "\n" * m.group(0).count("\n"), blank)
    blank = strip_code(blank)
    for n, line in enumerate(blank.splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue  # headings name seeds and recipes, not figures
        for f in FIGURE.finditer(line):
            if f.group(0) not in ALLOWED:
                problems.append(f"line {n}: figure {f.group(0)!r} outside every marked region")
        if re.search(r"\bequals?\b", line):
            problems.append(f"line {n}: 'equals': say 'not distinguishable from' where an interval includes zero")
    return problems


# --------------------------------------------------------------------------------------------- main

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--check", metavar="PAGE")
    g.add_argument("--write", metavar="PAGE")
    g.add_argument("--collect", metavar="OUT")
    g.add_argument("--print", action="store_true", help="print every region's figures")
    ap.add_argument("--data", default=str(DATA), help="the per-seed data (default docs/data/evidence)")
    ap.add_argument("--old", default=str(OLD), help="where the GPU comparison's two files are (default docs/data)")
    a = ap.parse_args(argv)
    if a.collect:
        collect(a.collect, a.data)
        return 0
    figs = figures(a.data, a.old)
    if a.print:
        for k, v in figs.items():
            print(f"--- {k}\n{v}")
        return 0
    path = a.check or a.write
    page = Path(path).read_text()
    if a.write:
        new, problems = render(page, figs)
        Path(path).write_text(new)
        problems += stray_figures(new)
        for p in problems:
            print(p)
        print(f"evidence: wrote {len(REGION.findall(new))} regions of {path}, {len(problems)} problem(s)")
        return 1 if problems else 0
    problems = check(page, figs)
    for p in problems:
        print(p)
    print(f"evidence: {len(REGION.findall(page))} regions of {path} checked, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
