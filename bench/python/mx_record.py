#!/usr/bin/env python3
"""mx_record.py — the MX pilot's record in the tree (docs/data/mx-pilot.csv):
one row for every finished run of the CPU pilot's queue
(bench/python/mx_pilot.sh, docs/record/mx-proxy.md). A run's folder under
build/ lives only as long as the machine it ran on, and the queue may be
started again on a fresh clone; the record is committed, so a queue started there skips
what earlier sittings finished instead of running it again.

    python bench/python/mx_record.py done RECORD DIR POINT EMULATION ARM SEED
        exit 0 if that run is finished: its row is in DIR/results.csv or in
        RECORD (under POINT); exit 3 if not (any other code: an error)
    python bench/python/mx_record.py sync RECORD DIR POINT
        append to RECORD every row of DIR/results.csv it lacks, with POINT,
        the run's largest rise (mx_proxy.max_rise, from its trace) and
        source "results.csv"; keep the run's loss trace (RUN.trace.csv.gz)
        and, for a promoting arm, its grants (RUN.grants.json) in RECORD's
        folder (RECORD without .csv)/POINT/; then copy back into DIR/grants
        the recorded grants it lacks (default-random reads default's).
        Idempotent; prints what it did
    python bench/python/mx_record.py reproduced RECORD DIR POINT EMULATION
        exit 0 if, at POINT, low diverged under EMULATION and high did not
        on some seed (DIR/results.csv and RECORD together); exit 3 if not

Columns: point, then mx_proxy's (arm, emulation, seed, diverged_at,
final_loss, high_share, grants, steps, width, depth, batch, lr, device,
wall_s), then max_rise and source: "results.csv" (copied from the run's own
row by the queue) or "mx-proxy.md" (a run whose folder was lost before the
record existed, restored from the pilot table with the table's digits;
fields the table does not give are empty). Appends take an exclusive lock,
so two copies of the queue may sync at once.
"""
from __future__ import annotations

import csv
import fcntl
import gzip
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mx_proxy  # noqa: E402  (no torch at import)

FIELDS = ["point"] + mx_proxy.FIELDS + ["max_rise", "source"]


def _key(point: str, arm: str, emulation: str, seed) -> tuple:
    return (point, arm, emulation, int(seed))


def rows(path: Path) -> list:
    """The rows of a record (none if it does not exist); a file with other
    columns is refused rather than read wrongly (exit status 1, never the
    "not done" of `done`)."""
    if not path.exists() or path.stat().st_size == 0:
        return []
    with open(path, newline="") as f:
        r = csv.DictReader(f)
        if r.fieldnames != FIELDS:
            sys.exit(f"{path}: columns differ from mx_record's ({','.join(FIELDS)})")
        return list(r)


def done(record: Path, out: Path, point: str, emulation: str, arm: str, seed: int) -> bool:
    """Whether the queue's run (POINT, ARM under EMULATION, SEED) is finished."""
    key = _key(point, arm, mx_proxy.emulation_of(arm, emulation), seed)
    res = out / "results.csv"
    if res.exists() and res.stat().st_size > 0:
        with open(res, newline="") as f:
            if any(_key(point, r["arm"], r["emulation"], r["seed"]) == key for r in csv.DictReader(f)):
                return True
    return any(_key(r["point"], r["arm"], r["emulation"], r["seed"]) == key for r in rows(record))


def reproduced(record: Path, out: Path, point: str, emulation: str) -> bool:
    """Whether, at POINT, low diverged under EMULATION and high did not, on a
    seed (the pilot's rule), by DIR/results.csv and RECORD together."""
    res = out / "results.csv"
    found = []
    if res.exists() and res.stat().st_size > 0:
        with open(res, newline="") as f:
            found = list(csv.DictReader(f))
    found += [r for r in rows(record) if r["point"] == point]
    d = {(r["arm"], r["emulation"], r["seed"]): r["diverged_at"] for r in found}
    return any(a == "low" and e == emulation and v and d.get(("high", "none", s)) == ""
               for (a, e, s), v in d.items())


def files_dir(record: Path, point: str) -> Path:
    """Where RECORD keeps a point's files: RECORD without .csv, then POINT."""
    return record.with_suffix("") / point


def _put(dst: Path, data: bytes) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, dst)


def sync(record: Path, out: Path, point: str) -> tuple:
    """Appends DIR's finished runs that RECORD lacks, with their files, and
    copies recorded grants DIR lacks back into it; returns (rows appended,
    files recorded, grant files restored)."""
    res = out / "results.csv"
    new = []
    if res.exists() and res.stat().st_size > 0:
        with open(res, newline="") as f:
            new = list(csv.DictReader(f))
    record.parent.mkdir(parents=True, exist_ok=True)
    kept = restored = 0
    fdir = files_dir(record, point)
    for r in new:  # a finished run's files are final: copied once, never changed
        run = mx_proxy.run_name(r["arm"], r["emulation"], int(r["seed"]))
        grants, trace = out / "grants" / f"{run}.json", out / "traces" / f"{run}.csv"
        if grants.exists() and not (fdir / f"{run}.grants.json").exists():
            _put(fdir / f"{run}.grants.json", grants.read_bytes())
            kept += 1
        if trace.exists() and not (fdir / f"{run}.trace.csv.gz").exists():
            # mtime 0: the same trace gives the same bytes
            _put(fdir / f"{run}.trace.csv.gz", gzip.compress(trace.read_bytes(), mtime=0))
            kept += 1
    if fdir.is_dir():
        for g in sorted(fdir.glob("*.grants.json")):
            dst = out / "grants" / (g.name[: -len(".grants.json")] + ".json")
            if not dst.exists():
                _put(dst, g.read_bytes())
                restored += 1
    return _append(record, new, point, out), kept, restored


def _append(record: Path, new: list, point: str, out: Path) -> int:
    with open(record, "a+", newline="") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
        have = {_key(r["point"], r["arm"], r["emulation"], r["seed"]) for r in rows(record)}
        w = csv.DictWriter(f, fieldnames=FIELDS, lineterminator="\n")
        if os.fstat(f.fileno()).st_size == 0:
            w.writeheader()
        n = 0
        for r in new:
            if _key(point, r["arm"], r["emulation"], r["seed"]) in have:
                continue
            trace = out / "traces" / f"{mx_proxy.run_name(r['arm'], r['emulation'], int(r['seed']))}.csv"
            rise = mx_proxy.max_rise(trace)
            w.writerow({**r, "point": point, "max_rise": "" if rise is None else f"{rise:.4g}",
                        "source": "results.csv"})
            n += 1
        f.flush()
    return n


def main(argv=None) -> int:
    a = sys.argv[1:] if argv is None else argv
    usage = ("usage: mx_record.py done RECORD DIR POINT EMULATION ARM SEED | "
             "mx_record.py sync RECORD DIR POINT | mx_record.py reproduced RECORD DIR POINT EMULATION")
    if len(a) == 7 and a[0] == "done":
        return 0 if done(Path(a[1]), Path(a[2]), a[3], a[4], a[5], int(a[6])) else 3
    if len(a) == 5 and a[0] == "reproduced":
        return 0 if reproduced(Path(a[1]), Path(a[2]), a[3], a[4]) else 3
    if len(a) == 4 and a[0] == "sync":
        n, kept, restored = sync(Path(a[1]), Path(a[2]), a[3])
        if n or kept or restored:
            print(f"mx_record: {a[2]}: {n} new row(s) and {kept} file(s) into {a[1]}'s record, "
                  f"{restored} grant file(s) restored from it")
        return 0
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
