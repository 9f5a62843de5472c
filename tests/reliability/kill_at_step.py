"""Test-only callback, injected with ``+callbacks.kill=...``: the run SIGKILLs itself before optimiser step ``step``.

A real SIGKILL (no Python clean-up, no atexit, nothing flushed), at a step the test chooses, so the test knows a
checkpoint was written before the kill and that the run had not finished."""

from __future__ import annotations

import os
import signal

import pytorch_lightning as pl


class KillAtStep(pl.Callback):
    def __init__(self, step: int, sig: str = "SIGKILL"):
        self.step, self.sig = step, getattr(signal, sig)

    def on_train_batch_start(self, trainer: pl.Trainer, *args) -> None:
        if trainer.global_step >= self.step:
            os.kill(os.getpid(), self.sig)
