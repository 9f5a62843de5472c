"""A shuffled training order that a checkpoint can resume in the middle of an epoch, for every map-style training
split (finetuning sets, the 2-D toy data, one-class and density image streams).

``DataLoader(shuffle=True)`` draws each epoch's order from the global RNG when the epoch starts and keeps no
position, so a run resumed from a mid-epoch checkpoint trained on another order than the run it continues. Here
the order of epoch ``e`` is a function of (seed, e) only, and the DataModule records how many examples of the
epoch were consumed (counted when Lightning hands a batch to the step, after its one-batch prefetch); resuming
skips exactly those."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset

from genlab.data.loading.samplers import StatefulSampler


class EpochShuffle(StatefulSampler[int]):
    """Permutation of ``range(n)`` seeded by (``seed``, epoch); Lightning sets the epoch through ``set_epoch``."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed, self.epoch = n, seed, 0
        self.iter_epoch = 0  # the epoch the running iteration belongs to
        self._resume: tuple[int, int] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def resume(self, epoch: int, consumed: int) -> None:
        self._resume = (epoch, consumed)

    def _order(self) -> Iterator[int]:
        g = torch.Generator()
        g.manual_seed(self.seed * 1_000_003 + self.epoch)
        order = torch.randperm(self.n, generator=g).tolist()
        start = 0
        if self._resume is not None and self._resume[0] == self.epoch:
            start = self._resume[1]
        self._resume, self.iter_epoch = None, self.epoch
        return iter(order[start:])

    def __len__(self) -> int:
        return self.n


def _rows(batch: Any) -> int:
    if isinstance(batch, torch.Tensor):
        return batch.shape[0]
    values = batch.values() if isinstance(batch, dict) else batch
    return next(_rows(v) for v in values if isinstance(v, (torch.Tensor, dict, list, tuple)))


class ResumableTrainOrder:
    """Mixin for a LightningDataModule: ``resumable_loader`` for the training split, and the position in its
    ``state_dict`` (which Lightning stores in every checkpoint)."""

    _order: EpochShuffle | None = None
    _position: tuple[int, int] = (0, 0)  # (epoch, examples of it consumed)

    def resumable_loader(self, dataset: Dataset, batch_size: int, seed: int | None = None, **kwargs: Any
                         ) -> DataLoader:
        """``seed`` keys the order (a DataModule's ``data.seed``); by default the run's seed, which
        ``seed_everything`` exports."""
        if seed is None:
            seed = int(os.environ.get("PL_GLOBAL_SEED", 0))
        self._order = EpochShuffle(len(dataset), seed)
        trainer = getattr(self, "trainer", None)
        if trainer is not None:  # Lightning prefetches the first batch of a (resumed) fit before its set_epoch call
            self._order.set_epoch(trainer.current_epoch)
        if self._position[1]:
            self._order.resume(*self._position)
        return DataLoader(dataset, batch_size=batch_size, sampler=self._order, **kwargs)

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        trainer: pl.Trainer | None = getattr(self, "trainer", None)
        if trainer is not None and trainer.training and self._order is not None:
            epoch, consumed = self._position
            if epoch != self._order.iter_epoch:
                epoch, consumed = self._order.iter_epoch, 0
            self._position = (epoch, consumed + _rows(batch))
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"train_epoch": self._position[0], "train_consumed": self._position[1]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._position = (int(state.get("train_epoch", 0)), int(state.get("train_consumed", 0)))
        if self._order is not None and self._position[1]:
            self._order.resume(*self._position)
