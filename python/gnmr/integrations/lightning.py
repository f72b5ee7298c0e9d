"""gnmr in Lightning: a ``lightning.pytorch.Callback``.

    from gnmr.integrations.lightning import GnmrCallback
    trainer = L.Trainer(callbacks=[GnmrCallback()], gradient_clip_val=1.0)
    trainer.fit(model, ckpt_path=...)

Lightning calls ``on_before_optimizer_step`` after the backward passes of an
optimizer step (after gradient accumulation, the gradient all-reduce and AMP's
unscale) and before its own gradient clipping and ``optimizer.step()``; the
callback runs one controller step there (``Controller.step``: skipped units'
grads become None, clipped ones are scaled, moments of units flagged
RESET_MOMENTS are reset in the optimizer). Lightning's ``gradient_clip_val``
then acts after gnmr's decisions, on what they left: the order of gnmr's
stability benchmark, with nothing to take over.

Checkpoints: the controller's state is the callback's ``state_dict()``, which
Lightning stores in every checkpoint (``ModelCheckpoint`` included) and gives
back on ``trainer.fit(..., ckpt_path=...)``. Logs: ``gnmr/triggered``,
``gnmr/granted``, ``gnmr/denied``, ``gnmr/nonfinite``, ``gnmr/systemic``,
``gnmr/skip_step`` (sums), ``gnmr/max_ratio`` (largest), ``gnmr/in_recovery``
(last step) over each of Lightning's ``log_every_n_steps`` intervals,
through ``pl_module.log_dict`` (``log=False`` turns that off).

With ``gnmr.optim.AdamW`` from ``configure_optimizers`` the optimizer runs
the controller itself, inside ``optimizer.step()``, so after Lightning's
clip: gnmr then reads clipped norms (use a torch optimizer for the
benchmark's order). The callback then only logs and checkpoints.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional

import torch

try:
    from lightning.pytorch.callbacks import Callback
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("gnmr.integrations.lightning needs lightning (pip install 'gnmr[lightning]')") from e

from ..controller import Controller
from ..optim import AdamW as GnmrAdamW
from ._common import Tally, check_aux, guarded_step, unwrap_optimizer


class GnmrCallback(Callback):
    """Runs a :class:`gnmr.Controller` inside ``lightning.pytorch.Trainer``.

    Args:
        controller: the controller to run; None builds one at the start of
            fit over the LightningModule, with ``units(pl_module)`` as its
            units (default: the module itself, one unit per parameter),
            ``preset`` and ``overrides``, or adopts the controller of a
            ``gnmr.optim.AdamW`` returned by ``configure_optimizers``.
        log: log the figures at Lightning's log interval through
            ``pl_module.log_dict``.
        aux: ``aux(pl_module, controller)`` gives each step's aux partials
            (``Controller.set_aux``) for a preset that reads them
            (``gnmr-noise-floor``: ``gnmr.integrations.nvfp4.noise_partials``);
            None: none.
    """

    def __init__(self, controller: Optional[Controller] = None, *, preset: str = "default",
                 units: Optional[Callable[[torch.nn.Module], Any]] = None, log: bool = True,
                 aux: Optional[Callable[[torch.nn.Module, Controller], torch.Tensor]] = None,
                 **overrides: Any) -> None:
        if controller is not None and not isinstance(controller, Controller):
            raise TypeError(f"gnmr: GnmrCallback needs a gnmr.Controller, got {type(controller).__name__}")
        if aux is not None and not callable(aux):
            raise TypeError(f"gnmr: GnmrCallback: aux must be a function of (module, controller), "
                            f"got {type(aux).__name__}")
        self._aux = aux
        self.controller = controller
        self._preset, self._units, self._overrides = preset, units, overrides
        self._log = log
        self._tally = Tally()
        self._pending: Optional[Mapping[str, Any]] = None

    def on_fit_start(self, trainer, pl_module) -> None:
        # After configure_optimizers and the checkpoint restore: a
        # gnmr.optim.AdamW brings its own controller, which is then this one.
        inner = unwrap_optimizer(trainer.optimizers[0]) if trainer.optimizers else None
        if isinstance(inner, GnmrAdamW):
            if self.controller is not None and self.controller is not inner.controller:
                raise ValueError("gnmr: GnmrCallback: the gnmr.optim.AdamW of configure_optimizers "
                                 "runs another controller than the callback's; give the callback "
                                 "none (it adopts the optimizer's) or the same one")
            self.controller = inner.controller
        elif self.controller is None:
            units = self._units(pl_module) if self._units is not None else pl_module
            self.controller = Controller(units, self._preset, **self._overrides)
        check_aux(self.controller, self._aux, "module")  # before the restore below changes anything
        if self._pending is not None:
            self.controller.load_state_dict(self._pending)
            self._pending = None

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        # Lightning clips after this hook. With gnmr.optim.AdamW the
        # controller runs inside optimizer.step() instead (None here).
        if self._aux is not None:  # consumed by this step (ours, or gnmr.optim.AdamW's)
            self.controller.set_aux(self._aux(pl_module, self.controller))
        self._tally.add(guarded_step(self.controller, optimizer, 0.0))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not self._log:
            return
        opts = trainer.optimizers
        if opts and isinstance(unwrap_optimizer(opts[0]), GnmrAdamW):
            self._tally.add(self.controller.last_summary)  # the same summary twice counts once
        # Read the summaries only at Lightning's log interval (a read waits
        # for the device on CUDA).
        if self._tally.steps and trainer.global_step % max(trainer.log_every_n_steps, 1) == 0:
            pl_module.log_dict(self._tally.logs(), on_step=True, on_epoch=False)
            self._tally.reset()

    # ---------------------------------------------------------- checkpoints ---
    def state_dict(self) -> Dict[str, Any]:
        return self.controller.state_dict() if self.controller is not None else {}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        if not state_dict:
            return
        if self.controller is None:  # restored before on_fit_start built it
            self._pending = dict(state_dict)
        else:
            self.controller.load_state_dict(state_dict)
