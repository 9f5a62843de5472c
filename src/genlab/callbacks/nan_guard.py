"""Stop cleanly on a non-finite training loss, before a bad step is checkpointed."""

from __future__ import annotations

import math

import pytorch_lightning as pl

from genlab.errors import UserError


class NonFiniteLossError(UserError):
    pass


class NaNGuard(pl.Callback):
    """Checks the logged ``train/loss`` every ``every_n_steps`` (one host sync per check, not per step).

    Lightning runs ModelCheckpoint after other callbacks, so a NaN step raises before it can be saved.
    """

    def __init__(self, key: str = "train/loss", every_n_steps: int = 10):
        self.key, self.every_n_steps = key, every_n_steps

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch, batch_idx) -> None:
        if trainer.global_step % self.every_n_steps:
            return
        value = trainer.callback_metrics.get(self.key)
        if value is not None and not math.isfinite(float(value)):
            raise NonFiniteLossError(
                f"{self.key} became {float(value)} at step {trainer.global_step}. The last good checkpoint is kept "
                "in the run's checkpoints/ folder; lower the learning rate, enable clipping "
                "(trainer.gradient_clip_val) or use fp32 (trainer.precision=32-true), then resume from it."
            )
