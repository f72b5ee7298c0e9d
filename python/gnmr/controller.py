"""gnmr.Controller: one GNMR controller over a model's gradients.

Call :meth:`Controller.step` after backward (after the gradient all-reduce)
and before the optimizer: it reads every unit's gradients in place,
computes their norms, runs one step of the controller (gnmr's C++ library:
the host controller for CPU tensors, the CUDA backend for CUDA tensors) and
applies the decisions to the gradients. docs/python.md is the guide.
"""
from __future__ import annotations

import copy
import os
import weakref
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple, Union

import torch

from . import _C, _units, sharded
from .summary import Decisions, Flag, StepSummary

Override = Union[float, int, str]


def _device_of(t: torch.Tensor) -> torch.device:
    """Where a watched tensor lives, a CUDA device always with its index
    (what Controller._follow compares; one place, so that a test can stand
    in another device on a machine without one)."""
    d = t.device
    if d.type == "cuda" and d.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return d


def presets() -> List[str]:
    """The preset names :class:`Controller` accepts, in a stable order."""
    return list(_C.presets())


def preset_overrides(preset: str) -> List[str]:
    """The override keywords ``preset`` accepts (ValueError if unknown)."""
    return list(_C.preset_overrides(preset))


def is_global(preset: str) -> bool:
    """True for presets whose rule is on the global norm (clip, zclip,
    skip-step): their controller has one unit, ``global``, over every
    tensor. ValueError for an unknown name."""
    return bool(_C.is_global(preset))


