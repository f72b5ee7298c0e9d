"""bench/python/mx_proxy.py, mx_sim.py and mx_paper.py, on the CPU: the
benchmark's own MX emulation gives torchao's bits (its quantizer under both
scale rules, and its emulated MXFP8Linear's three GEMMs), a promoted
operator computes in high precision, and a short run of every arm at D = 64
writes the documented results (the CI smoke of the GPU benchmark,
docs/record/mx-proxy.md). The paper emulation and resumable runs:
tests/python/test_mx_paper.py.
"""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

BENCH = Path(__file__).resolve().parents[2] / "bench" / "python"
sys.path.insert(0, str(BENCH))
import mx_sim  # noqa: E402


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    # blocks over 40 binades, a zero block, and blocks whose largest element
    # sits just under a power of two (the floor rule's saturation case)
    x = torch.randn(64, 256, generator=g) * torch.exp2(torch.randint(-20, 20, (64, 1), generator=g).float())
    x[3, :32] = 0.0
    x[9, 0:32] = torch.linspace(-1.99, 1.99, 32)
    x[11, 32:64] = 511.0 / 512.0
    return x


@pytest.mark.parametrize("mode", ["floor", "rceil"])
def test_mx_quantize_is_torchaos_quantizer(mode):
    mxt = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.quantization.quantize_.common.kernel_preference import KernelPreference

    x = _inputs()
    rule = ScaleCalculationMode.FLOOR if mode == "floor" else ScaleCalculationMode.RCEIL
    ref = mxt.MXTensor.to_mx(x, torch.float8_e4m3fn, 32, rule, KernelPreference.EMULATED).dequantize(torch.float32)
    got = mx_sim.mx_quantize(x, mode)
    assert torch.equal(got, ref)
    # What the two rules mean: floor saturates a block whose top element
    # lands in (448, 512) after scaling; rceil never does.
    row = x[9, :32]
    fl, rc = mx_sim.mx_quantize(row.view(1, 32), "floor"), mx_sim.mx_quantize(row.view(1, 32), "rceil")
    assert fl.abs().max() < row.abs().max() and torch.allclose(rc.abs().max(), row.abs().max(), rtol=0.07)


@pytest.mark.parametrize("mode", ["floor", "rceil"])
def test_mx_linear_is_torchaos_emulated_mxfp8_linear(mode):
    lin_mod = pytest.importorskip("torchao.prototype.moe_training.mxfp8_linear")
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.quantization.quantize_.common.kernel_preference import KernelPreference

    rule = ScaleCalculationMode.FLOOR if mode == "floor" else ScaleCalculationMode.RCEIL
    torch.manual_seed(2)
    ref = lin_mod.MXFP8Linear(256, 96, bias=False, kernel_preference=KernelPreference.EMULATED,
                              scale_calculation_mode=rule)
    x = torch.randn(128, 256, requires_grad=True)
    y = ref(x)
    gy = torch.randn_like(y)
    y.backward(gy)
    x2 = x.detach().clone().requires_grad_(True)
    w2 = ref.weight.detach().clone().requires_grad_(True)
    y2 = mx_sim.MXLinearFn.apply(x2, w2, mode)
    y2.backward(gy)
    assert torch.equal(y, y2)
    assert torch.equal(x.grad, x2.grad)
    assert torch.equal(ref.weight.grad, w2.grad)


def test_the_proxy_model_and_promotion():
    torch.manual_seed(0)
    s = mx_sim.Student(64, 2)
    assert list(s.operators()) == ["blocks.0.ln", "blocks.0.fc1", "blocks.0.fc2",
                                   "blocks.1.ln", "blocks.1.fc1", "blocks.1.fc2"]
    units = mx_sim.units_of(s)
    assert [len(v) for v in units.values()] == [2, 1, 2, 2, 1, 2]  # fc1 has no bias
    assert s.blocks[0].fc1.weight.shape == (256, 64)
    s.set_recipe(mx_sim.Recipe("floor", True, True))
    x = torch.randn(16, 64)
    fc, ln = s.blocks[0].fc2, s.blocks[0].ln
    h = torch.randn(16, 256)
    low = fc(h)
    assert not torch.equal(low, F.linear(h, fc.weight, fc.bias))
    fc.promoted = lambda: True
    assert torch.equal(fc(h), F.linear(h, fc.weight, fc.bias))
    rounded = ln(x)
    assert torch.equal(rounded, rounded.to(torch.bfloat16).float())  # bf16 values
    ln.promoted = lambda: True
    assert torch.equal(ln(x), F.layer_norm(x, (64,), ln.weight, ln.bias))
    t = mx_sim.Teacher(64, 2)
    assert not any(p.requires_grad for p in t.parameters())


