"""Save and restore the random state of every rank, so a resumed run draws the same dropout masks."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch


def collect_rng_state() -> dict[str, Any]:
    """Tensors and plain Python values only, so checkpoints load with ``torch.load(weights_only=True)``."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {"kind": str(kind), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "gauss": float(gauss)},
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    npy = state["numpy"]
    keys = npy["keys"].numpy().astype(np.uint32)
    np.random.set_state((npy["kind"], keys, npy["pos"], npy["has_gauss"], npy["gauss"]))
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class RNGStateCallback(pl.Callback):
    """Stores each rank's RNG state in the checkpoint; restores it when training (re)starts."""

    def __init__(self) -> None:
        self._pending: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        trainer = getattr(self, "_trainer", None)
        state = collect_rng_state()
        if trainer is None or trainer.world_size == 1:
            return {"ranks": [state]}
        gathered: list[Any] = [None] * trainer.world_size
        torch.distributed.all_gather_object(gathered, state)
        return {"ranks": gathered}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = state_dict

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._trainer = trainer

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Restored here, after sanity checks and loader set-up, right before the next training step.
        if self._pending is None:
            return
        ranks = self._pending["ranks"]
        if len(ranks) == trainer.world_size:
            restore_rng_state(ranks[trainer.global_rank])
        self._pending = None
