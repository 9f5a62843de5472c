"""Keep a run's console to genlab's own lines, the progress bar and the summary.

Called first by the entry points (train.py, eval.py). What it silences is advice or noise about third-party
packages, not about the run: Lightning's info lines (accelerator inventory, the LitLogger tip, "Restoring states
from the checkpoint ...", "`Trainer.fit` stopped"), and the torch ``_pytree`` deprecation Lightning triggers.
Lightning's warnings (level WARNING and ``warnings.warn``) still show. ``GENLAB_VERBOSE=1`` keeps everything.
"""

from __future__ import annotations

import logging
import os
import warnings

LIGHTNING_LOGGERS = ("pytorch_lightning", "lightning_fabric", "lightning.pytorch", "lightning.fabric")
# (message regex, why it is safe to drop)
IGNORED_WARNINGS = (
    (r".*isinstance\(treespec, LeafSpec\)", "Lightning's own use of a torch API torch deprecated"),
)


def quiet_third_party() -> None:
    if os.environ.get("GENLAB_VERBOSE") == "1":
        return
    for name in LIGHTNING_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    for pattern, _why in IGNORED_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)


def quiet_resume(datamodule) -> None:
    """Two Lightning warnings that every resume of a genlab run would print, both false there: its checkpoint dir
    "exists and is not empty" (a resume continues in it by design), and the data loader "is not resumable" on a
    mid-epoch resume while the data module keeps its position in its own ``state_dict``, restored from the
    checkpoint. Data modules without that state still get the second."""
    import pytorch_lightning as pl

    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
    if type(datamodule).state_dict is not pl.LightningDataModule.state_dict:
        warnings.filterwarnings("ignore", message=r"You're resuming from a checkpoint that ended before the epoch")
