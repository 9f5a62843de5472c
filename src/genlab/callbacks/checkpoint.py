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
    """``ModelCheckpoint`` whose ``last.ckpt`` follows every save point (each validation, or each epoch end).

    Since Lightning 2.6, ``save_last`` rewrites ``last.ckpt`` only when a best checkpoint is written at the same
    step, so after the monitored metric stops improving ``last.ckpt`` froze at the best step: a resume from it lost
    the training done since, and "final weights" were the best ones."""

    @property
    def state_key(self) -> str:
        # ModelCheckpoint's key, so genlab.runs and the checkpoints of earlier runs find this callback's state
        return super().state_key.replace(type(self).__qualname__, ModelCheckpoint.__qualname__, 1)

    def on_validation_end(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        super().on_validation_end(trainer, pl_module)
        if not self._should_save_on_train_epoch_end(trainer):
            self._refresh_last(trainer)

    def on_train_epoch_end(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        super().on_train_epoch_end(trainer, pl_module)
        if self._should_save_on_train_epoch_end(trainer):
            self._refresh_last(trainer)

    def _refresh_last(self, trainer: "pl.Trainer") -> None:
        # skipped when this step was already saved (the best checkpoint and last.ckpt were written by super())
        if self.save_last and not self._should_skip_saving_checkpoint(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))


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
