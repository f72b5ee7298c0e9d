"""The same checks on CUDA tensors, plus what only the GPU path has: the
guarded AdamW captured in a CUDA graph and replayed (no host sync, no
allocation in its step), the lazy summary, re-planning when a gradient
buffer moves. Skipped without a CUDA device and a gnmr built with CUDA;
GNMR_PY_REQUIRE_GPU=1 (tests/python/gpu.sh) turns the skip into a failure.
"""
from __future__ import annotations

import copy
import os

import pytest
import torch
import torch.nn.functional as F

import gnmr
from conftest import (FAULTS, batch, comparable, make_model, reference, replay_events, train)

HAVE_GPU = torch.cuda.is_available() and gnmr.cuda_built()
if not HAVE_GPU and os.environ.get("GNMR_PY_REQUIRE_GPU") == "1":
    raise RuntimeError(f"GNMR_PY_REQUIRE_GPU=1 but torch.cuda.is_available()="
                       f"{torch.cuda.is_available()}, gnmr.cuda_built()={gnmr.cuda_built()}")
pytestmark = pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA device and a gnmr built with CUDA")

DEV = "cuda"


@pytest.mark.parametrize("guarded", [False, True], ids=["ctl.step+torch-adamw", "gnmr-adamw"])
def test_cuda_decisions_equal_the_cpp_controller(tmp_path, reference_exe, replay_exe, guarded):
    model = make_model(device=DEV)
    ctl = gnmr.Controller(model, "gnmr", tau=2.5)
    if guarded:
        opt = gnmr.optim.AdamW(model.parameters(), lr=3e-3, controller=ctl)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    trace, events = tmp_path / "trace.csv", tmp_path / "events.jsonl"
    ctl.trace(trace)
    ctl.events(events)
    got = train(model, ctl, opt, 260, guarded=guarded, device=DEV)
    ctl.close()
    want = reference(reference_exe, trace, "gnmr", {"tau": 2.5})
    assert comparable(got) == want
    assert sum(s["nonfinite"] for s, _, _ in got) == sum(k != "x1000" for k, _ in FAULTS.values())
    replayed = tmp_path / "replayed.jsonl"
    replay_events(replay_exe, trace, "gnmr", {"tau": 2.5}, replayed)
    assert events.read_bytes() == replayed.read_bytes()


def synthetic_grads(model, t):
    g = torch.Generator().manual_seed(500 + t)
    out = [torch.randn(p.shape, generator=g) * 0.01 for p in model.parameters()]
    if t == 7:
        out[2].view(-1)[3] = float("nan")
    return out


def test_cuda_adamw_is_the_cpu_adamw_bit_for_bit():
    cpu = make_model(3)
    gpu = copy.deepcopy(cpu).to(DEV)
    ca, cg = gnmr.Controller(cpu, "none"), gnmr.Controller(gpu, "none")
    oa = gnmr.optim.AdamW(cpu.parameters(), lr=1e-2, weight_decay=0.1, controller=ca)
    og = gnmr.optim.AdamW(gpu.parameters(), lr=1e-2, weight_decay=0.1, controller=cg)
    for t in range(12):
        for p, q, g in zip(cpu.parameters(), gpu.parameters(), synthetic_grads(cpu, t)):
            p.grad = g.clone()
            q.grad = g.to(DEV)
        oa.step()
        og.step()
        for p, q in zip(cpu.parameters(), gpu.parameters()):
            assert torch.equal(p, q.cpu()), f"step {t}"
    assert cg.last_summary.nonfinite == 0 and int(cg.decisions().flags[2]) == 0
    assert torch.isfinite(gpu.fc2.weight).all()


