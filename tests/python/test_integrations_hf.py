"""gnmr.integrations.hf.GnmrCallback in a real transformers.Trainer: a tiny
Llama built from a config (no download) trained on the CPU, with gradient
accumulation, the Trainer's max_grad_norm, logging and save/resume. Skipped
without transformers (tests/python/requirements-extras.txt).
"""
from __future__ import annotations

import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import gnmr  # noqa: E402
from gnmr.integrations.hf import GnmrCallback  # noqa: E402

VOCAB, SEQ = 64, 16


def tiny_llama(seed=0):
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                   max_position_embeddings=SEQ)
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(cfg)


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n=256):
        g = torch.Generator().manual_seed(0)
        # A learnable pattern: each sequence counts up from a random start.
        starts = torch.randint(0, VOCAB, (n, 1), generator=g)
        self.x = (starts + torch.arange(SEQ)) % VOCAB

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


class Spike(transformers.TrainerCallback):
    """A fault the Trainer cannot see: one operator's gradient times 1e4 at
    one optimizer step, NaN at another (before gnmr's callback runs)."""

    def __init__(self, param, at):
        self.param, self.at = param, at

    def on_pre_optimizer_step(self, args, state, control, **kw):
        kind = self.at.get(state.global_step)
        if kind == "x1e4":
            self.param.grad.mul_(1e4)
        elif kind == "nan":
            self.param.grad.view(-1)[0] = float("nan")


def trainer_for(tmp, model, callbacks, max_steps=24, max_grad_norm=1.0, save_steps=12):
    args = transformers.TrainingArguments(
        output_dir=str(tmp), max_steps=max_steps, per_device_train_batch_size=4,
        gradient_accumulation_steps=2, learning_rate=3e-3, max_grad_norm=max_grad_norm,
        logging_steps=4, save_steps=save_steps, save_strategy="steps", report_to=[], use_cpu=True,
        seed=0, data_seed=0, disable_tqdm=True, dataloader_num_workers=0)
    return transformers.Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=callbacks)


def test_trainer_with_gnmr_acts_logs_and_restores_the_clip(tmp_path):
    model = tiny_llama()
    cb = GnmrCallback(preset="gnmr", warmup=5)
    target = model.model.layers[1].mlp.down_proj.weight
    tr = trainer_for(tmp_path, model, [Spike(target, {14: "x1e4", 18: "nan"}), cb])
    tr.train()
    ctl = cb.controller
    assert ctl.steps_done == 24  # once per optimizer step, not per micro-batch
    assert tr.args.max_grad_norm == 1.0  # taken over for the run, then given back
    logged = [h for h in tr.state.log_history if "gnmr/granted" in h]
    assert len(logged) == 6 and all("loss" in h for h in logged)
    assert sum(h["gnmr/granted"] for h in logged) >= 1
    assert sum(h["gnmr/nonfinite"] for h in logged) == 1
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert os.path.isfile(tmp_path / "checkpoint-12" / "gnmr.pt")


def test_take_over_clip_is_the_trainers_clip_when_gnmr_does_nothing(tmp_path):
    """preset 'none' never acts: the callback's clip after it must give the
    weights the Trainer's own clip gives."""
    a, b = tiny_llama(3), tiny_llama(3)
    trainer_for(tmp_path / "a", a, [GnmrCallback(preset="none")], max_steps=8).train()
    trainer_for(tmp_path / "b", b, [], max_steps=8).train()
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_resume_from_checkpoint_takes_the_same_decisions(tmp_path):
    spikes = {5: "x1e4", 15: "x1e4", 17: "nan"}

    def run(folder, resume=None):
        model = tiny_llama(7)
        cb = GnmrCallback(preset="gnmr", warmup=3)
        tr = trainer_for(folder, model, [Spike(model.model.layers[0].self_attn.o_proj.weight, spikes), cb])
        tr.train(resume_from_checkpoint=resume)
        return model, cb.controller

    m1, c1 = run(tmp_path / "straight")
    # Stop after the first save: the same run with max_steps cut is not the
    # same schedule, so resume the straight run's own checkpoint instead.
    m2, c2 = run(tmp_path / "straight", resume=str(tmp_path / "straight" / "checkpoint-12"))
    assert c2.steps_done == c1.steps_done == 24
    assert torch.equal(c1.state_dict()["blob"], c2.state_dict()["blob"])
    for p, q in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    # Without gnmr.pt a resume refuses to start gnmr's statistics anew silently.
    os.remove(tmp_path / "straight" / "checkpoint-12" / "gnmr.pt")
    with pytest.raises(FileNotFoundError, match="gnmr.pt"):
        run(tmp_path / "straight", resume=str(tmp_path / "straight" / "checkpoint-12"))


def test_with_gnmr_adamw_as_the_trainers_optimizer(tmp_path):
    model = tiny_llama(2)
    ctl = gnmr.Controller(model, "gnmr")
    opt = gnmr.optim.AdamW(model.parameters(), lr=3e-3, controller=ctl)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    cb = GnmrCallback(ctl)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=8, per_device_train_batch_size=4,
                                          report_to=[], use_cpu=True, logging_steps=4, save_strategy="no",
                                          disable_tqdm=True)
    seen = []

    class Watch(transformers.TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, **kw):
            seen.append(args.max_grad_norm)

    transformers.Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[cb, Watch()],
                         optimizers=(opt, sched)).train()
    assert ctl.steps_done == 8
    # The Trainer's clip stays the Trainer's (gnmr's AdamW runs after it).
    assert seen == [1.0] * 8 and cb._clip == 0.0


