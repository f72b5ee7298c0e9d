"""bench/python/mx_pilot.sh and mx_record.py, on the CPU with tiny points:
two copies of the queue started together split its runs and never run one
twice; a run in the committed record is not run again; every finished run
reaches the record with its largest rise and its trace; a copy that finds the rest held
waits, and runs a run itself when its holder lets go unfinished; a promoting
run's grants are recorded and restored into a fresh folder; a copy kept to
some points (--points) runs only theirs and leaves the arms' step to another.
"""
from __future__ import annotations

import csv
import fcntl
import gzip
import os
import time
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]
PILOT = ROOT / "bench" / "python" / "mx_pilot.sh"
sys.path.insert(0, str(ROOT / "bench" / "python"))
import mx_record  # noqa: E402

STEPS = 110  # past step 100, where the largest rise starts counting
POINTS = "\n".join([
    f"a|--width 64 --depth 1 --batch 32 --lr 1e-3 --steps {STEPS}",
    f"b|--width 64 --depth 2 --batch 32 --lr 1e-3 --steps {STEPS}",
]) + "\n"  # a trailing newline is no point
RESTORED = {"point": "a", "arm": "low", "emulation": "paper", "seed": "1", "diverged_at": "",
            "final_loss": "0.5", "high_share": "0.0", "grants": "0", "steps": "6", "width": "64",
            "depth": "1", "batch": "32", "lr": "0.001", "device": "", "wall_s": "1", "max_rise": "",
            "source": "mx-proxy.md"}


def _env():
    return {**os.environ, "MX_PILOT_POINTS": POINTS, "MX_PILOT_FLAGS": "",
            "MX_PILOT_PYTHON": sys.executable, "MX_PILOT_NICED": "1"}


def _start(cmd, log: Path):
    """A copy of the queue, its output to a file (a pipe nobody reads could
    fill and stall it while it holds a run)."""
    f = open(log, "w")
    return subprocess.Popen(cmd, env=_env(), stdout=f, stderr=subprocess.STDOUT, text=True), f


def _started(log: str):
    """(point, emulation, arm, seed) of every run a copy's log says it started."""
    return [(m[0].rsplit("/", 1)[1], m[1], m[2], m[3]) for m in
            re.findall(r" (\S+) --emulation (\S+) --arms (\S+) --seeds (\S+) --width", log)]


def _record(tmp_path):
    rec = tmp_path / "record.csv"
    with open(rec, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=mx_record.FIELDS, lineterminator="\n")
        w.writeheader()
        w.writerow(RESTORED)
    return rec


def test_two_copies_split_the_queue_and_the_record_skips_and_keeps(tmp_path):
    rec, out = _record(tmp_path), tmp_path / "q"
    cmd = ["bash", str(PILOT), "--out", str(out), "--record", str(rec)]
    started = [_start(cmd, tmp_path / f"copy{i}.log") for i in range(2)]
    for p, f in started:
        p.wait(timeout=900)
        f.close()
    logs = [(tmp_path / f"copy{i}.log").read_text() for i in range(2)]
    assert [p.returncode for p, _ in started] == [0, 0], logs
    runs = _started(logs[0]) + _started(logs[1])
    # the pilot: paper low and high on seeds 1-2, torchao low on seeds 1-2, at each point
    want = Counter({(pt, e, arm, s) for pt in "ab" for s in "12"
                    for e, arm in [("paper", "low"), ("paper", "high"), ("torchao", "low")]})
    want[("a", "paper", "low", "1")] = 0  # in the record: not run again
    assert Counter(runs) == +want, logs  # every run once, by one copy or the other
    assert _started(logs[0]) and _started(logs[1]), logs  # both copies worked
    assert all("nothing reproduced; the queue is done" in log for log in logs), logs
    got = mx_record.rows(rec)
    keys = Counter((r["point"], r["arm"], r["emulation"], r["seed"]) for r in got)
    assert set(keys.values()) == {1} and len(keys) == 12, keys  # the restored row and 11 new, once each
    assert got[0] == RESTORED
    for r in got[1:]:
        trace = out / r["point"] / "traces" / f"{mx_record.mx_proxy.run_name(r['arm'], r['emulation'], int(r['seed']))}.csv"
        assert r["source"] == "results.csv" and r["steps"] == str(STEPS), r
        rise = mx_record.mx_proxy.max_rise(trace)
        assert rise > 0 and r["max_rise"] == f"{rise:.4g}", r  # from the run's own trace
        kept = rec.with_suffix("") / r["point"] / f"{trace.stem}.trace.csv.gz"
        assert gzip.decompress(kept.read_bytes()) == trace.read_bytes()  # the trace kept beside the record
    assert b"\r" not in rec.read_bytes()  # LF rows, as the committed file
    assert not (out / "a" / "traces" / "low.paper-1.csv").exists()
    # a second start finds nothing to do
    again = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and not _started(again.stdout), again.stdout + again.stderr


