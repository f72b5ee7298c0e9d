"""The sharded path on the CPU (gloo): FSDP2 on 2 processes, tensor parallel
on 2, FSDP2 x TP on a 2x2 mesh (4 processes), each against the unsharded
run on the same global batches (tests/python/sharded_runs.py).

What must hold: every rank takes bitwise the same decisions (scale bits,
flags, every summary field, the reported norms); the decisions equal the
unsharded run's: the same flags on every unit and step, scales within
SCALE_RTOL (docs/python.md, "At scale", says why that tolerance); a NaN in
one rank's shard makes every rank skip that unit, the unit's weights stay as
they were, and each rank's event log names it.
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Tuple

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import gnmr
import sharded_runs as R

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available() or not gnmr.sharded.DTensor,
    reason="needs torch.distributed with gloo and DTensor")

STEPS = 36
# Measured: 2.9e-7 (norms), 2.4e-7 (scales); the bound leaves room for
# other BLAS builds while staying far below any threshold's granularity.
SCALE_RTOL = 1e-5
WEIGHT_ATOL = 1e-5
_cache: Dict[Tuple[Any, ...], List[Dict[str, Any]]] = {}


def spawn(tmp_path_factory, layout: str, world: int, guarded: bool = True,
          nan: bool = False) -> List[Dict[str, Any]]:
    key = (layout, world, guarded, nan)
    if key not in _cache:
        out = tmp_path_factory.mktemp(f"{layout}{world}")
        mp.spawn(R.run, args=(world, R.free_port(), str(out), layout, guarded, STEPS, nan),
                 nprocs=world, join=True)
        _cache[key] = [R.load(str(out), r) for r in range(world)]
    return _cache[key]


def rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-30)


def check_ranks_identical(runs: List[Dict[str, Any]]) -> None:
    # repr: exact for floats, and a NaN norm compares equal to itself.
    first = repr([(r["scale_bits"], r["flags"], r["summary"], r["norm"]) for r in runs[0]["rec"]])
    for k, run in enumerate(runs[1:], 1):
        assert run["sharded"]
        assert repr([(r["scale_bits"], r["flags"], r["summary"], r["norm"]) for r in run["rec"]]) == first, \
            f"rank {k} decided differently from rank 0"


def check_matches_reference(run: Dict[str, Any], ref: Dict[str, Any]) -> None:
    assert len(run["rec"]) == len(ref["rec"]) == STEPS
    for a, b in zip(run["rec"], ref["rec"]):
        assert a["flags"] == b["flags"], f"step {a['step']}: flags {a['flags']} vs {b['flags']}"
        for u, (x, y) in enumerate(zip(a["scale"], b["scale"])):
            assert rel(x, y) <= SCALE_RTOL, f"step {a['step']} unit {u}: scale {x} vs {y}"
    for name, w in ref["weights"].items():
        assert torch.allclose(run["weights"][name], w, rtol=0, atol=WEIGHT_ATOL), name
    # Not a test of nothing: the spikes were acted on.
    acted = {r["step"] for r in ref["rec"] if r["summary"]["granted"] or r["summary"]["nonfinite"]}
    assert {18, 31} <= acted


@pytest.mark.parametrize("guarded", [True, False], ids=["gnmr-adamw", "torch-adamw"])
def test_fsdp2_two_ranks(tmp_path_factory, guarded):
    runs = spawn(tmp_path_factory, "fsdp", 2, guarded, nan=True)
    ref = spawn(tmp_path_factory, "ref", 1, guarded, nan=True)[0]
    check_ranks_identical(runs)
    check_matches_reference(runs[0], ref)


def test_fsdp2_nan_in_one_rank_skips_the_unit_everywhere(tmp_path_factory):
    runs = spawn(tmp_path_factory, "fsdp", 2, True, nan=True)
    unit = "fc1.weight"
    for rank, run in enumerate(runs):
        rec = run["rec"][R.NAN_STEP]
        names = list(run["weights"])
        u = names.index(unit)
        assert rec["flags"][u] & gnmr.Flag.NONFINITE and rec["flags"][u] & gnmr.Flag.SKIP, rank
        assert not rec["changed"][unit], f"rank {rank}: {unit} was updated on its NaN step"
        assert any(rec["changed"][n] for n in names if n != unit), "the other units were updated"
        events = [json.loads(line) for line in run["events"].splitlines()]
        # The log counts controller steps from 1: training step t is step t + 1.
        hit = [e for e in events if e.get("step") == R.NAN_STEP + 1 and e.get("name") == unit
               and e.get("event") == "nonfinite"]
        assert hit, f"rank {rank}: the event log does not name {unit} at step {R.NAN_STEP}"
        assert all(torch.isfinite(w).all() for w in run["weights"].values())


def test_tensor_parallel_two_ranks(tmp_path_factory):
    runs = spawn(tmp_path_factory, "tp", 2)
    check_ranks_identical(runs)
    check_matches_reference(runs[0], spawn(tmp_path_factory, "ref", 1)[0])


def test_fsdp2_x_tp_on_a_2x2_mesh(tmp_path_factory):
    runs = spawn(tmp_path_factory, "2d", 4)
    check_ranks_identical(runs)
    check_matches_reference(runs[0], spawn(tmp_path_factory, "ref", 1)[0])


def test_unsharded_controller_is_not_sharded(tmp_path_factory):
    assert not spawn(tmp_path_factory, "ref", 1)[0]["sharded"]
