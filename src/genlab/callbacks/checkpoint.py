"""Checkpoints that are written atomically (temporary file + rename), so a crash never leaves half a file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.plugins.io import TorchCheckpointIO

from genlab.utils import atomic_write


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` into a temporary file beside the target, fsync, then ``os.replace``."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike, storage_options: Any = None) -> None:
        with atomic_write(Path(path)) as f:
            torch.save(checkpoint, f)


class BestAndLastCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` whose ``last.ckpt`` follows every save point and ends as the final model, and whose best
    checkpoint is ranked at every validation whatever ``every_n_train_steps`` is.

    Lightning 2.6 (a) rewrites ``last.ckpt`` only when a best checkpoint is written at the same step, (b) with a
    monitor that only validation computes, defers step-interval saves to the first validation (nothing on disk
    before it), and (c) with ``every_n_train_steps`` set ranks the monitor only at those steps, with the value of
    the previous validation when they coincide with one, so later validations never replace the first best. Here:
    step-interval saves write ``last.ckpt`` (at once, monitor or not); validations (or epoch ends, when that is
    where Lightning saves) rank the fresh monitor value and refresh ``last.ckpt``; the end of training writes
    ``last.ckpt`` at the final step."""

    _last_saved_step = -1  # global step of the newest last.ckpt

    @property
    def state_key(self) -> str:
        # ModelCheckpoint's key, so genlab.runs and the checkpoints of earlier runs find this callback's state
        return super().state_key.replace(type(self).__qualname__, ModelCheckpoint.__qualname__, 1)

    def _not_now(self, trainer: pl.Trainer) -> bool:
        from pytorch_lightning.trainer.states import TrainerFn

        return bool(trainer.fast_dev_run) or trainer.state.fn != TrainerFn.FITTING or trainer.sanity_checking

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self.monitor is None:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
            return
        n = self._every_n_train_steps
        if n < 1 or trainer.global_step % n or self._not_now(trainer) or self._last_saved_step == trainer.global_step:
            return
        ranked = self._last_global_step_saved
        self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        self._last_global_step_saved = ranked  # a validation at this very step must still rank its fresh value

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self._should_save_on_train_epoch_end(trainer):
            self._rank_and_refresh(trainer)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._should_save_on_train_epoch_end(trainer):
            self._rank_and_refresh(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # last.ckpt is the model training stopped with (max_steps, early stopping), not the last save point's
        if self.save_last and not self._not_now(trainer) and self._last_saved_step != trainer.global_step:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def _rank_and_refresh(self, trainer: pl.Trainer) -> None:
        if self._not_now(trainer) or self._last_global_step_saved == trainer.global_step:
            return
        candidates = self._monitor_candidates(trainer)
        if self.monitor is None or self.monitor in candidates:
            self._save_topk_checkpoint(trainer, candidates)
        if self.save_last:
            self._save_last_checkpoint(trainer, candidates)
        self._defer_save_until_validation = False

    def _save_last_checkpoint(self, trainer: pl.Trainer, monitor_candidates: dict) -> None:
        super()._save_last_checkpoint(trainer, monitor_candidates)
        self._last_saved_step = trainer.global_step

    def _save_checkpoint(self, trainer: pl.Trainer, filepath: str) -> None:
        # The loss can be finite at a step whose update made the weights NaN: never let such weights replace a good
        # last.ckpt or best checkpoint (the NaN guard then stops the run at the next step's loss).
        bad = [name for name, p in trainer.lightning_module.named_parameters() if not torch.isfinite(p).all()]
        if bad:
            from genlab.callbacks.nan_guard import NonFiniteLossError, good_checkpoint_note

            raise NonFiniteLossError(f"the weights became non-finite at step {trainer.global_step} ({bad[0]}"
                                     f"{f' and {len(bad) - 1} more' if len(bad) > 1 else ''}), not saved: "
                                     f"{good_checkpoint_note(trainer)}. Lower the learning rate or enable clipping "
                                     "(trainer.gradient_clip_val).")
        super()._save_checkpoint(trainer, filepath)


def make_checkpoint_callback(
    dirpath: str,
    monitor: str | None,
    mode: str = "min",
    save_last: bool = True,
    save_top_k: int = 1,
    every_n_train_steps: int | None = None,
) -> BestAndLastCheckpoint:
    """Best-by-``monitor`` plus ``last.ckpt``; ``every_n_train_steps`` adds mid-epoch saves for long epochs."""
    filename = "step{step:07d}" if monitor is None else "best-step{step:07d}"
    return BestAndLastCheckpoint(
        dirpath=dirpath,
        filename=filename,
        auto_insert_metric_name=False,
        monitor=monitor,
        mode=mode,
        save_last=save_last,
        save_top_k=save_top_k if monitor else 1,
        every_n_train_steps=every_n_train_steps,
    )
