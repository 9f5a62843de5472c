"""Resume from a checkpoint written at a train-epoch end as from the start of the next epoch.

Lightning saves the epoch-end checkpoint in ``on_train_epoch_end`` (after the epoch's last batch and its
validation), where the fit loop has counted the epoch as processed but not yet completed. With
``trainer.max_steps`` set, Lightning 2.6 resumes such a checkpoint by re-entering the finished epoch: the epoch loop
runs one empty iteration (counting one batch more for the loggers), the epoch-end hooks run a second time and the
next epoch is numbered one too high, so its samplers (``set_epoch``) draw another epoch's order. Without max_steps
Lightning already treats the epoch as done; this callback makes the max_steps case do the same: the epoch is
completed and the loops start the next epoch fresh, exactly as the uninterrupted run does after that save,
including a new loader iterator created after the RNG state is restored (creating one draws from torch's RNG)."""

from __future__ import annotations

import pytorch_lightning as pl
from pytorch_lightning.loops.loop import _Loop


class ResumeAtEpochBoundary(pl.Callback):
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        fit_loop = trainer.fit_loop
        # fit_loop.reset() (just before this hook) classified the restored progress
        if not fit_loop.restarted_on_epoch_end:
            return
        fit_loop.epoch_progress.increment_completed()
        # FitLoop's own setter keeps restarting on with max_steps; the base setter clears it for its child loops too
        _Loop.restarting.fset(fit_loop, False)
        for loop in (fit_loop, fit_loop.epoch_loop, fit_loop.epoch_loop.val_loop):
            loop.reset_restart_stage()
        # the epoch loop then calls iter() on the loader as at every new epoch (RNGStateCallback, an earlier
        # on_train_start, has restored the random state the uninterrupted run had at this point)
        fit_loop._resuming_from_checkpoint = False