def test_a_copy_waits_for_a_held_run_and_runs_it_when_its_holder_lets_go(tmp_path):
    rec, out = _record(tmp_path), tmp_path / "q"
    (out / "locks").mkdir(parents=True)
    held = open(out / "locks" / "b--paper--high--2.lock", "w")
    fcntl.flock(held, fcntl.LOCK_EX)  # another copy "runs" b's high-2
    log = tmp_path / "copy.log"
    p, f = _start(["bash", str(PILOT), "--out", str(out), "--record", str(rec), "--points", "b"], log)
    try:
        t0 = time.time()
        while "waits for another copy's run: b paper high 2" not in log.read_text():
            assert p.poll() is None and time.time() - t0 < 600, log.read_text()
            time.sleep(0.5)
        ran = _started(log.read_text())
        assert ("b", "paper", "high", "2") not in ran and len(ran) == 5, ran  # the rest, then the wait
    finally:
        fcntl.flock(held, fcntl.LOCK_UN)  # the holder stops without finishing
        held.close()
    p.wait(timeout=600)
    f.close()
    text = log.read_text()
    assert p.returncode == 0, text
    assert Counter(_started(text))[("b", "paper", "high", "2")] == 1, text  # run here, once
    assert mx_record.done(rec, out / "b", "b", "paper", "high", 2)


def test_recorded_grants_reach_a_fresh_folder(tmp_path):
    rec, out = _record(tmp_path), tmp_path / "q"
    (out / "b" / "grants").mkdir(parents=True)
    (out / "b" / "grants" / "default.paper-1.json").write_text('{"episodes": [["fc1", 3, 2]]}')
    with open(out / "b" / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=mx_record.mx_proxy.FIELDS)
        w.writeheader()
        w.writerow({k: RESTORED[k] for k in mx_record.mx_proxy.FIELDS} | {"arm": "default"})
    assert mx_record.sync(rec, out / "b", "b") == (1, 1, 0)  # the row and its grants (it has no trace)
    assert mx_record.sync(rec, out / "b", "b") == (0, 0, 0)  # idempotent
    fresh = tmp_path / "fresh"
    assert mx_record.sync(rec, fresh / "b", "b") == (0, 0, 1)
    assert (fresh / "b" / "grants" / "default.paper-1.json").read_text() == '{"episodes": [["fc1", 3, 2]]}'
    assert mx_record.done(rec, fresh / "b", "b", "paper", "default", 1)


def test_a_copy_kept_to_points_runs_only_theirs(tmp_path):
    rec, out = _record(tmp_path), tmp_path / "q"
    r = subprocess.run(["bash", str(PILOT), "--out", str(out), "--record", str(rec), "--points", "b"],
                       env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert {x[0] for x in _started(r.stdout)} == {"b"} and len(_started(r.stdout)) == 6, r.stdout
    assert "step 4 is left to a copy without --points" in r.stdout
    bad = subprocess.run(["bash", str(PILOT), "--out", str(out), "--record", str(rec), "--points", "c"],
                         env=_env(), capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "no point c" in bad.stderr


def test_the_record_refuses_other_columns(tmp_path):
    rec = tmp_path / "r.csv"
    rec.write_text("arm,seed\nlow,1\n")
    with pytest.raises(SystemExit, match="columns differ"):
        mx_record.done(rec, tmp_path, "a", "paper", "low", 1)
    # and the queue stops rather than take an unreadable record for "not done"
    r = subprocess.run(["bash", str(PILOT), "--out", str(tmp_path / "q"), "--record", str(rec)],
                       env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "columns differ" in r.stderr and not _started(r.stdout), r.stdout + r.stderr


def test_reproduced_needs_low_diverged_and_its_high_pair_not(tmp_path):
    rec, out = _record(tmp_path), tmp_path / "q" / "a"
    out.mkdir(parents=True)
    def write(rows):
        with open(out / "results.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=mx_record.mx_proxy.FIELDS)
            w.writeheader()
            for r in rows:
                w.writerow({k: RESTORED[k] for k in mx_record.mx_proxy.FIELDS} | r)
    write([{"seed": "2", "diverged_at": "50"}, {"arm": "high", "emulation": "none", "seed": "2"}])
    assert mx_record.reproduced(rec, out, "a", "paper") and not mx_record.reproduced(rec, out, "a", "torchao")
    write([{"seed": "2", "diverged_at": "50"}, {"arm": "high", "emulation": "none", "seed": "2", "diverged_at": "60"}])
    assert not mx_record.reproduced(rec, out, "a", "paper")  # fp32 diverged too
    write([{"seed": "2", "diverged_at": "50"}])
    assert not mx_record.reproduced(rec, out, "a", "paper")  # no high pair yet
