"""DataModule for ordered language-model corpora (WikiText, PTB, enwik8, text8, One Billion Word)."""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from genlab.data.lm_corpora import load_lm_corpus
from genlab.data.streams import ResumableSequentialSampler, StreamSegments, split_streams


class LMDataModule(pl.LightningDataModule):
    """Batches of ``batch_size`` contiguous streams per device, consumed in order (see ``genlab.data.streams``).

    ``batch_size`` counts streams per device: the global batch is ``batch_size * world_size`` streams, and a
    data-parallel run sees exactly the streams of a single process with the global batch.
    """

    def __init__(
        self,
        dataset: str,
        source: str = "download",
        path: str | None = None,
        cache_dir: str | None = None,
        batch_size: int = 60,
        tgt_len: int = 150,
        ext_len: int = 0,
        eval_batch_size: int = 10,
        eval_tgt_len: int | None = None,
        eval_ext_len: int = 0,
        num_workers: int = 0,
        options: dict[str, Any] | None = None,
    ):
        super().__init__()
        self.dataset, self.source, self.path, self.cache_dir = dataset, source, path, cache_dir
        self.batch_size, self.tgt_len, self.ext_len = batch_size, tgt_len, ext_len
        self.eval_batch_size, self.eval_tgt_len = eval_batch_size, eval_tgt_len or tgt_len
        self.eval_ext_len, self.num_workers, self.options = eval_ext_len, num_workers, dict(options or {})
        self.corpus = None
        self._train: StreamSegments | None = None
        self._sampler: ResumableSequentialSampler | None = None
        self._next_segment = 0

    # -- corpus ---------------------------------------------------------------------------------------------
    def _load(self):
        return load_lm_corpus(self.dataset, self.source, self.path, self.cache_dir, **self.options)

    def prepare_data(self) -> None:
        self._load()  # builds the mini / downloads / tokenises once, on one process per node

    def setup(self, stage: str | None = None) -> None:
        if self.corpus is None:
            self.corpus = self._load()

    @property
    def _rank_world(self) -> tuple[int, int]:
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def model_overrides(self) -> dict[str, Any]:
        return {"vocab_size": len(self.corpus.vocab)}

    def identity(self) -> dict[str, Any]:
        """What a checkpoint must agree with to be evaluated on this data."""
        return {"dataset": self.corpus.name, "vocab_size": len(self.corpus.vocab), "vocab": self.corpus.vocab.fingerprint()}

    # -- loaders ----------------------------------------------------------------------------------------------
    def _segments(self, split: str, n_streams: int, tgt_len: int, ext_len: int) -> StreamSegments:
        rank, world = self._rank_world
        return StreamSegments(split_streams(self.corpus.splits[split], n_streams, rank, world), tgt_len, ext_len)

    def _loader(self, segments: StreamSegments, sampler=None) -> DataLoader:
        return DataLoader(
            segments,
            batch_size=None,
            sampler=sampler,
            shuffle=False,
            num_workers=self.num_workers,
            pin_memory=torch.cuda.is_available(),
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        self._train = self._segments("train", self.batch_size, self.tgt_len, self.ext_len)
        self._sampler = ResumableSequentialSampler(len(self._train))
        if 0 < self._next_segment < len(self._train):
            self._sampler.start = self._next_segment
        return self._loader(self._train, self._sampler)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self._segments("valid", self.eval_batch_size, self.eval_tgt_len, self.eval_ext_len))

    def test_dataloader(self) -> DataLoader:
        return self._loader(self._segments("test", self.eval_batch_size, self.eval_tgt_len, self.eval_ext_len))

    # -- resumable position: counted when a training batch is really consumed (after Lightning's prefetch) ----
    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        if self.trainer is not None and self.trainer.training:
            self._next_segment = int(batch["segment"]) + 1
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"next_segment": self._next_segment}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._next_segment = int(state.get("next_segment", 0))
