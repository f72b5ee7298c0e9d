"""gnmr in the Hugging Face Trainer: a ``TrainerCallback``.

    from gnmr.integrations.hf import GnmrCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds,
                      callbacks=[GnmrCallback()])  # preset "default"
    trainer.train()

Between the backward passes of an optimizer step (after gradient
accumulation and the gradient all-reduce) and ``optimizer.step()``, the
callback runs one controller step on the gradients (``Controller.step``:
skipped units' grads become None, clipped ones are scaled, moments of units
flagged RESET_MOMENTS are reset in the optimizer). The Trainer's own clip
(``max_grad_norm``, 1.0 by default) then runs after gnmr's decisions, on
what they left, as in gnmr's stability benchmark: the callback takes the
clip over (``take_over_clip=True``) by setting ``args.max_grad_norm`` to 0
for the run and calling torch's ``clip_grad_norm_`` itself with the same
value (restored at the end of training). With ``take_over_clip=False`` the
Trainer clips first and gnmr sees clipped norms.

Checkpoints: at each save the controller's state goes to ``gnmr.pt`` in the
Trainer's ``checkpoint-<step>`` folder; ``trainer.train(resume_from_checkpoint=...)``
restores it (from ``<output_dir>/checkpoint-<global_step>``, or the folder
given as ``resume``), so a resumed run takes the same
decisions as an uninterrupted one. Logs: every Trainer log line gains
``gnmr/triggered``, ``gnmr/granted``, ``gnmr/denied``, ``gnmr/nonfinite``,
``gnmr/systemic``, ``gnmr/skip_step`` (sums since the last log),
``gnmr/max_ratio`` (largest) and ``gnmr/in_recovery`` (last step).

With ``gnmr.optim.AdamW`` as the Trainer's optimizer (``optimizers=(opt,
sched)``) the optimizer runs the controller itself; the callback then only
logs and checkpoints, and the Trainer's clip stays where the Trainer puts it.

A preset whose trigger reads each unit's aux signal (``gnmr-noise-floor``)
gets it from ``aux``, a function of (model, controller) called once per
optimizer step before the controller steps; for NVIDIA's NVFP4 recipe that
is ``gnmr.integrations.nvfp4.noise_partials``::

    ctl = gnmr.Controller(operator_units(model), "gnmr-noise-floor")
    enable_promotion(model, ctl)
    GnmrCallback(ctl, aux=nvfp4.noise_partials)

With more than one rank ``aux`` is refused (each rank's noise differs; the
ranks would decide differently): combine it across ranks and call
``Controller.set_aux`` yourself.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Optional, Union

import torch

try:
    from transformers import TrainerCallback
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("gnmr.integrations.hf needs transformers (pip install 'gnmr[hf]')") from e

from ..controller import Controller
from ..optim import AdamW as GnmrAdamW
from ._common import Tally, check_aux, guarded_step, unwrap_optimizer

CHECKPOINT_FILE = "gnmr.pt"


class GnmrCallback(TrainerCallback):
    """Runs a :class:`gnmr.Controller` inside ``transformers.Trainer``.

    Args:
        controller: the controller to run; None builds one at the start of
            training over the Trainer's model, with ``units(model)`` as its
            units (default: the model itself, one unit per parameter),
            ``preset`` and ``overrides``.
        take_over_clip: move the Trainer's ``max_grad_norm`` clip after
            gnmr's decisions (module docstring).
        resume: when the Trainer resumes (global step > 0 at the start of
            training): True restores ``<output_dir>/checkpoint-<global_step>/gnmr.pt``,
            a folder name restores ``<folder>/gnmr.pt``, False starts gnmr's
            statistics anew. A missing file raises FileNotFoundError rather
            than silently starting anew.
        aux: ``aux(model, controller)`` gives each step's aux partials
            (``Controller.set_aux``) for a preset that reads them
            (``controller.needs_aux``); None: none.
    """

    def __init__(self, controller: Optional[Controller] = None, *, preset: str = "default",
                 units: Optional[Callable[[torch.nn.Module], Any]] = None,
                 take_over_clip: bool = True, resume: Union[bool, str] = True,
                 aux: Optional[Callable[[torch.nn.Module, Controller], torch.Tensor]] = None,
                 **overrides: Any) -> None:
        if controller is not None and not isinstance(controller, Controller):
            raise TypeError(f"gnmr: GnmrCallback needs a gnmr.Controller, got {type(controller).__name__}")
        if aux is not None and not callable(aux):
            raise TypeError(f"gnmr: GnmrCallback: aux must be a function of (model, controller), "
                            f"got {type(aux).__name__}")
        self._aux, self._model = aux, None
        self.controller = controller
        self._preset, self._units, self._overrides = preset, units, overrides
        self.take_over_clip = take_over_clip
        self.resume = resume
        self._clip = 0.0
        self._saved_clip: Optional[float] = None
        self.tally = Tally()

    # ------------------------------------------------------------- training ---
    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        if self.controller is None:
            if model is None:
                raise ValueError("gnmr: GnmrCallback: the Trainer passed no model to build the "
                                 "controller over; pass controller=gnmr.Controller(model)")
            units = self._units(model) if self._units is not None else model
            self.controller = Controller(units, self._preset, **self._overrides)
        self._model = model
        check_aux(self.controller, self._aux, "model")
        # A gnmr.optim.AdamW runs the controller inside its step, after the
        # Trainer's clip: nothing to take over then.
        own_step = isinstance(unwrap_optimizer(optimizer), GnmrAdamW)
        if self.take_over_clip and not own_step and args.max_grad_norm and args.max_grad_norm > 0:
            self._saved_clip = args.max_grad_norm
            self._clip = float(args.max_grad_norm)
            args.max_grad_norm = 0.0
        if state.global_step > 0 and self.resume is not False:
            folder = (self.resume if isinstance(self.resume, str)
                      else os.path.join(args.output_dir, f"checkpoint-{state.global_step}"))
            self.load(folder)
        self.tally.reset()

    def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
        if optimizer is None:
            raise ValueError("gnmr: GnmrCallback: the Trainer passed no optimizer")
        # fp16 AMP: gnmr must read unscaled gradients. When the Trainer
        # clipped, it unscaled already (a second unscale_ raises: ignored);
        # otherwise unscale here, and the scaler's step will not do it again.
        scaler = getattr(optimizer, "scaler", None)
        if scaler is not None and getattr(scaler, "is_enabled", lambda: False)():
            try:
                scaler.unscale_(unwrap_optimizer(optimizer))
            except RuntimeError:
                pass
        if self._aux is not None:  # consumed by this step (ours, or gnmr.optim.AdamW's)
            self.controller.set_aux(self._aux(self._model if self._model is not None else kwargs.get("model"),
                                              self.controller))
        self.tally.add(guarded_step(self.controller, optimizer, self._clip))

    def on_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
        # gnmr.optim.AdamW ran the controller inside optimizer.step().
        if isinstance(unwrap_optimizer(optimizer), GnmrAdamW):
            self.tally.add(self.controller.last_summary)

    def on_train_end(self, args, state, control, **kwargs):
        if self._saved_clip is not None:
            args.max_grad_norm = self._saved_clip
            self._saved_clip = None

    # -------------------------------------------------------------- logging ---
    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None or self.tally.steps == 0 or "loss" not in logs:
            return
        extra = self.tally.logs()
        logs.update(extra)
        # The Trainer appended its record before the callbacks ran.
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(extra)
        self.tally.reset()

    # ---------------------------------------------------------- checkpoints ---
    def on_save(self, args, state, control, **kwargs):
        if self.controller is None or not state.is_world_process_zero:
            return
        folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        os.makedirs(folder, exist_ok=True)
        torch.save(self.controller.state_dict(), os.path.join(folder, CHECKPOINT_FILE))

    def load(self, folder: str) -> None:
        """Restores the controller from ``folder/gnmr.pt`` (weights_only)."""
        path = os.path.join(folder, CHECKPOINT_FILE)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"gnmr: GnmrCallback: resuming at a checkpoint without {CHECKPOINT_FILE} ({path}); "
                "pass resume=<folder with gnmr.pt>, or resume=False only if starting gnmr's "
                "statistics anew is what you want")
        self.controller.load_state_dict(torch.load(path, weights_only=True))
