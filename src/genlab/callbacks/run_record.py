"""Store what a checkpoint needs to be understood later: the run's resolved config and the data identity
(dataset, vocabulary / tokenizer fingerprint), so eval.py can rebuild the run and refuse mismatched data.
The record's layout and its readers are in :mod:`genlab.checkpoints`."""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl

from genlab.checkpoints import write_record


class RunRecord(pl.Callback):
    def __init__(self, config: dict[str, Any], data_identity: dict[str, Any] | None = None):
        self.config, self.data_identity = config, dict(data_identity or {})

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        write_record(checkpoint, config=self.config, data_identity=self.data_identity)
