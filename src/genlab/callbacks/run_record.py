"""Store what a checkpoint needs to be understood later: the run's resolved config and the data identity
(dataset, vocabulary / tokenizer fingerprint), so eval.py can rebuild the run and refuse mismatched data."""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl

from genlab.errors import CheckpointError

KEY = "genlab"


class RunRecord(pl.Callback):
    def __init__(self, config: dict[str, Any], data_identity: dict[str, Any] | None = None):
        self.config, self.data_identity = config, dict(data_identity or {})

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        checkpoint[KEY] = {"config": self.config, "data_identity": self.data_identity}


def check_data_identity(saved: dict[str, Any], current: dict[str, Any], ckpt_path: str) -> None:
    """Raise CheckpointError when the checkpoint was trained on a different vocabulary/tokenizer."""
    for key in sorted(set(saved) & set(current)):
        if saved[key] != current[key]:
            raise CheckpointError(
                f"checkpoint {ckpt_path} was trained with {key}={saved[key]!r} but the data gives {current[key]!r}. "
                "Evaluate on the data the model was trained on (drop the data= override), or retrain."
            )