@pytest.mark.skipif(not (torch.cuda.is_available() and gnmr.cuda_built()),
                    reason="fp16 AMP needs a CUDA device and a gnmr built with CUDA")
def test_fp16_amp_gnmr_reads_unscaled_gradients(tmp_path):
    """Under fp16 AMP the Trainer's GradScaler multiplies the loss by its
    scale (2^16 at first): gnmr must read the gradients unscaled, whoever
    unscales them (the Trainer may have; else the callback does). Checked
    against the same model and first batch trained in fp32: the first
    step's per-unit norms agree to fp16 autocast's rounding, not to a factor
    of the scale. And on every step gnmr's norms are those of the .grad the
    optimizer then consumes (a probe after the callback)."""
    def run(folder, fp16):
        model = tiny_llama(5).cuda()
        cb = GnmrCallback(preset="none")
        seen = []

        class After(transformers.TrainerCallback):
            def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kw):
                ctl = cb.controller
                sq = torch.zeros(ctl.num_units, dtype=torch.float64)
                for t in ctl.parameters():
                    if t.grad is not None:
                        sq[ctl.unit_of(t)] += t.grad.double().pow(2).sum().cpu()
                scale = optimizer.scaler.get_scale() if fp16 else 1.0
                seen.append((scale, ctl.reports()["norm"].double(), sq.sqrt()))

        args = transformers.TrainingArguments(
            output_dir=str(folder), max_steps=6, per_device_train_batch_size=4, learning_rate=3e-3,
            max_grad_norm=0.0, fp16=fp16, report_to=[], logging_steps=3, save_strategy="no", seed=0,
            disable_tqdm=True, dataloader_num_workers=0)
        transformers.Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[cb, After()]).train()
        assert cb.controller.steps_done == 6 and len(seen) == 6
        assert all(torch.isfinite(p).all() for p in model.parameters())
        return seen

    amp, ref = run(tmp_path / "amp", True), run(tmp_path / "fp32", False)
    scale, first, _ = amp[0]
    assert scale >= 2.0 ** 10 and torch.isfinite(first).all()  # a real loss scale was in play
    torch.testing.assert_close(first, ref[0][1], rtol=0.05, atol=1e-8)  # not x scale
    for _, got, grad in amp:
        if torch.isfinite(grad).all():
            torch.testing.assert_close(got, grad, rtol=1e-6, atol=0.0)


def test_nvfp4_noise_floor_under_the_trainer(tmp_path):
    """NVIDIA's NVFP4 recipe (emulated) on a Llama's linears, the head kept
    high, under the Trainer: the callback gives gnmr-noise-floor each step's
    rounding noise (aux=nvfp4.noise_partials) and the granted layers run in
    high precision. noise_c is set high so that it grants at this scale;
    the aux the controller saw is the noise the layers measured."""
    from gnmr.integrations import nvfp4
    from gnmr.integrations import torchao as gnmr_ao

    model = tiny_llama(5)
    nvfp4.convert_to_nvfp4_training(model, module_filter_fn=lambda m, path: "layers." in path, seed=3)
    assert "lm_head" not in nvfp4.nvfp4_modules(model) and len(nvfp4.nvfp4_modules(model)) == 14
    ctl = gnmr.Controller(gnmr_ao.operator_units(model), "gnmr-noise-floor", warmup=2, max_o=3, lock=2,
                          noise_c=100.0)
    switched = gnmr_ao.enable_promotion(model, ctl)
    assert len(switched) == 14
    # Without aux the callback refuses at the start, saying what to pass.
    with pytest.raises(ValueError, match="aux="):
        trainer_for(tmp_path / "no-aux", model, [GnmrCallback(ctl)], max_steps=2).train()
    assert ctl.steps_done == 0
    seen, promoted = [], []

    def aux(m, c):
        a = nvfp4.noise_partials(m, c)
        seen.append(a.clone())
        return a

    class Watch(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            promoted.append(len(ctl.promoted_units()))

    cb = GnmrCallback(ctl, aux=aux)
    tr = trainer_for(tmp_path / "run", model, [cb, Watch()], max_steps=10, save_steps=10)
    tr.train()
    assert ctl.steps_done == 10 and len(seen) == 10
    names = ctl.unit_names
    ops = [i for i, n in enumerate(names) if n in nvfp4.nvfp4_modules(model)]
    others = [i for i in range(len(names)) if i not in ops]
    # Every NVFP4 operator's noise is positive every step it ran in NVFP4;
    # units that are no operator (norms, embeddings, the head) carry none.
    assert all(float(s[i]) == 0.0 for s in seen for i in others)
    assert all(float(seen[0][i]) > 0.0 for i in ops)
    granted = sum(h.get("gnmr/granted", 0) for h in tr.state.log_history)
    assert granted >= 3 and max(promoted) > 0 and max(promoted) <= 3
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_aux_is_refused_with_more_than_one_rank(monkeypatch):
    # Each rank's own rounding noise differs: with aux given as is, the ranks
    # would decide differently. Refused before anything changes.
    from gnmr.integrations._common import check_aux
    ctl = gnmr.Controller({"u": [torch.nn.Parameter(torch.randn(4))]}, "gnmr-noise-floor")
    check_aux(ctl, lambda m, c: None, "model")  # one process: fine
    with pytest.raises(ValueError, match="aux=<function"):
        check_aux(ctl, None, "model")
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: 2)
    with pytest.raises(ValueError, match="more than one rank"):
        check_aux(ctl, lambda m, c: None, "model")
    plain = gnmr.Controller({"u": [torch.nn.Parameter(torch.randn(4))]}, "gnmr")
    check_aux(plain, None, "model")  # no aux, no question