def test_a_short_run_of_every_arm_writes_the_documented_results(tmp_path):
    """The CI smoke: D = 64, 2 blocks, 150 steps, every arm."""
    arms = "high,low,low-rceil,low-ln-high,stabilizer,default,default-random"
    cmd = [sys.executable, str(BENCH / "mx_proxy.py"), "--arms", arms, "--width", "64", "--depth", "2",
           "--batch", "128", "--lr", "1e-3", "--steps", "150", "--seeds", "7", "--device", "cpu",
           "--jobs", "2", "--out", str(tmp_path)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = list(csv.DictReader(open(tmp_path / "results.csv")))
    assert sorted(r["arm"] for r in rows) == sorted(arms.split(","))
    by = {r["arm"]: r for r in rows}
    for r in rows:
        assert r["steps"] == "150" and r["diverged_at"] == ""
        assert 0.0 < float(r["final_loss"]) < 10.0
        trace = (tmp_path / "traces" / f"{r['arm']}-7.csv").read_text().splitlines()
        assert trace[0] == "step,loss" and len(trace) == 151
    # One seed, one start: the arms on the paper's MX recipe see the same
    # first loss bit for bit (nothing has acted yet); the other recipes a
    # close one from the same weights and batch.
    first = {r["arm"]: float((tmp_path / "traces" / f"{r['arm']}-7.csv").read_text().splitlines()[1].split(",")[1])
             for r in rows}
    assert len({first[a] for a in ("low", "stabilizer", "default", "default-random")}) == 1
    assert all(abs(first[a] / first["high"] - 1.0) < 0.05 for a in first)
    # The random twin has default's share, on other operators and steps.
    assert by["default-random"]["high_share"] == by["default"]["high_share"]
    eps = json.loads((tmp_path / "grants" / "default-7.json").read_text())["episodes"]
    assert int(by["default"]["grants"]) == len(eps)
    assert float(by["high"]["high_share"]) == 0.0
    # Run again: nothing is re-run.
    r2 = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r2.returncode == 0 and len(list(csv.DictReader(open(tmp_path / "results.csv")))) == len(rows)
    assert os.path.exists(tmp_path / "results.csv")


def test_max_rise_is_the_largest_loss_over_its_running_minimum_after_the_descent(tmp_path):
    import mx_proxy
    trace = tmp_path / "low-1.csv"
    losses = [10.0, 5.0, 1.0, 3.0, 0.5, 0.6, 1.4, 0.4, 0.9]
    trace.write_text("step,loss\n" + "".join(f"{t},{v}\n" for t, v in enumerate(losses, 1)))
    # after step 4: the running minimum is 1.0 from step 3, then 0.5, then 0.4;
    # the worst is step 7's 1.4 / 0.5
    assert mx_proxy.max_rise(trace, after=4) == pytest.approx(2.8)
    assert mx_proxy.max_rise(trace, after=0) == pytest.approx(3.0)  # step 4's 3.0 over step 3's 1.0
    assert mx_proxy.max_rise(tmp_path / "missing.csv") is None


def _append_many(path, k, n):
    import mx_proxy
    for i in range(n):
        mx_proxy.append_row(Path(path), {f: (f"w{k}-{i}" if f == "arm" else "") for f in mx_proxy.FIELDS})


def test_two_writers_share_a_results_file(tmp_path):
    # The pilot's queue and a second process beside it may end runs of one
    # folder at the same time: a writer waits for the other's lock, the
    # header is written once, every row whole, none lost.
    import fcntl
    import multiprocessing as mp
    import time

    import mx_proxy
    res = tmp_path / "results.csv"
    res.touch()  # an empty file, as a queue stopped before its first result leaves
    # A fresh interpreter: a forked child would share the held lock's file.
    code = (f"import sys; sys.path.insert(0, {str(BENCH)!r}); from pathlib import Path; import mx_proxy; "
            f"mx_proxy.append_row(Path({str(res)!r}), {{f: ('w9-0' if f == 'arm' else '') for f in mx_proxy.FIELDS}})")
    with open(res, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # the other lane is writing
        p = subprocess.Popen([sys.executable, "-c", code])
        time.sleep(3.0)
        assert res.stat().st_size == 0 and p.poll() is None  # it waits for the lock
    assert p.wait(60) == 0 and res.read_text().count("arm,") == 1
    ctx = mp.get_context("fork")
    ps = [ctx.Process(target=_append_many, args=(str(res), k, 200)) for k in range(3)]
    for q in ps:
        q.start()
    for q in ps:
        q.join()
        assert q.exitcode == 0
    lines = res.read_text().splitlines()
    assert lines[0] == ",".join(mx_proxy.FIELDS) and lines.count(lines[0]) == 1
    rows = list(csv.DictReader(open(res)))
    assert sorted(r["arm"] for r in rows) == sorted([f"w{k}-{i}" for k in range(3) for i in range(200)] + ["w9-0"])
