"""AWD-LSTM data iteration: ordered streams with a variable BPTT length per training step (AWD-LSTM, as the MoS code).

Training windows: ``bptt' = bptt`` with probability 0.95 else ``bptt / 2``; ``seq_len = max(5, int(N(bptt', 5)))``
capped at ``bptt + max_seq_len_delta``; each batch carries ``lr_scale = seq_len / bptt`` (the sampled length,
even when the last window is cut), which the task applies to that step only. The lengths of epoch ``e`` come
from a NumPy generator seeded with ``(seed, e)`` rather than the original's global RNG, so a resumed run draws
exactly the same windows. Validation and test use fixed-length windows (``eval_bptt``), batch 10 and 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset

from genlab.data.lm.corpora import load_lm_corpus
from genlab.data.lm.streams import StreamSegments, split_streams
from genlab.data.lm.synthetic_rank import make_topic_corpus
from genlab.data.loading.options import loader_options
from genlab.data.loading.samplers import StatefulSampler
from genlab.errors import DataError
from genlab.utils import stable_hash

MIN_SEQ_LEN, SEQ_LEN_STD, LONG_PROB = 5, 5.0, 0.95


def sample_seq_len(rng: np.random.Generator, bptt: int, max_seq_len_delta: int) -> int:
    base = bptt if rng.random() < LONG_PROB else bptt / 2
    return min(max(MIN_SEQ_LEN, int(rng.normal(base, SEQ_LEN_STD))), bptt + max_seq_len_delta)


def epoch_windows(n_rows: int, bptt: int, max_seq_len_delta: int, seed: int, epoch: int) -> list[tuple[int, int, int]]:
    """``(start, length, sampled_seq_len)`` of every training window of one pass over ``n_rows`` time steps."""
    rng = np.random.default_rng([seed, epoch])
    windows, i = [], 0
    while i < n_rows - 2:
        seq_len = sample_seq_len(rng, bptt, max_seq_len_delta)
        windows.append((i, min(seq_len, n_rows - 1 - i), seq_len))
        i += seq_len
    return windows


class VariableBPTTSampler(StatefulSampler[tuple[int, int, int, int]]):
    """Yields ``(k, start, length, seq_len)`` window descriptors; Lightning calls ``set_epoch`` every epoch.
    ``resume = (epoch, k)`` skips the first k windows of that epoch once (a mid-epoch resume)."""

    def __init__(self, n_rows: int, bptt: int, max_seq_len_delta: int, seed: int):
        self.n_rows, self.bptt, self.delta, self.seed = n_rows, bptt, max_seq_len_delta, seed
        self.epoch, self.resume = 0, (0, 0)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _windows(self) -> list[tuple[int, int, int]]:
        return epoch_windows(self.n_rows, self.bptt, self.delta, self.seed, self.epoch)

    def _order(self) -> Iterator[tuple[int, int, int, int]]:
        (resume_epoch, skip), self.resume = self.resume, (0, 0)
        skip = skip if resume_epoch == self.epoch else 0
        for k, window in enumerate(self._windows()):
            if k >= skip:
                yield (k, *window)

    # No __len__: the number of windows changes from epoch to epoch, and a sized loader would make Lightning
    # fix the epoch length (and the validation point) from the first epoch. Unsized, each epoch ends when its
    # windows run out.


class BPTTWindows(Dataset):
    """Batch-major streams ``rows [B, L]``; item = one window (a whole batch)."""

    def __init__(self, rows: np.ndarray, bptt: int):
        self.rows, self.bptt = rows, bptt

    def __getitem__(self, window: tuple[int, int, int, int]) -> dict[str, Any]:
        k, start, length, seq_len = window
        chunk = np.asarray(self.rows[:, start : start + length + 1], dtype=np.int64)
        return {
            "input_ids": torch.from_numpy(chunk[:, :-1].copy()),
            "target": torch.from_numpy(chunk[:, 1:].copy()),
            "segment": k,
            "lr_scale": seq_len / self.bptt,
        }


def load_corpus(dataset: str, source: str, path: str | None, cache_dir: str | None, options: dict[str, Any],
                num_proc: int | None = None):
    if dataset == "synthetic_topics":
        return make_topic_corpus(**options)

    return load_lm_corpus(dataset, source, path, cache_dir, num_proc, **options)


def vocab_fingerprint(corpus) -> str:
    vocab = corpus.vocab
    if hasattr(vocab, "fingerprint"):
        return vocab.fingerprint()
    return stable_hash(list(vocab))


class BPTTDataModule(pl.LightningDataModule):
    """PTB / WikiText-2 / char streams (``genlab.data.lm.corpora``) or ``dataset=synthetic_topics``, batched as
    in the AWD-LSTM code: ``batch_size`` contiguous streams per device, variable-length training windows.

    Gradient accumulation is the AWD-LSTM task's own (``task.small_batch_size`` column chunks, each with its own
    hidden state, under manual optimisation), so the trainer's accumulation and ``data.global_batch`` are refused.
    """

    shards_by_rank = True  # every rank reads its own streams: the trainer must not add a DistributedSampler
    accumulation_key = "task.small_batch_size"

    def __init__(
        self,
        dataset: str,
        source: str = "download",
        path: str | None = None,
        cache_dir: str | None = None,
        batch_size: int = 12,
        eval_batch_size: int = 10,
        test_batch_size: int = 1,
        bptt: int = 70,
        eval_bptt: int = 70,
        max_seq_len_delta: int = 40,
        seed: int = 28,
        options: dict[str, Any] | None = None,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = True,
        num_proc: int | None = None,
    ):
        super().__init__()
        if bptt < 1 or eval_bptt < 1:
            raise DataError(f"data.bptt and data.eval_bptt must be >= 1 (got {bptt}, {eval_bptt}).")
        self.dataset, self.source, self.path, self.cache_dir = dataset, source, path, cache_dir
        self.batch_size, self.eval_batch_size, self.test_batch_size = batch_size, eval_batch_size, test_batch_size
        self.bptt, self.eval_bptt, self.max_seq_len_delta, self.seed = bptt, eval_bptt, max_seq_len_delta, seed
        self.options = dict(options or {})
        self.loader_options = loader_options(num_workers, pin_memory, persistent_workers)
        self.num_proc = num_proc  # tokenising processes (None: the available cores)
        self.corpus = None
        self._sampler: VariableBPTTSampler | None = None
        self._position = (0, 0)  # (epoch, next window) of the training pass

    def prepare_data(self) -> None:
        load_corpus(self.dataset, self.source, self.path, self.cache_dir, self.options, self.num_proc)

    def setup(self, stage: str | None = None) -> None:
        if self.corpus is None:
            self.corpus = load_corpus(self.dataset, self.source, self.path, self.cache_dir, self.options, self.num_proc)

    def model_overrides(self) -> dict[str, Any]:
        return {"vocab_size": len(self.corpus.vocab)}

    def identity(self) -> dict[str, Any]:
        return {"dataset": self.corpus.name, "vocab_size": len(self.corpus.vocab), "vocab": vocab_fingerprint(self.corpus)}

    @property
    def _rank_world(self) -> tuple[int, int]:
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def rows(self, split: str, n_streams: int) -> np.ndarray:
        rank, world = self._rank_world
        return split_streams(self.corpus.splits[split], n_streams, rank, world)

    def train_dataloader(self) -> DataLoader:
        rows = self.rows("train", self.batch_size)
        self._sampler = VariableBPTTSampler(rows.shape[1], self.bptt, self.max_seq_len_delta, self.seed)
        self._sampler.resume = self._position
        if self.trainer is not None:  # Lightning prefetches the first batch before its own set_epoch call
            self._sampler.set_epoch(self.trainer.current_epoch)
        return DataLoader(BPTTWindows(rows, self.bptt), batch_size=None, sampler=self._sampler, **self.loader_options)

    def _eval_loader(self, split: str, n_streams: int) -> DataLoader:
        return DataLoader(StreamSegments(self.rows(split, n_streams), self.eval_bptt), batch_size=None, shuffle=False,
                          **self.loader_options)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader("valid", self.eval_batch_size)

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader("test", self.test_batch_size)

    # resumable position: the next window of the current epoch, counted when a batch is really consumed
    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        if self.trainer is not None and self.trainer.training:
            self._position = (self.trainer.current_epoch, int(batch["segment"]) + 1)
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self._position[0], "next_window": self._position[1]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._position = (int(state.get("epoch", 0)), int(state.get("next_window", 0)))
