"""Checkpoints at scale: model, gnmr.optim.AdamW and the controller saved
with torch.distributed.checkpoint by FSDP2 on 2 ranks, loaded on 1 rank
(unsharded) and on 4 (FSDP2 resharded); the resumed runs must take the
decisions of the uninterrupted one (the same flags, scales within the
sharded path's tolerance) and end at its weights.
"""
from __future__ import annotations

import pickle

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import gnmr
import sharded_runs as R
from test_sharded import SCALE_RTOL, WEIGHT_ATOL, rel

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available() or not gnmr.sharded.DTensor,
    reason="needs torch.distributed with gloo and DTensor")

SAVE_AT, STEPS = 14, 34


def _run(tmp, phase: str, world: int):
    mp.spawn(R.dcp_run, args=(world, R.free_port(), str(tmp), phase, str(tmp / "ckpt"), SAVE_AT, STEPS),
             nprocs=world, join=True)
    with open(tmp / f"{phase}{world}_rank0.pkl", "rb") as f:
        return pickle.load(f)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dcp")
    return tmp, _run(tmp, "save", 2)


@pytest.mark.parametrize("world", [1, 4], ids=["to-1-rank", "to-4-ranks"])
def test_dcp_save_on_2_load_resharded(saved, world):
    tmp, ref = saved
    got = _run(tmp, "load", world)
    assert got["resumed_at"] == SAVE_AT == ref["resumed_at"]
    assert len(got["rec"]) == len(ref["rec"]) == STEPS - SAVE_AT
    for a, b in zip(got["rec"], ref["rec"]):
        assert a["flags"] == b["flags"], f"step {a['step']}: {a['flags']} vs {b['flags']}"
        for u, (x, y) in enumerate(zip(a["scale"], b["scale"])):
            assert rel(x, y) <= SCALE_RTOL, f"step {a['step']} unit {u}: {x} vs {y}"
    # The resumed part holds the spikes: decisions that depend on the
    # restored means, not only on the first steps.
    assert any(r["summary"]["granted"] for r in ref["rec"])
    for name, w in ref["weights"].items():
        assert torch.allclose(got["weights"][name], w, rtol=0, atol=WEIGHT_ATOL), name
