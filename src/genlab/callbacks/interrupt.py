"""SIGTERM, SIGINT and SLURM's pre-emption signal (SIGUSR1) stop training with a checkpoint of the current step.

The handler only sets a flag; the checkpoint is written at the end of the training batch in progress, where the
loop state is the one every periodic checkpoint holds, so resuming from it is as exact as from any other. Then
:class:`TrainingInterrupted` ends ``fit``; ``train.py`` records status ``interrupted`` and exits 128 + the signal.
"""

from __future__ import annotations

import logging
import signal
from typing import Any

import pytorch_lightning as pl

log = logging.getLogger("genlab")
SIGNALS = ("SIGTERM", "SIGINT", "SIGUSR1")


class TrainingInterrupted(Exception):
    def __init__(self, signum: int, step: int, checkpoint: str | None):
        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        name = signal.Signals(signum).name
        saved = (f"checkpoint of step {step} saved at {checkpoint}; resume with ckpt_path={checkpoint}"
                 if checkpoint else "no checkpoint callback, nothing saved")
        super().__init__(f"{name} received: training stopped at step {step}, {saved}")


class StopOnSignal(pl.Callback):
    """Installed for the duration of ``fit``; the handlers that were there before are put back afterwards."""

    def __init__(self, signals: tuple[str, ...] = SIGNALS) -> None:
        self.signals = tuple(getattr(signal, s) for s in signals if hasattr(signal, s))
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is None:
            log.warning("%s received: saving a checkpoint at the end of this training step, then stopping",
                        signal.Signals(signum).name)
        self.received = signum

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.received = None
        for signum in self.signals:
            try:
                self._previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not the main thread (e.g. a notebook's worker thread): leave signals alone
                return

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        if self.received is None:
            return
        path = None
        ckpt = trainer.checkpoint_callback
        if ckpt is not None and ckpt.dirpath:
            path = f"{ckpt.dirpath}/last.ckpt"
            trainer.save_checkpoint(path)
        # Lightning hands this step's logged values to the loggers only after this hook: do it now, or the step the
        # checkpoint holds would be missing from metrics.csv (the resumed run starts at the next one)
        trainer._logger_connector.update_train_step_metrics()
        raise TrainingInterrupted(self.received, trainer.global_step, path)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._restore()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._restore()

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._previous = {}