def test_cuda_adamw_equals_torch_adamw_when_nothing_triggers():
    a = make_model(1, DEV)
    b = copy.deepcopy(a)
    ctl = gnmr.Controller(a)
    opt_a = gnmr.optim.AdamW(a.parameters(), lr=5e-3, controller=ctl)
    opt_b = torch.optim.AdamW(b.parameters(), lr=5e-3)
    for t in range(40):
        for m, opt in ((a, opt_a), (b, opt_b)):
            x, y = batch(t, DEV)
            opt.zero_grad()
            F.mse_loss(m(x), y).backward()
            opt.step()
        assert ctl.last_summary.triggered == 0
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pa, pb, rtol=2e-5, atol=2e-6)


def test_guarded_adamw_step_captured_in_a_cuda_graph():
    """No host sync and no allocation in the step: it captures, and the
    replays give the eager twin's weights bit for bit, a NaN step included."""
    model = make_model(4, DEV)
    twin = copy.deepcopy(model)
    ctl, ctl_t = gnmr.Controller(model), gnmr.Controller(twin)
    opt = gnmr.optim.AdamW(model.parameters(), lr=1e-2, controller=ctl)
    opt_t = gnmr.optim.AdamW(twin.parameters(), lr=1e-2, controller=ctl_t)
    for p in list(model.parameters()) + list(twin.parameters()):
        p.grad = torch.zeros_like(p)  # static gradient buffers

    def feed(t):
        for p, q, g in zip(model.parameters(), twin.parameters(), synthetic_grads(model, t)):
            p.grad.copy_(g)
            q.grad.copy_(g)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for t in range(3):  # warm-up: plans built, state allocated
            feed(t)
            opt.step()
            opt_t.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        opt.step()
    assert ctl.replans == 1
    for t in range(3, 15):
        feed(t)
        graph.replay()
        opt_t.step()
        torch.cuda.synchronize()
        for p, q in zip(model.parameters(), twin.parameters()):
            assert torch.equal(p, q), f"replay at step {t}"
    assert ctl.steps_done == ctl_t.steps_done == 15
    assert ctl.last_summary.step == 15  # read from the device after the replays
    assert torch.isfinite(model.fc2.weight).all()


def test_controller_step_is_refused_under_capture():
    model = make_model(5, DEV)
    ctl = gnmr.Controller(model)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    ctl.step()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        with pytest.raises(RuntimeError, match="cannot run inside CUDA graph capture"):
            ctl.step()
    assert ctl.steps_done == 1


def test_lazy_summaries_survive_the_readback_ring():
    model = make_model(6, DEV)
    ctl = gnmr.Controller(model)
    opt = gnmr.optim.AdamW(model.parameters(), lr=1e-3, controller=ctl)
    kept = []
    for t in range(3 * gnmr._C.READBACK_SLOTS):
        x, y = batch(t, DEV)
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
        kept.append(ctl.last_summary)
    torch.cuda.synchronize()
    assert all(s.ready for s in kept)
    assert [s.step for s in kept] == list(range(1, len(kept) + 1))


def test_replans_only_when_a_gradient_buffer_moves():
    model = make_model(7, DEV)
    ctl = gnmr.Controller(model)
    opt = gnmr.optim.AdamW(model.parameters(), lr=1e-3, controller=ctl)
    for t in range(6):
        x, y = batch(t, DEV)
        opt.zero_grad()  # in place: the buffers stay
        F.mse_loss(model(x), y).backward()
        opt.step()
    assert ctl.replans == 1
    model.fc1.weight.grad = model.fc1.weight.grad.clone()  # a new buffer
    opt.step()
    assert ctl.replans == 2
    s = ctl.step()  # torch-optimizer path on CUDA: waits for its decisions
    assert s.ready and s.step == 8


