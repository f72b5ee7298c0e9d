"""A model moved to another device after its gnmr.Controller was built (the
Hugging Face Trainer moves it to the GPU in its constructor, after the
README's ``gnmr.Controller(model)``): on its next step the controller
rebuilds its core on the new device and carries its state there, bit for
bit, with the open event log and trace; a move gnmr cannot follow is
refused with a message that says what to do, before anything changes.

Without a GPU the move is stood in (``gnmr.controller._device_of``, the one
place the controller reads a tensor's device) three ways: another device
object for the same CPU (the core rebuilt, the state and the logs carried,
the decisions those of a controller that never moved), a device gnmr does
not run on (refused, nothing changed), and a CUDA device with the CUDA core
replaced by a recorder (built for the right index, loaded with the state,
the logs reopened to append). With a GPU (tests/python/gpu.sh runs this
file with GNMR_PY_REQUIRE_GPU=1) the real move is tested.
"""
from __future__ import annotations

import os

import pytest
import torch

import gnmr
import gnmr.controller as gc

HAVE_GPU = torch.cuda.is_available() and gnmr.cuda_built()


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _grads(model: torch.nn.Module, step: int) -> None:
    g = torch.Generator().manual_seed(1000 + step)
    for k, p in enumerate(model.parameters()):
        x = torch.randn(p.shape, generator=g) * 0.01
        if step == 30 and k == 2:
            x *= 1000.0  # a spike the default triggers on
        p.grad = x.to(p.device)


def test_a_controller_follows_its_model_with_state_and_logs(tmp_path, monkeypatch):
    moved, still = _model(), _model()
    a, b = gnmr.Controller(moved), gnmr.Controller(still)
    a.events(tmp_path / "events.jsonl")
    a.trace(tmp_path / "trace.csv")
    b.events(tmp_path / "events_b.jsonl")
    b.trace(tmp_path / "trace_b.csv")
    for step in range(1, 41):
        if step == 21:  # the "move": every watched tensor now reads as another device
            other = torch.device("cpu", 0)
            assert other != a.device
            monkeypatch.setattr(gc, "_device_of", lambda t: other)
        _grads(moved, step)
        _grads(still, step)
        sa, sb = a.step(), b.step()
        assert sa.step == sb.step == step
        assert torch.equal(a.decisions().scale, b.decisions().scale)
        assert torch.equal(a.decisions().flags, b.decisions().flags)
        for p, q in zip(moved.parameters(), still.parameters()):
            assert torch.equal(p.grad, q.grad)
    assert a.device == torch.device("cpu", 0)
    assert a.state_dict()["blob"].tolist() == b.state_dict()["blob"].tolist()
    a.close()
    b.close()
    # The logs went on in the same files: one header, every step once.
    assert (tmp_path / "trace.csv").read_text() == (tmp_path / "trace_b.csv").read_text()
    assert (tmp_path / "events.jsonl").read_text() == (tmp_path / "events_b.jsonl").read_text()
    assert '"event":"trigger"' in (tmp_path / "events.jsonl").read_text()


def test_a_move_gnmr_cannot_follow_is_refused_before_anything_changes(monkeypatch):
    # A device gnmr does not run on, stood in by "meta" (a real move there
    # replaces the Parameters instead of moving them in place, as .cuda()
    # does, so the stand-in says where the watched tensors now are).
    model = _model()
    ctl = gnmr.Controller(model)
    for step in range(1, 4):
        _grads(model, step)
        ctl.step()
    before = ctl.state_dict()["blob"].clone()
    monkeypatch.setattr(gc, "_device_of", lambda t: torch.device("meta"))
    _grads(model, 4)
    with pytest.raises(ValueError, match="runs on the CPU and on CUDA devices"):
        ctl.step()
    assert ctl.steps_done == 3 and ctl.device == torch.device("cpu")
    assert torch.equal(ctl.state_dict()["blob"], before)
    # An optimizer built on the moved model is refused the same way.
    with pytest.raises(ValueError, match="runs on the CPU and on CUDA devices"):
        gnmr.optim.AdamW(model.parameters(), controller=ctl)


def test_tensors_split_across_devices_are_refused(monkeypatch):
    model = _model()
    ctl = gnmr.Controller(model)
    first = next(model.parameters())
    monkeypatch.setattr(gc, "_device_of", lambda t: torch.device("cpu", 0) if t is first else t.device)
    _grads(model, 1)
    with pytest.raises(ValueError, match="move the whole model to one device"):
        ctl.step()
    assert ctl.steps_done == 0


class _RecordingCudaCore:
    """Stands in for the CUDA core: a host core underneath, and what it was
    asked to do recorded."""

    made = []

    def __init__(self, *args):
        self.index = args[-1]
        self.inner = gnmr._C.HostCore(*args[:-1])
        self.calls = []
        _RecordingCudaCore.made.append(self)

    def load(self, blob):
        self.calls.append(("load", bytes(blob)))
        self.inner.load(blob)

    def save(self):
        return self.inner.save()

    def open_events(self, path, null, append=False):
        self.calls.append(("open_events", path, append))

    def open_trace(self, path, append=False, last_step=0):
        self.calls.append(("open_trace", path, append, last_step))


def test_a_move_to_cuda_rebuilds_the_cuda_core_with_the_state(tmp_path, monkeypatch):
    model = _model()
    ctl = gnmr.Controller(model)
    ctl.events(tmp_path / "e.jsonl")
    ctl.trace(tmp_path / "t.csv")
    for step in range(1, 6):
        _grads(model, step)
        ctl.step()
    blob = bytes(ctl._core.save())
    _RecordingCudaCore.made.clear()
    monkeypatch.setattr(gc._C, "CudaCore", _RecordingCudaCore)
    monkeypatch.setattr(gc, "_device_of", lambda t: torch.device("cuda", 0))
    ctl._follow()  # what the next step does first
    core = _RecordingCudaCore.made[-1]
    assert ctl.device == torch.device("cuda", 0) and core.index == 0
    assert core.calls[0] == ("load", blob)
    assert ("open_events", os.fspath(tmp_path / "e.jsonl"), True) in core.calls
    assert ("open_trace", os.fspath(tmp_path / "t.csv"), True, 5) in core.calls
    assert bytes(ctl._core.save()) == blob


def test_a_model_moved_to_the_gpu_after_its_controller_is_followed():
    if not HAVE_GPU:
        if os.environ.get("GNMR_PY_REQUIRE_GPU") == "1":
            pytest.fail("GNMR_PY_REQUIRE_GPU=1 but there is no CUDA device or gnmr was built without CUDA")
        pytest.skip("needs a CUDA device and a gnmr built with CUDA")
    moved, native = _model(), _model()
    a = gnmr.Controller(moved)  # built on the CPU, as the README's recipe does
    for step in range(1, 11):  # a few steps on the CPU first
        _grads(moved, step)
        a.step()
    native.load_state_dict(moved.state_dict())
    moved.cuda()
    native.cuda()
    b = gnmr.Controller(native)
    b.load_state_dict(a.state_dict())
    for step in range(11, 41):
        _grads(moved, step)
        _grads(native, step)
        a.step()
        b.step()
        assert a.device.type == "cuda"
        assert torch.equal(a.decisions().flags, b.decisions().flags)
        assert torch.equal(a.decisions().scale, b.decisions().scale)
