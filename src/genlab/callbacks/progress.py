"""The progress bar: optimiser steps of ``trainer.max_steps`` on step-based runs, epochs otherwise.

Lightning's bars count batches within an epoch, so a step-based run (``max_steps`` set, ``max_epochs`` -1) shows
"Epoch 0/-2" (Rich) or, after a resume or with accumulation, more batches than the bar's total ("274/99"). On a
step-based run this bar's total is ``max_steps`` and its position ``trainer.global_step``, restored on resume, and
it runs across epochs. Epoch-based runs keep Lightning's per-epoch bar. One bar on terminals and in log files
(refreshed every ``refresh_rate`` steps; at least every 50 when output is not a terminal).
"""

from __future__ import annotations

import sys
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import TQDMProgressBar


def step_based(trainer: pl.Trainer) -> bool:
    return trainer.max_steps is not None and trainer.max_steps > 0


class StepProgressBar(TQDMProgressBar):
    def __init__(self, refresh_rate: int = 1) -> None:
        super().__init__(refresh_rate=refresh_rate)
        self._shown_step = -1

    def on_train_start(self, trainer: pl.Trainer, *args: Any) -> None:
        super().on_train_start(trainer, *args)
        if step_based(trainer):  # a mid-epoch resume calls no on_train_epoch_start before its first batch
            self._steps_bar(trainer)

    def on_train_epoch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        if not step_based(trainer):
            return super().on_train_epoch_start(trainer, *args)
        self._steps_bar(trainer)

    def _steps_bar(self, trainer: pl.Trainer) -> None:
        bar = self.train_progress_bar
        if bar.total != trainer.max_steps:  # first call of this process (fresh or resumed): one bar for the run
            bar.reset(total=trainer.max_steps)
            bar.initial = 0
            bar.set_description("Steps")
        self._show(bar, trainer.global_step)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if not step_based(trainer):
            return super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        step, bar = trainer.global_step, self.train_progress_bar
        if bar is not None and step != self._shown_step and self._should_update(step, bar.total):
            self._show(bar, step)
            bar.set_postfix(self.get_metrics(trainer, pl_module))

    def _show(self, bar: Any, step: int) -> None:
        self._shown_step = step
        if not bar.disable:
            bar.n = min(step, bar.total or step)
            bar.refresh()


def make_progress_bar(refresh_rate: int = 1) -> StepProgressBar:
    return StepProgressBar(refresh_rate=refresh_rate if sys.stdout.isatty() else max(refresh_rate, 50))
