"""bench/python/nvfp4_arms.py, the NVFP4 arms' harness (docs/record/nvfp4-arms.md,
"Protocol"): a tiny queue of real runs writes one row a run, a second call
runs nothing again (the resume the long queues rely on), the arms' labels
keep shares and noise_c apart, and a bad arm is refused by name."""
from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "python"
sys.path.insert(0, str(BENCH))

pytest.importorskip("transformers")
import nvfp4_arms as na  # noqa: E402


def test_arm_entries_and_labels():
    assert na.parse_arm("low", [1, 14], 1.7320508075688772) == [("low", "", 1.7320508075688772)]
    assert [m for _, m, _ in na.parse_arm("random", [1, 14], 1.0)] == [1, 14]
    assert na.parse_arm("noise-floor/c=8@2", [1], 1.7320508075688772) == [("noise-floor", 2, 8.0)]
    assert na.label("noise-floor", 14, 1.7320508075688772) == "noise-floor@14"
    assert na.label("noise-floor", 14, "8") == "noise-floor/c=8@14"
    assert na.label("random", 2) == "random@2"
    assert na.label("low", "") == "low"
    for bad, why in (("bogus", "unknown arm"), ("low@3", "only noise-floor and random"),
                     ("random/c=2", "only noise-floor takes")):
        with pytest.raises(ValueError, match=why):
            na.parse_arm(bad, [1], 1.0)


def run(out: Path, arms: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH / "nvfp4_arms.py"), "--arms", arms, "--seeds", "1",
                           "--steps", "12", "--depth", "2", "--max-o", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)


def test_a_tiny_queue_writes_a_row_a_run_and_resumes(tmp_path):
    r = run(tmp_path, "low,high,noise-floor,random")
    assert r.returncode == 0, r.stderr[-2000:]
    rows = list(csv.DictReader(open(tmp_path / "results.csv")))
    by = {na.label(x["arm"], x["max_o"], x["noise_c"]): x for x in rows}
    assert sorted(by) == ["high", "low", "noise-floor@1", "random@1"]
    assert float(by["high"]["hp_share"]) == 1.0 and float(by["low"]["hp_share"]) == 0.0
    assert int(by["low"]["ops"]) == 14  # seven linears a block, two blocks
    # random holds one operator of 14 in fp32 every step
    assert float(by["random@1"]["hp_share"]) == pytest.approx(1 / 14, abs=1e-6)
    # 12 steps are inside the trigger's warm-up: nothing fires, nothing is
    # promoted, so the run is low's to the last bit
    assert float(by["noise-floor@1"]["fired_share"]) == 0.0
    assert by["noise-floor@1"]["final_loss"] == by["low"]["final_loss"]
    assert by["low"]["final_loss"] != by["high"]["final_loss"]
    again = run(tmp_path, "low,high,noise-floor,random")
    assert again.returncode == 0
    assert len(list(csv.DictReader(open(tmp_path / "results.csv")))) == 4  # nothing ran twice
    bad = run(tmp_path, "low@2")
    assert bad.returncode != 0 and "only noise-floor and random" in bad.stderr


def test_the_curve_is_drawn_from_paired_rows(tmp_path):
    import shutil

    if shutil.which("gnuplot") is None:
        pytest.skip("gnuplot not installed (Debian: gnuplot-nox)")
    rows = []
    for s, base in ((1, 2.50), (2, 2.52)):
        rows += [("low", s, base + 0.03, 0.0, "", ""), ("high", s, base, 1.0, "", ""),
                 ("static-layers", s, base + 0.015, 1 / 3, "", ""),
                 ("noise-floor", s, base + 0.029, 1 / 42, 1, 8.1), ("noise-floor", s, base + 0.02, 1 / 3, 14, 8.1),
                 ("random", s, base + 0.03, 1 / 42, 1, "")]
    with open(tmp_path / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=na.FIELDS)
        w.writeheader()
        for arm, s, loss, share, m, c in rows:
            w.writerow({"arm": arm, "seed": s, "final_loss": loss, "hp_share": share, "max_o": m, "noise_c": c})
    out, gap = na.arm_rows(tmp_path / "results.csv")
    by = {r[0]: r for r in out}
    assert gap == pytest.approx([0.03, 0.03])
    assert by["static-layers"][6][0] == pytest.approx(0.5)  # half the gap closed on both seeds
    assert by["noise-floor/c=8.1@14"][6][0] == pytest.approx(1 / 3)
    # Seeds with unequal gaps: the ratio of the means (evidence.md's), not the
    # mean of the ratios. Seed 1 closes 0.015 of 0.03, seed 2 none of 0.01.
    with open(tmp_path / "results.csv", "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=na.FIELDS)
        for arm, s, loss in (("low", 3, 2.53), ("high", 3, 2.50), ("late-switch", 3, 2.515),
                             ("low", 4, 2.51), ("high", 4, 2.50), ("late-switch", 4, 2.51)):
            w.writerow({"arm": arm, "seed": s, "final_loss": loss, "hp_share": 0, "max_o": "", "noise_c": ""})
    out, _ = na.arm_rows(tmp_path / "results.csv")
    late = {r[0]: r for r in out}["late-switch"]
    assert late[6][0] == pytest.approx(0.015 / 0.04)  # mean of ratios would be 0.25
    png = tmp_path / "curve.png"
    na.plot(tmp_path / "results.csv", png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_stabilizer_arms_normalise_low_and_high(tmp_path):
    # stabilizer: low's NVFP4 operators with the stabilizer preset (no
    # promotion, share 0); high-stabilizer: high's fp32 model with the same
    # preset (share 1). Each trains differently from its arm without it.
    r = run(tmp_path, "low,high,stabilizer,high-stabilizer")
    assert r.returncode == 0, r.stderr[-2000:]
    by = {x["arm"]: x for x in csv.DictReader(open(tmp_path / "results.csv"))}
    assert float(by["stabilizer"]["hp_share"]) == 0.0 and float(by["high-stabilizer"]["hp_share"]) == 1.0
    assert by["stabilizer"]["fired_share"] != "" and by["high-stabilizer"]["fired_share"] != ""
    assert by["stabilizer"]["final_loss"] != by["low"]["final_loss"]
    assert by["high-stabilizer"]["final_loss"] != by["high"]["final_loss"]
    assert by["stabilizer"]["final_loss"] != by["high-stabilizer"]["final_loss"]
