"""The records one controller step returns: StepSummary (per step), the
Decisions of every unit, and Flag, the bits of a unit's flags.

On CUDA a StepSummary is lazy: the controller copies it to pinned host
memory on the stream, and reading a field waits for that copy only (not
reading it waits for nothing). On the CPU it holds its values already.
"""
from __future__ import annotations

import enum
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

import torch

from . import _C

_F = _C.flags()


class Flag(enum.IntFlag):
    """Bits of a unit's flags (``gnmr::Flag`` in gnmr/core/types.hpp)."""

    TRIGGERED = _F["TRIGGERED"]  #: the trigger fired this step
    GRANTED = _F["GRANTED"]  #: a recovery slot was granted this step
    IN_RECOVERY = _F["IN_RECOVERY"]  #: holds a slot this step
    DENIED = _F["DENIED"]  #: triggered, not in recovery, no slot left
    COOLDOWN = _F["COOLDOWN"]  #: not eligible for a grant (cool-down)
    NONFINITE = _F["NONFINITE"]  #: the norm is NaN or +-Inf
    SKIP = _F["SKIP"]  #: the unit's update is skipped
    RESET_MOMENTS = _F["RESET_MOMENTS"]  #: zero the unit's optimizer moments
    PROMOTE = _F["PROMOTE"]  #: route the unit to higher precision
    RELEASED = _F["RELEASED"]  #: its lock expired at the start of this step
    WARMUP = _F["WARMUP"]  #: too few samples for a verdict
    ZERO_NORM = _F["ZERO_NORM"]  #: no gradient this step (norm exactly 0)
    SYSTEMIC = _F["SYSTEMIC"]  #: the systemic action applied to the unit this step
    RESTART = _F["RESTART"]  #: the unit's statistics started afresh (its history was an outlier)


class Decisions(NamedTuple):
    """What the optimizer must do with each unit, one entry per unit.

    ``scale`` (float32) multiplies a unit's gradient; ``flags`` (int32) holds
    :class:`Flag` bits. A skipped unit has ``Flag.SKIP`` and scale 0: select
    on the flag, never multiply by the scale (0 * NaN is NaN).
    """

    scale: torch.Tensor
    flags: torch.Tensor


_FIELDS: Tuple[str, ...] = tuple(_C.summary_fields())


class StepSummary:
    """One controller step: how many units triggered, were granted a
    recovery slot, were in recovery, were denied, had a non-finite norm or
    were released; the largest ratio and its unit; whether the policy
    suggests skipping the whole step.

    On CUDA the values are fetched on first access (the copy was enqueued
    right after the step); :attr:`ready` says without waiting whether that
    copy has completed. :meth:`as_dict` returns every field.
    """

    __slots__ = ("_values", "_fetch", "_ready", "__weakref__")

    def __init__(self, values: Optional[Tuple[Any, ...]] = None, *,
                 fetch: Optional[Callable[[], Tuple[Any, ...]]] = None,
                 ready: Optional[Callable[[], bool]] = None) -> None:
        self._values = tuple(values) if values is not None else None
        self._fetch = fetch
        self._ready = ready

    def _load(self) -> Tuple[Any, ...]:
        if self._values is None:
            self._values = tuple(self._fetch())
            self._fetch = self._ready = None
        return self._values

    def _get(self, name: str) -> Any:
        return self._load()[_FIELDS.index(name)]

    @property
    def ready(self) -> bool:
        """True when reading a field will not wait (always on the CPU)."""
        if self._values is not None or self._ready is None:
            return True
        return bool(self._ready())

    @property
    def step(self) -> int:
        """The step number t, 1-based, counted over the controller's life."""
        return self._get("step")

    @property
    def triggered(self) -> int:
        """Units whose trigger fired."""
        return self._get("triggered")

    @property
    def granted(self) -> int:
        """Units granted a recovery slot this step."""
        return self._get("granted")

    @property
    def in_recovery(self) -> int:
        """Units holding a slot this step (never above the preset's budget)."""
        return self._get("in_recovery")

    @property
    def denied(self) -> int:
        """Triggered units that got no slot."""
        return self._get("denied")

    @property
    def nonfinite(self) -> int:
        """Units with a NaN or infinite norm (always skipped)."""
        return self._get("nonfinite")

    @property
    def released(self) -> int:
        """Units whose lock expired at the start of this step."""
        return self._get("released")

    @property
    def max_ratio(self) -> float:
        """The largest norm-to-mean ratio among units whose ratio is defined."""
        return self._get("max_ratio")

    @property
    def max_ratio_unit(self) -> int:
        """Index of the unit with :attr:`max_ratio` (-1 if none)."""
        return self._get("max_ratio_unit")

    @property
    def skip_step(self) -> bool:
        """The policy suggests skipping the whole step (skip-step, ladder)."""
        return bool(self._get("skip_step"))

    @property
    def systemic(self) -> int:
        """0 on a step that is not systemic, else the systemic action applied
        (1 clip-triggered, 2 global-clip, 3 skip; docs/algorithm.md)."""
        return self._get("systemic")

    @property
    def systemic_scale(self) -> float:
        """global-clip's one scale for every finite unit (1 otherwise)."""
        return self._get("systemic_scale")

    @property
    def total_norm(self) -> float:
        """global-clip only: the total norm over finite units (0 otherwise)."""
        return self._get("total_norm")

    @property
    def total_mean(self) -> float:
        """global-clip only: the total norm's tracked mean before this step."""
        return self._get("total_mean")

    def __getattr__(self, name: str) -> Any:
        # Fields the C++ summary has and this class has no property for yet.
        if name in _FIELDS:
            return self._get(name)
        raise AttributeError(name)

    def as_dict(self) -> Dict[str, Any]:
        """Every field by name (waits for the copy on CUDA)."""
        return dict(zip(_FIELDS, self._load()))

    def __repr__(self) -> str:
        if self._values is None and not self.ready:
            return "StepSummary(<pending on the GPU>)"
        return "StepSummary(" + ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items()) + ")"