class Controller:
    """A GNMR controller (or a peer's method, by preset) over torch tensors.

    Args:
        units: what the recoverable units are: an ``nn.Module`` (one unit per
            parameter that requires grad), a mapping ``name -> parameters``
            (a tensor, a module or an iterable of tensors: several tensors
            recover together), an iterable of parameter groups (dicts with
            ``"params"`` and an optional ``"name"``) or of tensors. All on
            one device, CPU or CUDA.
        preset: a name from :func:`presets`; ``"default"`` (the default)
            is the best measured configuration, the stabilizer with the
            calibrated promotion inside it (``"stabilizer+gnmr-calibrated"``,
            docs/presets.md, "The default"); ``"gnmr"`` is GNMR's own rule.
            Global presets (:func:`is_global`) get one unit over every tensor.
        **overrides: the preset's parameters, named as gnmr::presets::Options
            in C++: ``tau``, ``delta``, ``warmup``, ``window``,
            ``delta_window``, ``beta``, ``max_o``, ``lock``, ``cooldown``,
            ``kappa``, ``max_norm``, ``z``, ``clip_factor``, ``mean``,
            ``restart_every`` (stabilizer, spam), ``rate``, ``floor``,
            ``ceiling`` (gnmr-calibrated, default), ``noise_c``
            (gnmr-noise-floor, whose steps take ``aux``: :meth:`step`).

    Raises:
        ValueError: an unknown preset or override, an override the preset
            has no use for or out of range (the C++ library's message), or
            unusable units. TypeError for arguments of the wrong type.

    Determinism: the decisions are a function of the norms alone, and the
    norms of the gradients' bits and layout (host: double accumulation per
    tensor, one rounding per unit; CUDA: NormPlan's fixed-order reduction),
    so the same gradients give the same decisions on every run and rank.
    Host and CUDA norms may differ in the last bit; the decisions on a
    recorded trace of norms are the same on both (docs/python.md).
    """

    def __init__(self, units: Any, preset: str = "default", **overrides: Override) -> None:
        if not isinstance(preset, str):
            raise TypeError(f"gnmr: preset must be a str, got {type(preset).__name__}")
        _C.check_options(preset, overrides)
        layout = _units.resolve(units, collapse=_C.is_global(preset))
        self._preset = preset
        self._overrides: Dict[str, Override] = dict(overrides)
        self._names = layout.names
        self._tensors = layout.tensors
        self._unit_of = {id(t): u for t, u in zip(layout.tensors, layout.units)}
        self._members: List[List[torch.Tensor]] = [[] for _ in layout.names]
        for t, u in zip(layout.tensors, layout.units):
            self._members[u].append(t)
        self._device = layout.device
        # DTensor parameters (FSDP2, tensor parallel): the sharded path
        # (gnmr/sharded.py) reads their local shards and reduces the
        # per-unit sums over the mesh; the C++ core sees the local shards.
        self._sharded: Optional[sharded.ShardedUnits] = None
        core_tensors = layout.tensors
        if sharded.any_dtensor(layout.tensors):
            self._sharded = sharded.ShardedUnits(layout.tensors, layout.labels)
            core_tensors = self._sharded.local_params()
            self._partials = torch.zeros(len(layout.names), dtype=torch.float32, device=self._device)
        self._core_args = (preset, self._overrides, core_tensors, layout.units, layout.labels, layout.names)
        self._device, self._core = self._make_core(self._device)
        # The logs open on the core (path and options), so that a move to
        # another device carries them on (see _follow).
        self._events_open: Optional[tuple] = None
        self._trace_open: Optional[Tuple[str, str]] = None  # (path, aux path or "")
        self._last: Optional[StepSummary] = None
        self._decisions: Optional[Decisions] = None  # host copy of the latest decisions
        self._pending_aux: Optional[torch.Tensor] = None  # set_aux(): the next step's aux
        self._ring: List[Optional[weakref.ref]] = [None] * _C.READBACK_SLOTS

    def _make_core(self, device: torch.device):
        """The C++ core for the watched tensors on ``device``: the host
        controller on the CPU, the CUDA backend on a GPU. ValueError for any
        other device type (gnmr runs on the CPU and on CUDA)."""
        if device.type == "cuda":
            index = device.index if device.index is not None else torch.cuda.current_device()
            return torch.device("cuda", index), _C.CudaCore(*self._core_args, index)
        if device.type == "cpu":
            return device, _C.HostCore(*self._core_args)
        raise ValueError(f"gnmr: the watched tensors are on {device}: gnmr's controller runs on the CPU "
                         f"and on CUDA devices")

    def _follow(self) -> None:
        """Follows the model to its device. A controller fixes its device
        when it is built; a framework may move the model afterwards (the
        Hugging Face Trainer moves it to the GPU when it is constructed, after
        ``gnmr.Controller(model)``). On the first step on a new device the
        core is rebuilt there and the state carried across through the
        canonical blob, bit for bit, with the open event log and trace (they
        go on in the same files). Tensors split across devices, sharded
        (DTensor) units and devices gnmr does not run on are refused with a
        ValueError that says what to do; nothing is changed then."""
        device = _device_of(self._tensors[0])
        if device == self._device:
            return
        for t in self._tensors:
            other = _device_of(t)
            if other != device:
                raise ValueError(f"gnmr: the watched tensors moved and are now on {device} and {other}: "
                                 f"move the whole model to one device")
        if self._sharded is not None:
            raise ValueError(f"gnmr: the sharded (DTensor) units moved from {self._device} to {device}: "
                             f"build the gnmr.Controller after the model is placed")
        blob = bytes(self._core.save())
        last_trace = int(self._core.last_trace_step) if self._trace_open is not None else 0
        new_device, core = self._make_core(device)
        core.load(blob)
        # Every pending log line of the old core is written before the new
        # core appends to the same files.
        self._core.flush()
        self._core.close_events()
        self._core.close_trace()
        if self._events_open is not None:
            core.open_events(self._events_open[0], self._events_open[1], append=True)
        if self._trace_open is not None:
            path, aux = self._trace_open
            if aux:
                core.open_trace(path, append=True, last_step=last_trace, aux=aux)
            else:
                core.open_trace(path, append=True, last_step=last_trace)
        self._core, self._device = core, new_device
        self._ring = [None] * _C.READBACK_SLOTS
        self._decisions = None

    # ------------------------------------------------------------ properties ---
    @property
    def preset(self) -> str:
        """The preset name."""
        return self._preset

    @property
    def overrides(self) -> Dict[str, Override]:
        """The overrides given at construction."""
        return dict(self._overrides)

    @property
    def unit_names(self) -> List[str]:
        """One name per unit, in unit order (the trace's columns)."""
        return list(self._names)

    @property
    def num_units(self) -> int:
        """Number of units (1 for a global preset)."""
        return len(self._names)

    @property
    def device(self) -> torch.device:
        """The device of the watched tensors."""
        return self._device

    @property
    def steps_done(self) -> int:
        """Controller steps so far (restored by :meth:`load_state_dict`).
        Synchronises on CUDA."""
        return int(self._core.steps_done)

    @property
    def max_in_recovery(self) -> int:
        """The budget: how many units may be in recovery at once
        (0xffffffff for an unlimited budget)."""
        return int(self._core.max_in_recovery)

    @property
    def replans(self) -> int:
        """CUDA only: how many times the norm plan was rebuilt because a
        gradient buffer moved (each costs an allocation and a sync); 0 on
        the CPU."""
        return int(self._core.replans) if self._device.type == "cuda" else 0

    @property
    def last_summary(self) -> Optional[StepSummary]:
        """The summary of the latest step (None before the first)."""
        return self._last

    def parameters(self) -> Iterator[torch.Tensor]:
        """Every watched tensor, in unit order."""
        return iter(list(self._tensors))

    def unit_of(self, tensor: torch.Tensor) -> int:
        """The unit index of a watched tensor (ValueError if not watched)."""
        try:
            return self._unit_of[id(tensor)]
        except KeyError:
            raise ValueError("gnmr: this tensor is not watched by the controller") from None

    # ------------------------------------------------------------------ step ---
    def step(self, optimizer: Optional[torch.optim.Optimizer] = None, *,
             aux: Optional[torch.Tensor] = None) -> StepSummary:
        """One controller step over the current gradients, applied to them.

        Per unit, from its tensors' ``.grad`` (read in place): the norm, the
        controller's decision, then in place: a skipped unit's tensors get
        ``grad = None`` (every tensor's on a suggested global skip), so any
        torch optimizer leaves them unchanged; a clipped unit's gradients
        are scaled. Tensors without a gradient count as zero (a unit with
        none has norm 0: not a sample). With ``optimizer``, the moments of
        units flagged RESET_MOMENTS are reset too (:meth:`reset_moments`).

        On CUDA the norms and the controller run on the current stream
        without allocation, and the step waits for its decisions (a sync
        with the stream: a host decision is the only way to make a torch
        optimizer skip a tensor); use :class:`gnmr.optim.AdamW` for a step
        with no sync at all. Not allowed inside CUDA graph capture.

        ``aux``: each unit's aux signal as partials (a float32 tensor of
        ``num_units`` values on the controller's device), which a trigger
        that reads it needs (:attr:`needs_aux`): for ``gnmr-noise-floor``,
        the sum of squares of the quantization noise in each unit's gradient
        (``gnmr.integrations.nvfp4.noise_partials``). Other presets ignore it.
        With sharded tensors, give the values summed over the ranks (the
        gradient partials are reduced here; the aux ones are the caller's).

        Raises ValueError (nothing changed) when a gradient is unusable:
        sparse, not dense, or not float32/bfloat16/float16, or when ``aux``
        is not such a tensor; RuntimeError (nothing changed) when the preset
        needs ``aux`` and none is given.
        """
        if optimizer is not None:
            _check_optimizer(optimizer)  # before anything changes
        s = self._step(apply=True, aux=aux)
        if optimizer is not None:
            self.reset_moments(optimizer)
        return s

    @property
    def sharded(self) -> bool:
        """True when the watched tensors are DTensors (FSDP2, tensor
        parallel): the norms are then reduced over their device mesh."""
        return self._sharded is not None

    def set_aux(self, aux: Optional[torch.Tensor]) -> None:
        """Gives the next step its ``aux`` (as :meth:`step`'s ``aux``), for
        a step this controller does not take itself: that of
        :class:`gnmr.optim.AdamW` (``ctl.set_aux(nvfp4.noise_partials(model,
        ctl)); opt.step()``). Used by the next step only; ``None`` clears it.
        The tensor is read when that step runs."""
        if aux is not None and not isinstance(aux, torch.Tensor):
            raise TypeError(f"gnmr: aux must be a tensor or None, got {type(aux).__name__}")
        self._pending_aux = aux

    @property
    def needs_aux(self) -> bool:
        """Whether the preset's trigger reads each unit's aux signal
        (``gnmr-noise-floor``): its steps then need ``step(aux=...)``."""
        return bool(self._core.needs_aux)

    def _step(self, apply: bool, grads: Optional[List[Optional[torch.Tensor]]] = None,
              aux: Optional[torch.Tensor] = None) -> StepSummary:
        """One step; ``grads``: the sharded path's local gradients when the
        caller (gnmr.optim.AdamW) has gathered them already; ``aux``: the
        units' aux partials (:meth:`step`)."""
        if aux is None:
            aux = self._pending_aux
        if aux is None and self._core.needs_aux:
            raise RuntimeError(f"gnmr: preset {self._core.name!r} needs each unit's aux signal: "
                               "Controller.step(aux=...) or Controller.set_aux() before the step "
                               "(docs/algorithm.md, Noise-floor trigger)")
        self._decisions = None
        self._follow()
        sh = self._sharded
        if sh is not None and grads is None:
            grads = sh.gather_grads()
        if self._device.type != "cuda":
            if sh is None:
                s = StepSummary(self._core.step(apply, aux))
            else:  # local partials, one all-gather over the mesh, the step on the sums
                self._core.local_partials(grads, self._partials)
                s = StepSummary(self._core.step_reduced(sh.reduce(self._partials), aux))
        else:
            stream = torch.cuda.current_stream(self._device).cuda_stream
            if not self._core.capturing(stream):
                # The slot this step will reuse: read what an unread summary
                # still needs from it first.
                ref = self._ring[self._core.next_slot()]
                old = ref() if ref is not None else None
                if old is not None:
                    old._load()
            elif apply and sh is not None:
                raise RuntimeError("gnmr: Controller.step() cannot run inside CUDA graph capture; "
                                   "capture gnmr.optim.AdamW.step() instead")
            if sh is None:
                slot = self._core.step(stream, apply, aux)
            else:
                self._core.local_partials(grads, self._partials, stream)
                slot = self._core.step_reduced(sh.reduce(self._partials), stream, aux)
            if slot >= 0:
                core = self._core
                s = StepSummary(fetch=lambda: core.slot_summary(slot), ready=lambda: core.ready(slot))
                self._ring[slot] = weakref.ref(s)
            else:  # captured: read the device summary when asked (after replay)
                s = StepSummary(fetch=self._core.copy_summary)
        if apply and sh is not None:  # DTensor gradients: the decisions applied here, not in C++
            d = self.decisions()
            sh.apply(d.scale.tolist(), d.flags.tolist(), self._unit_of, int(Flag.SKIP), bool(s.skip_step))
        self._pending_aux = None  # used (a step that raised keeps it)
        self._last = s
        return s

    # -------------------------------------------------------------- decisions ---
    def decisions(self) -> Decisions:
        """The latest step's decisions, one per unit, as CPU tensors. On
        CUDA this waits for that step's decisions (already there after
        :meth:`step`; a sync after :class:`gnmr.optim.AdamW`'s step)."""
        if self._decisions is None:
            scale, flags = self._core.decisions()
            self._decisions = Decisions(scale, flags)
        return self._decisions

    def reports(self) -> Dict[str, torch.Tensor]:
        """The latest step's full per-unit report as CPU tensors: norm,
        mean, ratio, delta, risk, scale (float32), flags, lock_left (int32).
        Synchronises on CUDA."""
        return dict(self._core.reports())

    def promoted(self, name: str) -> bool:
        """Whether unit ``name`` carries PROMOTE in the latest decisions: a
        model's forward reads it to run that unit's operator in higher
        precision on the next step. KeyError for an unknown name."""
        try:
            u = self._names.index(name)
        except ValueError:
            raise KeyError(f"gnmr: no unit named {name!r}") from None
        return bool(int(self.decisions().flags[u]) & Flag.PROMOTE)

    def promoted_units(self) -> List[str]:
        """Names of the units carrying PROMOTE in the latest decisions."""
        flags = self.decisions().flags
        return [n for n, f in zip(self._names, flags.tolist()) if f & Flag.PROMOTE]

    def reset_moments(self, optimizer: torch.optim.Optimizer) -> int:
        """Resets, in ``optimizer``'s state, the moments of every tensor of
        the units flagged RESET_MOMENTS in the latest decisions, as a fresh
        optimizer would have them: Adam-family ``exp_avg``, ``exp_avg_sq``,
        ``max_exp_avg_sq`` and any other state tensor shaped like the
        parameter are zeroed in place, ``step`` restarts at 0, SGD's
        ``momentum_buffer`` is dropped. Returns the number of tensors reset.
        Call it before ``optimizer.step()`` (``step(optimizer)`` does).
        :class:`gnmr.optim.AdamW` resets its own moments: ValueError."""
        _check_optimizer(optimizer)
        flags = self.decisions().flags.tolist()
        done = 0
        with torch.no_grad():
            for u, f in enumerate(flags):
                if not f & Flag.RESET_MOMENTS:
                    continue
                for p in self._members[u]:
                    st = optimizer.state.get(p)
                    if st:
                        _reset_state(st, p)
                        done += 1
        return done

    # ----------------------------------------------------------- checkpoints ---
    def state_dict(self) -> Dict[str, Any]:
        """The controller's state for ``torch.save``: the versioned,
        checksummed C++ state blob (a uint8 tensor) with the preset, the
        overrides and the unit names it belongs to. Synchronises on CUDA."""
        blob = bytes(self._core.save())
        return {
            "format": "gnmr.Controller",
            "version": 1,
            "state_version": int(_C.STATE_FORMAT_VERSION),
            "preset": self._preset,
            "overrides": dict(self._overrides),
            "unit_names": list(self._names),
            "blob": torch.frombuffer(bytearray(blob), dtype=torch.uint8).clone(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict`'s output. Raises ValueError, leaving
        the controller unchanged, when it is not a gnmr state, was saved by
        another preset or for other units, or the blob is truncated,
        corrupted or of another policy layout (the C++ message). Other
        overrides than at saving are allowed (retuning on resume)."""
        if not isinstance(state, Mapping):
            raise TypeError(f"gnmr: load_state_dict needs a mapping, got {type(state).__name__}")
        for k in ("format", "version", "preset", "unit_names", "blob"):
            if k not in state:
                raise ValueError(f"gnmr: load_state_dict: missing key {k!r}")
        if state["format"] != "gnmr.Controller" or state["version"] != 1:
            raise ValueError(f"gnmr: load_state_dict: not a gnmr.Controller state (format "
                             f"{state['format']!r}, version {state['version']!r})")
        if state["preset"] != self._preset:
            raise ValueError(f"gnmr: load_state_dict: saved by preset {state['preset']!r}, this "
                             f"controller is {self._preset!r}")
        names = list(state["unit_names"])
        if names != self._names:
            diff = next((i for i, (a, b) in enumerate(zip(names, self._names)) if a != b),
                        min(len(names), len(self._names)))
            raise ValueError(f"gnmr: load_state_dict: unit names differ ({len(names)} saved, "
                             f"{len(self._names)} here; first difference at unit {diff})")
        blob = state["blob"]
        if isinstance(blob, torch.Tensor):
            if blob.dtype != torch.uint8 or blob.dim() != 1:
                raise ValueError("gnmr: load_state_dict: blob must be a 1-D uint8 tensor")
            blob = blob.cpu().numpy().tobytes()
        elif not isinstance(blob, (bytes, bytearray)):
            raise ValueError(f"gnmr: load_state_dict: blob must be a uint8 tensor or bytes, got "
                             f"{type(blob).__name__}")
        self._core.load(bytes(blob))
        self._last = None
        self._decisions = None

    def reset(self) -> None:
        """Back to the state at construction (every mean and lock forgotten)."""
        self._core.reset()
        self._last = None
        self._decisions = None

    # --------------------------------------------------------------- logging ---
    def events(self, path: Optional[Union[str, os.PathLike]], *, nonfinite_as_null: bool = False) -> None:
        """Writes the JSON Lines event log (gnmr::EventLog: trigger, grant,
        deny, release, non-finite, global skip) of every later step to
        ``path`` (truncated); None closes it. On CUDA the lines are written
        a step late from pinned copies (no sync); :meth:`flush` writes the
        rest. OSError if the file cannot be written."""
        if path is None:
            self._core.close_events()
            self._events_open = None
        else:
            self._core.open_events(os.fspath(path), bool(nonfinite_as_null))
            self._events_open = (os.fspath(path), bool(nonfinite_as_null))

    def trace(self, path: Optional[Union[str, os.PathLike]], *,
              aux: Optional[Union[str, os.PathLike]] = None) -> None:
        """Writes the per-unit norm trace CSV (gnmr::TraceWriter) that
        ``gnmr-replay`` reads, one row per later step, to ``path``
        (truncated); None closes it. On CUDA rows are written a step late
        (no sync); :meth:`flush` writes the rest.

        ``aux``: a second trace, of each unit's finished aux norm a step
        (for ``gnmr-noise-floor``, the quantization noise's norm), that
        ``gnmr-replay TRACE --aux AUX`` replays beside the norms; only for a
        controller that reads aux (:attr:`needs_aux`). On CUDA its rows are
        the device controller's own finished aux norms, written a step late
        with the trace's (the same bits a CPU run writes)."""
        if path is None:
            if aux is not None:
                raise ValueError("gnmr: trace(None) closes both traces: give no aux")
            self._core.close_trace()
            self._trace_open = None
            return
        aux_path = ""
        if aux is not None:
            if not self.needs_aux:
                raise ValueError(f"gnmr: preset {self._preset!r} reads no aux signal: an aux trace would "
                                 f"hold nothing it steps on")
            aux_path = os.fspath(aux)
            if os.path.abspath(aux_path) == os.path.abspath(os.fspath(path)):
                raise ValueError("gnmr: the aux trace must be another file than the trace")
        if aux_path:
            self._core.open_trace(os.fspath(path), aux=aux_path)
        else:
            self._core.open_trace(os.fspath(path))
        self._trace_open = (os.fspath(path), aux_path)

    def flush(self) -> None:
        """Writes every pending log line and trace row (waits for the GPU)."""
        self._core.flush()

    def close(self) -> None:
        """Flushes and closes the event log and the trace."""
        self._core.close_events()
        self._core.close_trace()
        self._events_open = None
        self._trace_open = None

    def __deepcopy__(self, memo: Dict[int, Any]) -> "Controller":
        """A controller over the deep copies of the watched tensors (the
        ones ``copy.deepcopy`` of the model in the same call makes, via
        ``memo``), with the same preset, overrides, units and state. Logs
        are not copied: the copy writes none until told to."""
        units = {name: [copy.deepcopy(t, memo) for t in members]
                 for name, members in zip(self._names, self._members)}
        if _C.is_global(self._preset):
            units = {"global": units["global"]}
        twin = Controller(units, self._preset, **self._overrides)
        twin._core.load(bytes(self._core.save()))
        memo[id(self)] = twin
        return twin

    def __enter__(self) -> "Controller":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        if not hasattr(self, "_device"):  # __init__ raised (a traceback may still print us)
            return "gnmr.Controller(<not constructed>)"
        return (f"gnmr.Controller(preset={self._preset!r}, units={len(self._names)}, "
                f"device={self._device}, overrides={self._overrides})")


def _check_optimizer(optimizer: Any) -> None:
    # gnmr.optim.AdamW marks itself (RUNS_CONTROLLER) rather than being
    # imported here: optim imports this module, and the layers go one way.
    if getattr(type(optimizer), "RUNS_CONTROLLER", False):
        raise ValueError("gnmr: gnmr.optim.AdamW resets its own moments (and runs the controller "
                         "itself): do not pass it to Controller.step or reset_moments")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"gnmr: reset_moments needs a torch.optim.Optimizer, got "
                        f"{type(optimizer).__name__}")


def _reset_state(st: Dict[str, Any], p: torch.Tensor) -> None:
    """A fresh optimizer's state for ``p``, in place where it is a tensor
    (so captured graphs and fused kernels keep their addresses)."""
    for k, v in list(st.items()):
        if k == "step":
            if isinstance(v, torch.Tensor):
                v.zero_()
            else:
                st[k] = type(v)(0)
        elif k == "momentum_buffer":
            st[k] = None
        elif isinstance(v, torch.Tensor) and v.shape == p.shape:
            v.zero_()
