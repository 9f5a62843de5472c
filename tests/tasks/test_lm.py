"""The LM task over ordered streams: memory carry and reset, whole-stream metrics, bit-exact resume."""

from __future__ import annotations

import math

import pytest
import pytorch_lightning as pl
import torch

from genlab import assemble
from genlab.callbacks.run_record import RunRecord
from genlab.cli import build
from helpers import TINY_TXL as TINY
from helpers import PreemptAfterBatches


class StopAt(pl.Callback):
    """Simulates an interruption: stop cleanly after ``step`` optimiser steps."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step >= self.step:
            trainer.should_stop = True


class RecordLosses(pl.Callback):
    def __init__(self):
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append(float(outputs["loss"]))


def fit(cfg, extra_callbacks, ckpt_path=None):
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule = assemble.build_data(cfg.data)
    task = assemble.build_task(cfg, datamodule)
    callbacks = build.build_callbacks(cfg) + [RunRecord(build.config_to_dict(cfg), datamodule.identity())]
    trainer = build.build_trainer(cfg, callbacks + extra_callbacks, [])
    trainer.fit(task, datamodule=datamodule, ckpt_path=ckpt_path)
    return task, trainer


def test_resume_is_bit_exact(compose_cfg, tmp_path):
    """N steps uninterrupted == k steps, stop, resume to N: same losses, same weights (dropout on)."""
    common = TINY + [
        "trainer.max_steps=8",
        "trainer.val_check_interval=4",
        "trainer.limit_val_batches=4",
        "trainer.enable_progress_bar=false",
        "callbacks.checkpoint.every_n_train_steps=3",
        "callbacks.checkpoint.monitor=null",
        "data.batch_size=24",  # few segments per pass, so the run crosses a pass boundary (memory reset)
    ]
    full_losses = RecordLosses()
    full, _ = fit(compose_cfg(common + [f"paths.output_dir={tmp_path}/full"]), [full_losses])

    first_losses, second_losses = RecordLosses(), RecordLosses()
    fit(compose_cfg(common + [f"paths.output_dir={tmp_path}/part"]), [first_losses, StopAt(3)])
    ckpt = tmp_path / "part" / "checkpoints" / "last.ckpt"
    resumed, _ = fit(compose_cfg(common + [f"paths.output_dir={tmp_path}/part"]), [second_losses], str(ckpt))

    assert first_losses.losses + second_losses.losses == full_losses.losses
    for (name, a), (_, b) in zip(full.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), name


def test_memory_carries_across_batches_and_resets_each_pass(compose_cfg):
    cfg = compose_cfg(TINY)
    datamodule = assemble.build_data(cfg.data)
    task = assemble.build_task(cfg, datamodule)
    task.model.eval()
    loader = datamodule.train_dataloader()
    batches = iter(loader)
    first, second = next(batches), next(batches)
    with torch.no_grad():
        task.training_step(first, 0)
        after_first = task._train_memory[0]
        assert after_first is not None and all(not m.requires_grad for m in after_first)
        carried = task(second["input_ids"], second["target"], after_first).nll
        fresh = task(second["input_ids"], second["target"], None).nll
        assert not torch.allclose(carried, fresh)  # the memory is used
        task.training_step(second, 1)
        task.training_step(first, 0)  # segment 0 again: a new pass starts from an empty memory
        assert all(torch.equal(a, b) for a, b in zip(task._train_memory[0], after_first))


def test_perplexity_is_over_the_whole_stream(compose_cfg):
    """ppl = exp(sum of token NLLs / number of tokens), the short last segment weighted by its tokens."""
    cfg = compose_cfg(TINY + ["data.eval_tgt_len=7", "data.eval_batch_size=64"])
    datamodule = assemble.build_data(cfg.data)
    task = assemble.build_task(cfg, datamodule)
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_checkpointing=False,
                         use_distributed_sampler=False)
    result = trainer.validate(task, datamodule=datamodule, verbose=False)[0]
    task.model.eval()
    total, count, memory = 0.0, 0, None
    with torch.no_grad():
        for batch in datamodule.val_dataloader():
            out = task(batch["input_ids"], batch["target"], memory)
            memory = out.memory
            total += out.nll.double().sum().item()
            count += out.nll.numel()
    assert count == datamodule._segments("valid", 64, 7, 0).tokens_per_pass
    assert result["valid/ppl"] == pytest.approx(math.exp(total / count), rel=1e-5)


def test_resume_mid_accumulation_cycle_is_bit_exact(compose_cfg, tmp_path):
    """data.global_batch = 2 x data.batch_size: 2 chunks of streams, one memory each. Stopped after 5 micro-batches
    (2 steps and half of the third) and resumed: the same batches, losses and weights as uninterrupted."""
    common = TINY + [
        "trainer.max_steps=7",
        "trainer.val_check_interval=4",
        "trainer.limit_val_batches=2",
        "trainer.enable_progress_bar=false",
        "callbacks.checkpoint.every_n_train_steps=2",
        "callbacks.checkpoint.monitor=null",
        "data.batch_size=12",
        "+data.global_batch=24",  # few segments per pass: the run crosses a pass boundary (memory reset per chunk)
    ]
    full_losses = RecordLosses()
    full, trainer = fit(compose_cfg(common + [f"paths.output_dir={tmp_path}/full"]), [full_losses])
    assert trainer.accumulate_grad_batches == 2 and len(full_losses.losses) == 14
    assert len(full._train_memory) == 2 and all(m is not None for m in full._train_memory)

    first_losses, second_losses = RecordLosses(), RecordLosses()
    ckpt = tmp_path / "preempted.ckpt"
    fit(compose_cfg(common + [f"paths.output_dir={tmp_path}/part"]), [first_losses, PreemptAfterBatches(5, ckpt)])
    assert torch.load(ckpt, weights_only=True)["lm_pending_grads"] is not None  # stopped mid-cycle
    resumed, _ = fit(compose_cfg(common + [f"paths.output_dir={tmp_path}/part"]), [second_losses], str(ckpt))

    assert first_losses.losses + second_losses.losses == full_losses.losses
    for (name, a), (_, b) in zip(full.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), name
