"""Stop on a non-finite training loss at the step it appears, before that step can be checkpointed."""

from __future__ import annotations

import math
from pathlib import Path

import pytorch_lightning as pl
import torch

from genlab.errors import UserError


class NonFiniteLossError(UserError):
    pass


def good_checkpoint_note(trainer: pl.Trainer) -> str:
    """Names the checkpoint to resume from, or says that none was written before the values went bad."""
    ckpt = trainer.checkpoint_callback
    last = Path(ckpt.dirpath) / "last.ckpt" if ckpt is not None and ckpt.dirpath else None
    if last is not None and last.is_file():
        return f"the last good checkpoint is {last} (written before the values went bad); resume from it with " \
               f"ckpt_path={last}"
    return "no checkpoint was written before the values went bad, so restart from scratch"


def non_finite(trainer: pl.Trainer, key_prefix: str) -> dict[str, float]:
    """Logged training scalars (``key_prefix``*) that are NaN or infinite; one host sync for all of them."""
    keys, values = [], []
    for key, value in trainer.callback_metrics.items():
        if key.startswith(key_prefix) and isinstance(value, torch.Tensor) and value.numel() == 1:
            keys.append(key)
            values.append(value.detach().float().reshape(1))
    if not keys:
        return {}
    flat = torch.cat([v.to(values[0].device) for v in values]).cpu()
    return {k: float(v) for k, v in zip(keys, flat.tolist()) if not math.isfinite(v)}


class NaNGuard(pl.Callback):
    """Checks every logged ``train/*`` scalar (losses of every task, both GAN players) after every training step.

    Lightning runs ModelCheckpoint after other callbacks, so the bad step raises before it can be saved, and
    :class:`genlab.callbacks.checkpoint.BestAndLastCheckpoint` refuses to write non-finite weights besides. The
    ``key`` is kept for configs that name it; ``every_n_steps`` is accepted for old configs and ignored: a NaN
    seen ten steps late had already been checkpointed."""

    def __init__(self, key: str = "train/loss", every_n_steps: int = 1, prefix: str = "train/"):
        self.key, self.prefix = key, prefix

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch, batch_idx) -> None:
        bad = non_finite(trainer, self.prefix)
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor) and loss.numel() == 1 and not math.isfinite(float(loss.detach())):
            bad.setdefault(self.key, float(loss.detach()))
        if bad:
            shown = ", ".join(f"{k}={v}" for k, v in sorted(bad.items()))
            raise NonFiniteLossError(
                f"{shown} at step {trainer.global_step}: {good_checkpoint_note(trainer)}. Lower the learning rate, "
                "enable clipping (trainer.gradient_clip_val) or use fp32 (trainer.precision=32-true)."
            )
