"""The aux trace (Controller.trace(path, aux=...)) and gnmr-replay --aux: a
gnmr-noise-floor run records its norms and each unit's finished aux norm,
and the replay of the two traces grants the same units at the same steps as
the live run, on the CPU and on CUDA (there the rows come a step late from
the device controller's own aux norms: the CPU run's bits). Bad uses are
refused and change nothing."""
from __future__ import annotations

import json
import subprocess

import pytest
import torch

import gnmr
from gnmr import Flag

HAVE_GPU = torch.cuda.is_available() and gnmr.cuda_built()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not HAVE_GPU, reason="needs a CUDA device and a gnmr built with CUDA"))]


def _run(tmp_path, steps=40, device="cpu"):
    torch.manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(16, device=device)) for _ in range(5)]
    ctl = gnmr.Controller({f"u{i}": [p] for i, p in enumerate(ps)}, preset="gnmr-noise-floor",
                          warmup=3, max_o=2, lock=3)
    ctl.trace(tmp_path / "norms.csv", aux=tmp_path / "aux.csv")
    g = torch.Generator().manual_seed(1)
    grants = []
    for t in range(steps):
        for p in ps:
            p.grad = torch.randn(16, generator=g).to(device)
        # Sums of squares of each unit's noise: about the gradient's own
        # (16) with a wide spread, so units cross sqrt(3) * a both ways; a
        # zero and a NaN now and then (never judged).
        aux = torch.rand(5, generator=g) * 24.0
        if t % 7 == 3:
            aux[1] = 0.0
        if t % 11 == 5:
            aux[2] = float("nan")
        ctl.step(aux=aux.to(device))
        flags = ctl.decisions().flags.cpu()
        grants += [(ctl.steps_done, u) for u in range(5) if int(flags[u]) & int(Flag.GRANTED)]
    ctl.trace(None)
    return grants


@pytest.mark.parametrize("device", DEVICES)
def test_replay_of_the_aux_trace_grants_what_the_live_run_did(tmp_path, replay_exe, device):
    grants = _run(tmp_path, device=device)
    assert len(grants) >= 3  # the run had grants to compare
    lines = (tmp_path / "aux.csv").read_text().splitlines()
    assert lines[0] == "step,u0,u1,u2,u3,u4" and len(lines) == 41
    r = subprocess.run([replay_exe, str(tmp_path / "norms.csv"), "--aux", str(tmp_path / "aux.csv"),
                        "--preset", "gnmr-noise-floor", "--warmup", "3", "--maxo", "2", "--lock", "3",
                        "--quiet", "--events", str(tmp_path / "ev.jsonl")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    ev = [json.loads(x) for x in (tmp_path / "ev.jsonl").read_text().splitlines()]
    replayed = [(e["step"], e["unit"]) for e in ev if e["event"] == "grant"]
    assert replayed == grants
    # Without the aux trace the preset is refused, saying what it needs.
    r = subprocess.run([replay_exe, str(tmp_path / "norms.csv"), "--preset", "gnmr-noise-floor"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--aux FILE" in r.stderr


@pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA device and a gnmr built with CUDA")
def test_the_cuda_aux_trace_is_the_cpu_runs_bit_for_bit(tmp_path):
    # The same aux partials: the finished aux norms (sqrt, correctly rounded
    # on both) are the same bits, so the files are identical.
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cuda").mkdir()
    _run(tmp_path / "cpu", device="cpu")
    _run(tmp_path / "cuda", device="cuda")
    assert (tmp_path / "cuda" / "aux.csv").read_bytes() == (tmp_path / "cpu" / "aux.csv").read_bytes()


def test_bad_aux_traces_are_refused(tmp_path):
    p = torch.nn.Parameter(torch.randn(4))
    plain = gnmr.Controller({"u": [p]}, preset="gnmr-calibrated")
    with pytest.raises(ValueError, match="reads no aux signal"):
        plain.trace(tmp_path / "n.csv", aux=tmp_path / "a.csv")
    assert not (tmp_path / "n.csv").exists()  # nothing opened
    ctl = gnmr.Controller({"u": [p]}, preset="gnmr-noise-floor")
    with pytest.raises(ValueError, match="another file"):
        ctl.trace(tmp_path / "n.csv", aux=tmp_path / "n.csv")
    with pytest.raises(ValueError, match="closes both"):
        ctl.trace(None, aux=tmp_path / "a.csv")


def test_reopening_the_same_trace_path_starts_it_cleanly(tmp_path):
    # The old writer's buffered rows are flushed before the path is
    # truncated, so none of them land in the new file afterwards.
    p = torch.nn.Parameter(torch.randn(4))
    ctl = gnmr.Controller({"u": [p]}, preset="gnmr-noise-floor")
    ctl.trace(tmp_path / "n.csv")
    for _ in range(3):
        p.grad = torch.randn(4)
        ctl.step(aux=torch.ones(1))
    ctl.trace(tmp_path / "n.csv", aux=tmp_path / "a.csv")
    p.grad = torch.randn(4)
    ctl.step(aux=torch.ones(1))
    ctl.trace(None)
    for name in ("n.csv", "a.csv"):
        data = (tmp_path / name).read_bytes()
        assert b"\x00" not in data
        lines = data.decode().splitlines()
        assert lines[0] == "step,u" and [x.split(",")[0] for x in lines[1:]] == ["4"]
