"""DataModule for ordered language-model corpora (WikiText, PTB, enwik8, text8, One Billion Word)."""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
from torch.utils.data import DataLoader

from genlab.data.lm.corpora import load_lm_corpus
from genlab.data.lm.streams import (
    ChunkedStreamSegments,
    ResumableSequentialSampler,
    StreamSegments,
    split_streams,
)
from genlab.data.loading.options import loader_options


class LMDataModule(pl.LightningDataModule):
    """Batches of ``batch_size`` contiguous streams per device, consumed in order (see ``genlab.data.lm.streams``).

    ``batch_size`` counts streams per device and micro-batch: when the trainer accumulates A micro-batches, the
    streams are split into ``world_size * A`` chunks, this rank's A chunks interleaved segment by segment (each
    batch names its ``chunk``; the LM task keeps one memory per chunk). The global batch is ``batch_size *
    world_size * A`` streams, and any split of it into processes and accumulation sees exactly the same streams.
    """

    shards_by_rank = True  # every rank reads its own streams: the trainer must not add a DistributedSampler

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
        pin_memory: bool = True,
        persistent_workers: bool = True,
        options: dict[str, Any] | None = None,
        num_proc: int | None = None,
    ):
        super().__init__()
        self.dataset, self.source, self.path, self.cache_dir = dataset, source, path, cache_dir
        self.batch_size, self.tgt_len, self.ext_len = batch_size, tgt_len, ext_len
        self.eval_batch_size, self.eval_tgt_len = eval_batch_size, eval_tgt_len or tgt_len
        self.eval_ext_len, self.options = eval_ext_len, dict(options or {})
        self.loader_options = loader_options(num_workers, pin_memory, persistent_workers)
        self.num_proc = num_proc  # tokenising processes (None: the available cores)
        self.corpus = None
        self._train: ChunkedStreamSegments | None = None
        self._sampler: ResumableSequentialSampler | None = None
        self._next_item, self._chunks = 0, 1  # resume position: items (segment x chunk) consumed in this pass

    # -- corpus ---------------------------------------------------------------------------------------------
    def _load(self):
        return load_lm_corpus(self.dataset, self.source, self.path, self.cache_dir, self.num_proc, **self.options)

    def prepare_data(self) -> None:
        self._load()  # builds the mini / downloads / tokenises once, on one process per node

    def setup(self, stage: str | None = None) -> None:
        if self.corpus is None:
            self.corpus = self._load()

    @property
    def _rank_world(self) -> tuple[int, int]:
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    @property
    def accumulation(self) -> int:
        """Micro-batches the trainer accumulates per optimiser step (``data.global_batch`` derives it)."""
        trainer = self.trainer
        return int(trainer.accumulate_grad_batches) if trainer is not None else 1

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
            **self.loader_options,
        )

    def train_dataloader(self) -> DataLoader:
        rank, world = self._rank_world
        chunks = self.accumulation
        if chunks != self._chunks:  # resumed with another accumulation: restart the interrupted segment
            self._next_item = self._next_item // self._chunks * chunks
            self._chunks = chunks
        self._train = ChunkedStreamSegments(self.corpus.splits["train"], self.batch_size, self.tgt_len, self.ext_len,
                                            rank, world, chunks)
        self._sampler = ResumableSequentialSampler(len(self._train))
        if 0 < self._next_item < len(self._train):
            self._sampler.start = self._next_item
        return self._loader(self._train, self._sampler)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self._segments("valid", self.eval_batch_size, self.eval_tgt_len, self.eval_ext_len))

    def test_dataloader(self) -> DataLoader:
        return self._loader(self._segments("test", self.eval_batch_size, self.eval_tgt_len, self.eval_ext_len))

    # -- resumable position: counted when a training batch is really consumed (after Lightning's prefetch) ----
    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        if self.trainer is not None and self.trainer.training:
            self._next_item = int(batch["segment"]) * self._chunks + int(batch.get("chunk", 0)) + 1
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"next_item": self._next_item, "chunks": self._chunks}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "next_item" in state:
            self._next_item, self._chunks = int(state["next_item"]), int(state.get("chunks", 1))
        else:  # checkpoints from before accumulation chunks: one item per segment
            self._next_item, self._chunks = int(state.get("next_segment", 0)), 1