def test_cuda_checkpoint_round_trip_and_a_cpu_state_on_cuda():
    model = make_model(8, DEV)
    ctl = gnmr.Controller(model, "gnmr-ladder", tau=2.5)
    opt = gnmr.optim.AdamW(model.parameters(), lr=3e-3, controller=ctl)
    first = train(model, ctl, opt, 100, guarded=True, device=DEV)
    sd = {"model": copy.deepcopy(model.state_dict()), "optim": copy.deepcopy(opt.state_dict()),
          "gnmr": ctl.state_dict()}
    rest_a = train(model, ctl, opt, 60, guarded=True, device=DEV, start=100)
    m2 = make_model(8, DEV)
    m2.load_state_dict(sd["model"])
    c2 = gnmr.Controller(m2, "gnmr-ladder", tau=2.5)
    o2 = gnmr.optim.AdamW(m2.parameters(), lr=3e-3, controller=c2)
    o2.load_state_dict(sd["optim"])
    c2.load_state_dict(sd["gnmr"])
    rest_b = train(m2, c2, o2, 60, guarded=True, device=DEV, start=100)
    assert rest_a == rest_b and len(first) == 100
    for p, q in zip(model.parameters(), m2.parameters()):
        assert torch.equal(p, q)
    # The host blob loads on the device (same preset, same units).
    cpu_model = make_model(8)
    cpu_ctl = gnmr.Controller(cpu_model, "gnmr-ladder")
    c2.load_state_dict({**cpu_ctl.state_dict(), "overrides": {}})
    assert c2.steps_done == 0


def test_bf16_gradients_and_multi_tensor_units():
    model = make_model(9, DEV).to(torch.bfloat16)
    ctl = gnmr.Controller({"a": model.fc1, "b": model.fc2, "c": model.out})
    x, y = batch(0, DEV)
    F.mse_loss(model(x.bfloat16()).float(), y).backward()
    want = [torch.sqrt(sum((p.grad.double() ** 2).sum() for p in m.parameters())).item()
            for m in (model.fc1, model.fc2, model.out)]
    ctl.step()
    got = ctl.reports()["norm"].tolist()
    for g, w in zip(got, want):
        assert g == pytest.approx(w, rel=1e-6)


def _fsdp_cuda_rank(rank, port, out):
    """FSDP2 on one GPU with NCCL (world 1): the sharded path's CUDA branch
    (local partials on the device, the all-gather on NCCL, the step on the
    reduced device array), against the same model unsharded."""
    import pickle

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=port, rank=0, world_size=1)
    try:
        recs = []
        for sharded in (False, True):
            model = make_model(3, device=DEV)
            if sharded:
                mesh = init_device_mesh("cuda", (1,))
                for name in ("fc1", "fc2", "out"):
                    fully_shard(getattr(model, name), mesh=mesh)
                fully_shard(model, mesh=mesh)
            ctl = gnmr.Controller(model, "gnmr", tau=2.5, warmup=5)
            assert ctl.sharded == sharded
            opt = gnmr.optim.AdamW(model.parameters(), lr=3e-3, controller=ctl)
            rec = []
            for t in range(30):
                x, y = batch(t, DEV)
                opt.zero_grad()
                (F.mse_loss(model(x), y) * (1e3 if t in (18, 19) else 1.0)).backward()
                opt.step()
                d = ctl.decisions()
                rec.append((d.flags.tolist(), d.scale.tolist()))
            recs.append(rec)
        with open(out, "wb") as f:
            pickle.dump(recs, f)
    finally:
        dist.destroy_process_group()


def test_fsdp2_on_cuda_takes_the_unsharded_decisions(tmp_path):
    import pickle

    import torch.distributed as dist
    import torch.multiprocessing as mp

    from sharded_runs import free_port

    if not dist.is_nccl_available():
        pytest.skip("no NCCL")
    out = tmp_path / "fsdp_cuda.pkl"
    mp.spawn(_fsdp_cuda_rank, args=(free_port(), str(out)), nprocs=1, join=True)
    plain, sharded = pickle.load(open(out, "rb"))
    assert any(any(f) for f, _ in plain[18:20])
    for (fa, sa), (fb, sb) in zip(sharded, plain):
        assert fa == fb
        assert all(abs(a - b) <= 1e-5 * max(abs(b), 1e-30) for a, b in zip(sa, sb))
