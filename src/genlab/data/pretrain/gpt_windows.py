"""GPT-1 pretraining batches (Radford et al. 2018, §4.1): random contiguous windows of the concatenated token stream.

The corpus is the plain-text pretraining layout and tiers of XLNet pretraining (``genlab.data.pretrain.corpus``:
``corpus=text`` + ``path=``, or an offline mini of ``MINI_CORPORA``); documents are concatenated without separators
(the paper describes none). The tokenizer is GPT's lower-cased BPE (``genlab.data.tokenizers.gpt_bpe``): trained on
the training shards when ``tokenizer=null``, else a ``.model`` / HF ``openai-gpt`` folder / pretraining ``.ckpt``.

Training: a batch is ``batch_size`` windows of ``seq_len`` tokens starting at uniformly random offsets (the paper:
64 x 512 "randomly sampled, contiguous sequences"); the offsets of step s of pass p on rank r are drawn from a
generator keyed on (seed, p, s, r), so a resumed run rebuilds the same batches. One pass ("epoch") is
``n_train_tokens // (batch_size x world x seq_len)`` steps: the paper's 100 epochs are ``trainer.max_steps`` =
100 x that (logged at setup). Evaluation: the held-out stream cut into non-overlapping windows of ``seq_len``
(the last one shorter, its padding masked by ``lm_mask``), each rank scoring every world-th window.

Batch keys: ``input_ids`` long ``[B, T]``; ``lm_mask`` long ``[B, T]`` (evaluation only; 1 = real token); training
batches also ``pass`` and ``step`` (ints) for the resume position.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset

from genlab.data.loading.options import loader_options
from genlab.data.pretrain.corpus import PRETRAIN_CACHE, corpus_files, files_identity, tokenize_split
from genlab.data.pretrain.datamodule import PassSampler
from genlab.data.sources.tiers import DEFAULT_CACHE
from genlab.data.text.chunks import sniff_text
from genlab.data.text.parallel import resolve_num_proc
from genlab.data.text.progress import heartbeat
from genlab.data.tokenizers.gpt_bpe import (
    GPTSentencePiece,
    load_gpt_tokenizer,
    train_gpt_bpe,
)
from genlab.errors import DataError
from genlab.utils import stable_hash

log = logging.getLogger("genlab")


class RandomWindows(Dataset):
    """Item ``(pass, step)``: ``batch_size`` random windows of ``seq_len`` tokens of ``tokens`` for this rank."""

    def __init__(self, tokens: np.ndarray, batch_size: int, seq_len: int, seed: int, rank: int = 0, world: int = 1):
        if len(tokens) <= seq_len:
            raise DataError(f"the training split has {len(tokens)} tokens, not enough for one window of "
                            f"data.seq_len={seq_len}; lower data.seq_len or use a larger corpus.")
        self.tokens, self.batch_size, self.seq_len, self.seed, self.rank = tokens, batch_size, seq_len, seed, rank
        self.n_steps = max(1, len(tokens) // (batch_size * world * seq_len))

    def __len__(self) -> int:
        return self.n_steps

    def starts(self, pass_idx: int, step: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, pass_idx, step, self.rank])
        return rng.integers(0, len(self.tokens) - self.seq_len + 1, size=self.batch_size)

    def __getitem__(self, item: tuple[int, int] | int) -> dict[str, Any]:
        pass_idx, step = item if isinstance(item, tuple) else (0, item)
        rows = np.stack([self.tokens[s:s + self.seq_len] for s in self.starts(pass_idx, step)]).astype(np.int64)
        return {"input_ids": torch.from_numpy(rows), "pass": pass_idx, "step": step}


class HeldOutWindows(Dataset):
    """Non-overlapping windows of ``seq_len`` tokens (the last one padded, masked), every world-th for this rank."""

    def __init__(self, tokens: np.ndarray, seq_len: int, rank: int = 0, world: int = 1):
        self.tokens, self.seq_len = tokens, seq_len
        self.starts = list(range(0, len(tokens) - 1, seq_len))[rank::world]

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, k: int) -> dict[str, torch.Tensor]:
        piece = np.asarray(self.tokens[self.starts[k]:self.starts[k] + self.seq_len], dtype=np.int64)
        ids, mask = np.zeros(self.seq_len, dtype=np.int64), np.zeros(self.seq_len, dtype=np.int64)
        ids[: len(piece)], mask[: len(piece)] = piece, 1
        return {"input_ids": torch.from_numpy(ids), "lm_mask": torch.from_numpy(mask)}


class GPTPretrainDataModule(pl.LightningDataModule):
    """Random contiguous windows for GPT pretraining (see the module docstring). ``batch_size`` counts windows per
    device and micro-batch."""

    shards_by_rank = True  # each rank draws its own windows: no DistributedSampler

    def __init__(self, corpus: str = "text", path: str | None = None, cache_dir: str | None = None,
                 train_glob: str = "train/**/*.txt", valid_glob: str | None = "valid/**/*.txt",
                 tokenizer: str | None = None, vocab_size: int = 40478, seq_len: int = 512, batch_size: int = 64,
                 eval_batch_size: int | None = None, seed: int = 0, num_workers: int = 0, pin_memory: bool = False,
                 persistent_workers: bool = True, num_proc: int | None = None):
        super().__init__()
        self.corpus, self.path, self.train_glob, self.valid_glob = corpus, path, train_glob, valid_glob
        self.cache = Path(cache_dir).expanduser() if cache_dir else DEFAULT_CACHE
        self.tokenizer_path, self.vocab_size, self.seq_len = tokenizer, vocab_size, seq_len
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size or batch_size
        self.seed, self.loader_options = seed, loader_options(num_workers, pin_memory, persistent_workers)
        self.num_proc = num_proc  # tokenising processes (None: the available cores)
        self.tokenizer = None
        self.streams: dict[str, np.ndarray] = {}
        self.root: Path | None = None
        self._resume: tuple[int, int] | None = None
        self._next: tuple[int, int] | None = None  # (pass, step) of the next training batch

    # --- corpus -------------------------------------------------------------------------------------------------
    def _load(self) -> None:
        self.root, train, valid = corpus_files(self.corpus, self.path, self.cache, self.train_glob, self.valid_glob)
        work = self.cache / PRETRAIN_CACHE
        if self.tokenizer_path is None:
            model = work / f"gpt_bpe_{stable_hash(files_identity(train), self.vocab_size, 'gpt_bpe')}.model"
            if model.is_file():
                self.tokenizer = GPTSentencePiece(model)
            else:
                sniff_text(train)
                with heartbeat(f"training the GPT BPE tokenizer on {len(train)} file(s)"):
                    self.tokenizer = train_gpt_bpe(train, model, self.vocab_size)
        else:
            self.tokenizer = load_gpt_tokenizer(self.tokenizer_path)
        procs = resolve_num_proc(self.num_proc)
        self.streams = {"train": tokenize_split(train, self.tokenizer, work, False, num_proc=procs).tokens}
        if valid:
            self.streams["valid"] = tokenize_split(valid, self.tokenizer, work, False, num_proc=procs).tokens

    def prepare_data(self) -> None:
        if not self.streams:
            self._load()

    def setup(self, stage: str | None = None) -> None:
        if not self.streams:
            self._load()
        rank, world = self._rank_world()
        steps = RandomWindows(self.streams["train"], self.batch_size, self.seq_len, self.seed, rank, world).n_steps
        log.info("GPT pretraining: %d training tokens; one epoch = %d steps of %d x %d windows x %d processes "
                 "(100 epochs: trainer.max_steps=%d)", len(self.streams["train"]), steps, self.batch_size,
                 self.seq_len, world, 100 * steps)

    def model_overrides(self) -> dict[str, Any]:
        return {"vocab_size": self.tokenizer.vocab_size}

    def identity(self) -> dict[str, Any]:
        return {"corpus": self.corpus if self.corpus != "text" else str(self.root), "tokenizer":
                self.tokenizer.identity, "vocab_size": self.tokenizer.vocab_size}

    def sentencepiece_model(self) -> Path | None:
        """The trained BPE model (train.py keeps a copy in the run folder, so ``data.tokenizer=<the .ckpt>`` works)."""
        return self.tokenizer.model_file if isinstance(self.tokenizer, GPTSentencePiece) else None

    # --- loaders ------------------------------------------------------------------------------------------------
    def _rank_world(self) -> tuple[int, int]:
        t = self.trainer
        return (t.global_rank, t.world_size) if t is not None else (0, 1)

    def train_dataloader(self) -> DataLoader:
        rank, world = self._rank_world()
        data = RandomWindows(self.streams["train"], self.batch_size, self.seq_len, self.seed, rank, world)
        sampler = PassSampler(len(data))
        if self._resume is not None:
            p, step = self._resume
            sampler.pass_idx, sampler.start = (p, step) if step < len(data) else (p + 1, 0)
            self._resume = None
        return DataLoader(data, batch_size=None, sampler=sampler, **self.loader_options)

    def val_dataloader(self) -> DataLoader | list:
        if "valid" not in self.streams:
            return []
        rank, world = self._rank_world()
        return DataLoader(HeldOutWindows(self.streams["valid"], self.seq_len, rank, world),
                          batch_size=self.eval_batch_size, shuffle=False, **self.loader_options)

    def test_dataloader(self) -> DataLoader | list:
        return self.val_dataloader()

    # --- resume at the same (pass, step), counted when a training batch is consumed -----------------------------
    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        if self.trainer is not None and self.trainer.training and "pass" in batch:
            self._next = (int(batch["pass"]), int(batch["step"]) + 1)
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {} if self._next is None else {"pass": self._next[0], "step": self._next[1]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            self._resume = (int(state["pass"]), int(state["step"]))
