"""Checkpoints that are written atomically (temporary file + rename), so a crash never leaves half a file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.plugins.io import TorchCheckpointIO

from genlab.utils import atomic_write


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` into a temporary file beside the target, fsync, then ``os.replace``."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike, storage_options: Any = None) -> None:
        with atomic_write(Path(path)) as f:
            torch.save(checkpoint, f)


def make_checkpoint_callback(
    dirpath: str,
    monitor: str | None,
    mode: str = "min",
    save_last: bool = True,
    save_top_k: int = 1,
    every_n_train_steps: int | None = None,
) -> ModelCheckpoint:
    """Best-by-``monitor`` plus ``last.ckpt``; ``every_n_train_steps`` adds mid-epoch saves for long epochs."""
    filename = "step{step:07d}" if monitor is None else "best-step{step:07d}"
    return ModelCheckpoint(
        dirpath=dirpath,
        filename=filename,
        auto_insert_metric_name=False,
        monitor=monitor,
        mode=mode,
        save_last=save_last,
        save_top_k=save_top_k if monitor else 1,
        every_n_train_steps=every_n_train_steps,
    )
