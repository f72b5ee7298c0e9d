"""gnmr.optim.AdamW: torch's AdamW with the controller inside its step.

On CUDA, ``step()`` enqueues the per-unit norms, the controller step and
gnmr's fused guarded AdamW kernel on the current stream: no host sync, no
allocation, capturable in a CUDA graph. On the CPU it runs the host
controller and gnmr's host replay of that kernel (the same arithmetic, bit
for bit). Both honour a unit's decision directly: a skipped unit's weights,
moments and bias-correction step are left as they were (a select: a NaN
gradient reaches nothing), a clipped unit's gradient is scaled, a unit
flagged RESET_MOMENTS restarts from zero moments. When the controller never
acts, the update is torch.optim.AdamW's to fp32 rounding.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import torch

from . import _C
from .controller import Controller
from .sharded import ShardedUnits

_STATE_KEYS = ("step", "beta1_pow", "beta2_pow")
# The controller's state in this optimizer's state dict (state_dict()).
CONTROLLER_KEY = "gnmr"


class AdamW(torch.optim.Optimizer):
    """AdamW guarded by a :class:`gnmr.Controller`.

    Args:
        params: parameters or parameter groups, as for torch.optim.AdamW;
            every parameter that requires grad must be watched by
            ``controller`` and be float32 (the kernel keeps fp32 weights and
            moments; torch gives an fp32 parameter an fp32 gradient). A
            frozen parameter the controller does not watch is accepted and
            never updated, as torch.optim.AdamW leaves a parameter without
            gradient.
        lr, betas, eps, weight_decay: torch.optim.AdamW's, per group. On
            CUDA ``lr`` may be a one-element float32 CUDA tensor, read by the
            kernel (a captured graph then follows an LR schedule).
        controller: the controller whose decisions guard the update. Do not
            call ``controller.step()`` yourself: this optimizer does.
        foreach, fused, capturable: accepted as torch.optim.AdamW accepts
            them; they change nothing (the step is always one fused pass,
            capturable on CUDA). amsgrad, maximize, differentiable: only
            False (ValueError otherwise).

    Raises ValueError for invalid hyperparameters (the C++ message), a
    parameter the controller does not watch, on another device, or not
    float32; TypeError when ``controller`` is not a Controller.

    State: each watched parameter's ``exp_avg``, ``exp_avg_sq`` (zeros) and
    its unit's ``step`` (0), ``beta1_pow``, ``beta2_pow`` (1.0) exist from
    construction on, not after the first step as torch's: checkpoint
    loaders that fill only the keys they find (torch.distributed.checkpoint)
    and helpers that run a zero-gradient step on an empty state (DCP's
    ``get_optimizer_state_dict``, torchtitan) then work unchanged. DTensor
    parameters (FSDP2, TP) get DTensor moments: docs/python.md, "At scale".

    Determinism: the update of each element is gnmr::detail::adamw_element
    (correctly rounded fp32, no FMA contraction), the same bits on the CPU
    and on the GPU for the same gradients and decisions.
    """

    # Runs the controller inside step(): Controller.step / reset_moments
    # refuse it (gnmr.controller reads this flag instead of importing optim).
    RUNS_CONTROLLER = True

    def __init__(self, params: Union[Iterable[torch.Tensor], Iterable[Dict[str, Any]]],
                 lr: Union[float, torch.Tensor] = 1e-3, betas: Tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False, *,
                 controller: Controller, maximize: bool = False, foreach: Optional[bool] = None,
                 capturable: bool = False, differentiable: bool = False,
                 fused: Optional[bool] = None) -> None:
        if not isinstance(controller, Controller):
            raise TypeError(f"gnmr: AdamW needs controller=gnmr.Controller(...), got "
                            f"{type(controller).__name__}")
        self.controller = controller
        self._cores: Optional[List[Any]] = None
        self._frozen: List[Tuple[int, torch.Tensor]] = []
        self._watched_params: List[List[torch.Tensor]] = []  # per group, with _cores
        # torch.optim.AdamW's flags, so that code written for it (and its
        # state dicts) works unchanged. The step is always one fused pass,
        # and on CUDA always capturable: foreach, fused and capturable are
        # accepted and change nothing. What the kernel does not do is refused.
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                        maximize=maximize, foreach=foreach, capturable=capturable,
                        differentiable=differentiable, fused=fused)
        _check_flags(defaults)
        super().__init__(params, defaults)

    # -------------------------------------------------------------- groups ---
    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        """torch's add_param_group, plus gnmr's checks of the new group. The
        groups already there keep their bias-correction steps."""
        # The per-unit steps live in the C++ cores: write them back into the
        # state first, or the rebuilt cores would restart every group at 0.
        self._store_unit_states()
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        ctl = self.controller
        try:
            ctl._follow()  # a model moved after its controller was built: the controller follows
            for i, p in enumerate(group["params"]):
                if self._watched(p, len(self.param_groups) - 1, i):
                    if p.dtype != torch.float32:
                        raise ValueError(f"gnmr: AdamW keeps fp32 weights; {self._label(p)} is {p.dtype}")
                    if p.device != ctl.device:
                        raise ValueError(f"gnmr: AdamW: {self._label(p)} is on {p.device}, the "
                                         f"controller on {ctl.device}")
            _check_flags(group)
            self._hyper(group)
        except (ValueError, TypeError):
            self.param_groups.pop()  # a refused group leaves the optimizer as it was
            raise
        # The moments exist from the start (zero, as the first step would
        # make them), not lazily as torch.optim.AdamW's: a state that is
        # never empty is what torch.distributed.checkpoint's
        # get_optimizer_state_dict needs to leave the optimizer alone (on an
        # empty state it runs a step with zero gradients, which would be a
        # controller step too).
        for i, p in enumerate(group["params"]):
            if self._watched(p, len(self.param_groups) - 1, i):
                self._new_moments(p)
        self._cores = None

    def _new_moments(self, p: torch.Tensor) -> None:
        st = self.state[p]
        if "exp_avg" not in st:  # zeros_like keeps a DTensor's placements (DCP reshards them)
            st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        if "step" not in st:
            # The unit's bias-correction state before its first step; present
            # from the start so that a checkpoint loader that fills only the
            # keys it finds (torch.distributed.checkpoint) restores it.
            st.update(step=0, beta1_pow=1.0, beta2_pow=1.0)

    def _label(self, p: torch.Tensor) -> str:
        for k, g in enumerate(self.param_groups):
            for i, q in enumerate(g["params"]):
                if q is p:
                    return f"parameter {i} of group {k} (shape {list(p.shape)})"
        return f"a parameter of shape {list(p.shape)}"

    def _watched(self, p: torch.Tensor, k: int, i: int) -> bool:
        """Whether the controller watches p. A frozen parameter (no
        requires_grad) it does not watch is accepted, as torch.optim.AdamW
        accepts it, and never updated; any other unwatched one is an error."""
        try:
            self.controller.unit_of(p)
            return True
        except ValueError:
            if not p.requires_grad:
                return False
            raise ValueError(f"gnmr: AdamW: parameter {i} of group {k} (shape {list(p.shape)}) "
                             "requires grad but is not watched by the controller; build the "
                             "controller over the same parameters (gnmr.Controller(model))") from None

    def _split(self, group: Dict[str, Any], k: int) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        """(watched, frozen-and-unwatched) parameters of group k."""
        watched, frozen = [], []
        for i, p in enumerate(group["params"]):
            (watched if self._watched(p, k, i) else frozen).append(p)
        return watched, frozen

    def _hyper(self, group: Dict[str, Any]) -> Tuple[Tuple[float, ...], int]:
        """(lr, beta1, beta2, eps, weight_decay), checked, and the device
        address of a CUDA tensor lr (0 for none)."""
        lr = group["lr"]
        d_lr = 0
        if isinstance(lr, torch.Tensor):
            if (lr.device == self.controller.device and lr.is_cuda and lr.dtype == torch.float32
                    and lr.numel() == 1):
                d_lr, lr = lr.data_ptr(), 0.0
            else:
                lr = float(lr)
        beta1, beta2 = group["betas"]
        h = (float(lr), float(beta1), float(beta2), float(group["eps"]), float(group["weight_decay"]))
        _C.check_adamw(*h)
        return h, d_lr

    def _check_device(self) -> None:
        """The controller follows its model to another device (Controller.
        _follow); this optimizer's moments do not move with it, as torch's
        optimizers' states do not: a model moved after the optimizer was
        built is refused with what to do, before anything changes."""
        ctl = self.controller
        ctl._follow()
        for group in self.param_groups:
            for p in group["params"]:
                st = self.state.get(p)
                m = st.get("exp_avg") if st else None
                if m is not None and m.device != p.device:
                    raise ValueError(f"gnmr: AdamW: {self._label(p)} moved to {p.device} after this optimizer "
                                     f"was built (its moments are on {m.device}): build the optimizer after "
                                     f"moving the model, as torch's optimizers need")

    # --------------------------------------------------------------- state ---
    def _ensure_cores(self) -> List[Any]:
        if self._cores is not None:
            return self._cores
        ctl = self.controller
        cuda = ctl.device.type == "cuda"
        cores = []
        frozen: List[Tuple[int, torch.Tensor]] = []
        watched: List[List[torch.Tensor]] = []
        for k, group in enumerate(self.param_groups):
            params, idle = self._split(group, k)
            watched.append(params)
            frozen += [(k, p) for p in idle]
            units = [ctl.unit_of(p) for p in params]
            for p in params:
                self._new_moments(p)
            # A DTensor's local shard (the core updates it in place); a
            # plain tensor itself.
            local = ShardedUnits.local
            ms = [local(self.state[p]["exp_avg"]) for p in params]
            vs = [local(self.state[p]["exp_avg_sq"]) for p in params]
            shards = [local(p) for p in params]
            labels = [f"AdamW group {k} parameter {i} (unit {ctl.unit_names[u]!r})"
                      for i, u in enumerate(units)]
            if cuda:
                core = _C.CudaAdamW(shards, units, ms, vs, labels, ctl.num_units, ctl.device.index)
            else:
                core = _C.HostAdamW(shards, units, ms, vs, labels, ctl.num_units)
            core.set_states(self._unit_states(params, group, units))
            cores.append(core)
        self._cores = cores
        self._frozen = frozen
        self._watched_params = watched
        return cores

    def _unit_states(self, params: List[torch.Tensor], group: Dict[str, Any],
                     units: List[int]) -> List[Tuple[int, float, float]]:
        """Per-unit (step, beta1^step, beta2^step) from the parameters' state
        (a torch.optim.AdamW state gets its beta powers recomputed)."""
        beta1, beta2 = (float(b) for b in group["betas"])
        states = [(0, 1.0, 1.0)] * self.controller.num_units
        seen: Dict[int, Tuple[int, float, float]] = {}
        for p, u in zip(params, units):
            st = self.state.get(p, {})
            if "step" not in st:
                continue
            step = int(st["step"].item() if isinstance(st["step"], torch.Tensor) else st["step"])
            if "beta1_pow" in st and "beta2_pow" in st:
                s = (step, float(st["beta1_pow"]), float(st["beta2_pow"]))
            else:  # as the kernel's running double products: beta^step
                b1 = b2 = 1.0
                for _ in range(step):
                    b1 *= beta1
                    b2 *= beta2
                s = (step, b1, b2)
            if u in seen and seen[u] != s:
                raise ValueError(f"gnmr: AdamW state: the tensors of unit "
                                 f"{self.controller.unit_names[u]!r} disagree on the step")
            seen[u] = s
            states[u] = s
        return states

    def state_dict(self) -> Dict[str, Any]:
        """torch's optimizer state dict; each parameter's entry holds
        exp_avg, exp_avg_sq and its unit's step, beta1_pow and beta2_pow
        (Python numbers, kept exact: the per-unit bias-correction state lives
        in the C++ core, not in ``self.state``), and ``"gnmr"`` holds the
        controller's :meth:`~gnmr.Controller.state_dict`: a checkpoint of
        the optimizer alone (the Hugging Face Trainer's ``optimizer.pt``,
        Lightning's) resumes the controller too. Synchronises on CUDA."""
        sd = super().state_dict()
        sd[CONTROLLER_KEY] = self.controller.state_dict()
        if self._cores is None:
            return sd
        packed = sd["state"]
        live = {id(p): st for p, st in self._live_unit_states()}
        for group, packed_group in zip(self.param_groups, sd["param_groups"]):
            for p, idx in zip(group["params"], packed_group["params"]):
                if id(p) in live:
                    # A copy: packed[idx] is the very dict of self.state[p].
                    packed[idx] = dict(packed[idx], **live[id(p)])
        return sd

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """torch's load_state_dict, and the controller's state from
        ``state_dict["gnmr"]`` when it is there. A state dict without it
        (torch.optim.AdamW's, whose per-tensor steps become the units'
        steps, or the reduced one torch.distributed.checkpoint's
        ``set_optimizer_state_dict`` passes: save the controller beside it
        there, docs/python.md) leaves the controller as it is. Raises
        ValueError on a bad state, with the optimizer and the controller
        unchanged."""
        ctl = state_dict.get(CONTROLLER_KEY) if isinstance(state_dict, dict) else None
        before = None
        if ctl is not None:
            before = self.controller.state_dict()
            self.controller.load_state_dict(ctl)  # checked first: raises with nothing changed
        rest = {k: v for k, v in state_dict.items() if k != CONTROLLER_KEY}
        # torch's load builds a new state and new group dicts: the old ones
        # are what a failed load puts back.
        old_state, old_groups = self.state, self.param_groups
        try:
            super().load_state_dict(rest)
            for k, group in enumerate(self.param_groups):  # a bad state raises here, not mid-step
                _check_flags(group)
                params, _ = self._split(group, k)
                self._unit_states(params, group, [self.controller.unit_of(p) for p in params])
        except Exception:
            self.state, self.param_groups = old_state, old_groups
            if before is not None:
                self.controller.load_state_dict(before)
            raise
        self._cores = None

    def _live_unit_states(self) -> Iterator[Tuple[torch.Tensor, Dict[str, Any]]]:
        """(parameter, {step, beta1_pow, beta2_pow}) of every parameter with
        moments, from the C++ cores, which hold the per-unit bias-correction
        state (nothing before the first step)."""
        for group, core in zip(self.param_groups, self._cores or []):
            states = core.states()
            for p in group["params"]:
                if "exp_avg" in self.state.get(p, {}):
                    step, b1, b2 = states[self.controller.unit_of(p)]
                    yield p, dict(step=int(step), beta1_pow=float(b1), beta2_pow=float(b2))

    def _store_unit_states(self) -> None:
        """Writes the cores' per-unit state into ``self.state`` before the
        cores are rebuilt."""
        for p, st in list(self._live_unit_states()):
            self.state[p].update(st)

    # ---------------------------------------------------------------- step ---
    def zero_grad(self, set_to_none: bool = False) -> None:
        """Zeroes the gradients in place by default (unlike torch 2.x), so
        their buffers keep their addresses and the CUDA plans stay valid;
        ``set_to_none=True`` works too, at the cost of a re-plan (an
        allocation and a sync) whenever autograd reallocates a buffer."""
        super().zero_grad(set_to_none=set_to_none)

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """Norms, one controller step and the guarded AdamW update of every
        group. Returns the closure's loss (torch's contract); the step's
        summary is ``controller.last_summary``. Everything is checked before
        anything changes."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        hyper = [self._hyper(g) for g in self.param_groups]
        self._check_device()
        cores = self._ensure_cores()
        for k, p in self._frozen:
            if p.grad is not None:
                raise ValueError(f"gnmr: AdamW: {self._label(p)} has a gradient but the "
                                 "controller does not watch it (it was frozen when the controller "
                                 "was built): build a new controller and optimizer after unfreezing")
        ctl = self.controller
        grads: List[Any] = [None] * len(cores)
        norm_grads = None
        if ctl.sharded:  # the local shards' gradients (gnmr/sharded.py), gathered once
            sh = ctl._sharded
            norm_grads = sh.gather_grads()
            grads = [[sh.local_grad(p) for p in params] for params in self._watched_params]
        if ctl.device.type == "cuda":
            stream = torch.cuda.current_stream(ctl.device).cuda_stream
            for core, g in zip(cores, grads):
                core.prepare(stream, g)
            ctl._step(apply=False, grads=norm_grads)
            for core, (h, d_lr) in zip(cores, hyper):
                core.step(ctl._core, *h, d_lr, stream)
        else:
            for core, g in zip(cores, grads):
                core.prepare(g)
            ctl._step(apply=False, grads=norm_grads)
            for core, (h, _) in zip(cores, hyper):
                core.step(ctl._core, *h)
        return loss


def _check_flags(group: Dict[str, Any]) -> None:
    """torch.optim.AdamW's flags that gnmr's kernel does not implement."""
    for flag in ("amsgrad", "maximize", "differentiable"):
        if group.get(flag, False):
            raise ValueError(f"gnmr: AdamW does not support {flag}=True")
