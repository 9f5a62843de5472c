"""LightningDataModule for XLNet (PLM), DAE + Transformer-XL and BERT (MLM) pretraining batches.

Every batch is a whole step of ``batch_size`` streams per device (``DataLoader(batch_size=None)``), consumed in order so
memory carries across consecutive batches (no sample-level shuffling, as the authors' pipeline). When the trainer
accumulates A micro-batches (``data.global_batch``), the streams are split into ``world * A`` chunks and a training
batch is one chunk at one step (key ``chunk``), so the optimiser steps on the same examples for any processes x A split.
Items are addressed by (pass, step) and every random choice is keyed on (seed, pass, step, row), so a resumed run
rebuilds the same batches.

Batch keys (all ``torch.long`` unless noted):

* ``plm``: input_ids, token_type_ids [B,T]; ranks [B,T] (factorization order, per half); is_target [B,T] bool;
  target_positions, target [B,P]; target_mask [B,P] float; nsp_label [B]; reuse_len, pass, step (int). Only
  integers cross the loader: the task builds perm_mask [B,T,T] and target_mapping [B,P,T] on its device
  (``permutation.plm_dense_inputs``), so a 64 x 512 batch ships ~1 MB instead of ~80 MB.
* ``dae``: input_ids (corrupted), token_type_ids, labels [B,T] (-100 = not selected), nsp_label, reuse_len, pass,
  step; the task builds the reuse/non-reuse perm_mask block on its device.
* ``mlm``: input_ids (corrupted, ``<cls> A <sep> B <sep>``), token_type_ids, attention_mask [B,T] (1 = real; 0 at
  the ``<pad>`` of a ``tail_pad`` rewrite), labels [B,T], nsp_label, pass, step. Funnel-Transformer's examples are
  these with ``cls_token_type=2``, ``tail_pad`` = its pooling stride and ``masking.num_targets`` /
  ``masking.random_ids=any`` (``genlab.data.pretrain.mlm_examples``).
* training batches also carry ``chunk`` (int, the accumulation chunk; 0 without accumulation).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from genlab.data.loading.options import loader_options
from genlab.data.loading.samplers import StatefulSampler
from genlab.data.pretrain.corpus import (
    PretrainCorpus,
    TokenStream,
    load_pretrain_corpus,
)
from genlab.data.pretrain.mlm_examples import (
    MaskingConfig,
    bert_steps_per_pass,
    build_bert_example,
    choose_positions,
    corrupt,
    mlm_labels,
    rewrite_tail,
    special_mask,
)
from genlab.data.pretrain.permutation import sample_ranks, slot_targets, targets
from genlab.data.pretrain.xlnet_examples import (
    PAD_ID,
    SpanConfig,
    XLNetDataConfig,
    build_segments,
    example_rng,
    sample_example_targets,
    steps_per_pass,
    stream_rows,
)
from genlab.errors import ConfigError, DataError

OBJECTIVES = ("plm", "dae", "mlm")
SEGMENTS, PERMUTATION, TARGETS = range(3)  # purposes of the example generators (see PretrainBatches._rng)


class PassSampler(StatefulSampler[tuple[int, int]]):
    """Yields (pass, step) for step 0..n-1; each new iteration is the next pass. ``start`` resumes mid-pass."""

    def __init__(self, n: int):
        self.n, self.pass_idx, self.start = n, 0, 0

    def _order(self) -> Iterator[tuple[int, int]]:
        start, self.start = self.start, 0
        p = self.pass_idx
        self.pass_idx += 1
        return iter([(p, s) for s in range(start, self.n)])

    def __len__(self) -> int:
        return self.n


class PretrainBatches(Dataset):
    """Batch ``(pass, step)`` of one split for one objective, built on the fly from the token memmaps."""

    def __init__(self, stream: TokenStream, objective: str, batch_size: int, cfg: XLNetDataConfig,
                 masking: MaskingConfig, is_word_start: np.ndarray, vocab_size: int, seed: int, rank: int = 0,
                 world: int = 1, nsp: bool = False, cls_token_type: int = 0, tail_pad: int = 0):
        self.objective, self.cfg, self.masking, self.nsp = objective, cfg, masking, nsp
        self.cls_token_type, self.tail_pad = cls_token_type, tail_pad
        self.is_word_start, self.vocab_size, self.seed, self.rank = is_word_start, vocab_size, seed, rank
        bi = cfg.bi_data and objective != "mlm"
        self.tok, self.sid, self.reverse = stream_rows(stream.tokens, stream.sent_ids, batch_size, bi, rank, world)
        row_len = len(self.tok[0])
        self.n_steps = (bert_steps_per_pass(row_len, cfg.seq_len) if objective == "mlm"
                        else steps_per_pass(row_len, cfg))
        if self.n_steps < 1:
            need = cfg.seq_len if objective == "mlm" else cfg.reuse_len + cfg.tot_len + 1
            raise DataError(
                f"the split has {len(stream)} tokens: {batch_size * world} rows of {row_len} tokens, but one "
                f"example needs rows of more than {need} tokens; lower data.batch_size or data.seq_len, or use a "
                "larger corpus."
            )

    def __len__(self) -> int:
        return self.n_steps

    def _rng(self, pass_idx: int, step: int, row: int, purpose: int) -> np.random.Generator:
        """Keyed on the data pass (``offline_per_pass``: pass modulo num_passes) except for the permutation."""
        data_pass = pass_idx % self.cfg.num_passes if self.cfg.targets_sampling == "offline_per_pass" else pass_idx
        return example_rng(self.seed, pass_idx if purpose == PERMUTATION else data_pass, step,
                           self.rank * 10_000 + row, purpose)

    def __getitem__(self, item: tuple[int, int] | int) -> dict[str, Any]:
        pass_idx, step = item if isinstance(item, tuple) else (0, item)
        build = {"plm": self._plm, "dae": self._dae, "mlm": self._mlm}[self.objective]
        batch = build(pass_idx, step)
        batch["pass"], batch["step"] = pass_idx, step
        return batch

    # -- XLNet-style examples ----------------------------------------------------------------------------------
    def _segments(self, pass_idx: int, step: int):
        ids, segs, labels, rngs = [], [], [], []
        for b in range(len(self.tok)):
            rng = self._rng(pass_idx, step, b, SEGMENTS)
            i, s, lab = build_segments(self.tok[b], self.sid[b], step, self.cfg, rng)
            ids.append(i), segs.append(s), labels.append(lab), rngs.append(rng)
        return np.stack(ids), np.stack(segs), np.array(labels), rngs

    def _plm(self, pass_idx: int, step: int) -> dict[str, Any]:
        """Integers only: the task builds perm_mask and target_mapping from them on its device
        (:func:`genlab.data.pretrain.permutation.plm_dense_inputs`)."""
        cfg, R = self.cfg, self.cfg.reuse_len
        ids, segs, labels, _ = self._segments(pass_idx, step)
        is_masked = sample_example_targets(ids, self.reverse, cfg, self.is_word_start,
                                           self._rng(pass_idx, step, 0, TARGETS))
        ids_t = torch.from_numpy(ids)
        gen = torch.Generator().manual_seed(int(self._rng(pass_idx, step, 0, PERMUTATION).integers(2**62)))
        ranks = torch.cat([sample_ranks(n, min(cfg.perm_size, n), (len(ids),), generator=gen)
                           for n in (R, cfg.seq_len - R)], dim=1)  # per half, reuse half first
        is_target = targets(ids_t, torch.from_numpy(is_masked))
        positions, target, target_mask = slot_targets(ids_t, is_target, cfg.num_predict)
        return {
            "input_ids": ids_t, "token_type_ids": torch.from_numpy(segs), "ranks": ranks, "is_target": is_target,
            "target_positions": positions, "target": target, "target_mask": target_mask,
            "nsp_label": torch.from_numpy(labels), "reuse_len": R,
        }

    def _dae(self, pass_idx: int, step: int) -> dict[str, Any]:
        """The task builds perm_mask (:func:`genlab.data.pretrain.permutation.reuse_half_mask`) on its device."""
        cfg = self.cfg
        ids, segs, labels, rngs = self._segments(pass_idx, step)
        corrupted, labels_t = np.empty_like(ids), np.empty_like(ids)
        if self.masking.selection == "xlnet_spans":
            spans = sample_example_targets(ids, self.reverse, cfg, self.is_word_start,
                                           self._rng(pass_idx, step, 0, TARGETS)) & ~special_mask(ids)
        for b in range(len(ids)):
            if self.masking.selection == "xlnet_spans":
                pos = np.flatnonzero(spans[b])
            else:
                pos = choose_positions(ids[b], self.is_word_start, self.masking, rngs[b])
            corrupted[b] = corrupt(ids[b], pos, self.masking, self.vocab_size, rngs[b])
            labels_t[b] = mlm_labels(ids[b], pos)
        return {
            "input_ids": torch.from_numpy(corrupted), "token_type_ids": torch.from_numpy(segs),
            "labels": torch.from_numpy(labels_t), "nsp_label": torch.from_numpy(labels), "reuse_len": cfg.reuse_len,
        }

    # -- BERT examples -------------------------------------------------------------------------------------------
    def _mlm(self, pass_idx: int, step: int) -> dict[str, Any]:
        ids, types, labels, corrupted, nsp = [], [], [], [], []
        random_b = self.cfg.random_b_prob if self.nsp else 0.0
        for b in range(len(self.tok)):
            rng = self._rng(pass_idx, step, b, SEGMENTS)
            i, t, lab = build_bert_example(self.tok[b], self.sid[b], step, self.cfg.seq_len, random_b, rng,
                                           self.cls_token_type)
            i = rewrite_tail(i, self.tail_pad)  # before choosing targets: the new <sep> and <pad> are never targets
            pos = choose_positions(i, self.is_word_start, self.masking, rng)
            corrupted.append(corrupt(i, pos, self.masking, self.vocab_size, rng))
            labels.append(mlm_labels(i, pos)), types.append(t), nsp.append(lab), ids.append(i)
        input_ids = torch.from_numpy(np.stack(corrupted))
        real = torch.from_numpy(np.stack(ids) != PAD_ID).long()  # before corruption: a random id may be <pad>
        return {
            "input_ids": input_ids, "token_type_ids": torch.from_numpy(np.stack(types)),
            "attention_mask": real, "labels": torch.from_numpy(np.stack(labels)),
            "nsp_label": torch.from_numpy(np.array(nsp)),
        }


class ChunkedPretrainBatches(Dataset):
    """This rank's ``chunks`` accumulation chunks, interleaved step by step: item ``(pass, k * chunks + j)`` is
    step ``k`` of chunk ``j`` (with a ``chunk`` key, so the task keeps one memory per chunk).

    The forward rows are split into ``world * chunks`` groups and rank r's chunk j is group ``r * chunks + j``,
    built exactly as rank ``r * chunks + j`` of ``world * chunks`` processes would build it (same rows, same
    random draws): accumulating ``chunks`` micro-batches sees the same examples as ``chunks`` times more
    processes, whatever the split of the global batch (Transformer-XL's ``batch_chunk``).
    """

    def __init__(self, make: Callable[[int, int], PretrainBatches], rank: int, world: int, chunks: int):
        if chunks < 1:
            raise DataError(f"the number of accumulated chunks must be >= 1, got {chunks}.")
        self.chunks = [make(rank * chunks + j, world * chunks) for j in range(chunks)]
        self.n_steps = self.chunks[0].n_steps

    def __len__(self) -> int:
        return self.n_steps * len(self.chunks)

    def __getitem__(self, item: tuple[int, int]) -> dict[str, Any]:
        pass_idx, i = item
        step, chunk = divmod(i, len(self.chunks))
        return {**self.chunks[chunk][(pass_idx, step)], "chunk": chunk}


class PretrainDataModule(pl.LightningDataModule):
    """Pretraining batches for ``objective`` plm | dae | mlm on a plain-text corpus (``corpus=text`` with
    ``path=``) or an offline mini corpus (``genlab.data.pretrain.minis.MINI_CORPORA``). ``batch_size`` counts streams per device
    and micro-batch (even with bi_data); with A accumulated micro-batches the global batch is
    ``batch_size * world_size * A`` streams.

    Every objective is chunked the same way. PLM and DAE need it: their memory carries across steps of the same
    streams, so each chunk keeps its own. MLM (BERT) has no cross-batch state and would train correctly on
    consecutive steps too; chunking it anyway makes a global batch see the same examples on 1 or N processes."""

    shards_by_rank = True  # every rank reads its own streams: the trainer must not add a DistributedSampler

    def __init__(
        self,
        objective: str = "plm",
        corpus: str = "text",
        path: str | None = None,
        cache_dir: str | None = None,
        train_glob: str = "**/*.txt",
        valid_glob: str | None = None,
        tokenizer: str | None = None,
        vocab_size: int = 32000,
        lower: bool = False,
        batch_size: int = 16,
        eval_batch_size: int | None = None,
        seq_len: int = 512,
        reuse_len: int = 256,
        perm_size: int = 256,
        num_predict: int = 85,
        bi_data: bool = True,
        random_b_prob: float = 0.5,
        nsp: bool = False,
        span: dict[str, Any] | None = None,
        targets_sampling: str = "online",
        num_passes: int = 20,
        masking: dict[str, Any] | None = None,
        cls_token_type: int = 0,
        tail_pad: int = 0,
        seed: int = 0,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = True,
        num_proc: int | None = None,
    ):
        super().__init__()
        if objective not in OBJECTIVES:
            raise ConfigError(f"data.objective={objective!r} must be one of {OBJECTIVES}.")
        if objective == "mlm":  # the XLNet layout keys mean nothing to BERT/Funnel examples: only seq_len counts
            reuse_len, perm_size = max(1, seq_len // 2), 1
            num_predict = 0
        if seq_len - reuse_len > 0 and (reuse_len % perm_size or (seq_len - reuse_len) % perm_size):
            raise ConfigError(f"data.perm_size={perm_size} must divide reuse_len={reuse_len} and "
                              f"seq_len - reuse_len={seq_len - reuse_len} (each half is permuted in chunks).")
        if (cls_token_type or tail_pad) and objective != "mlm":
            raise ConfigError("data.cls_token_type and data.tail_pad shape masked-LM examples (Funnel); they need "
                              f"data.objective=mlm, not {objective!r}.")
        if tail_pad < 0 or tail_pad >= seq_len - 4:
            raise ConfigError(f"data.tail_pad={tail_pad} must be in [0, seq_len - 4) (seq_len={seq_len}).")
        self.objective, self.nsp, self.seed = objective, nsp, seed
        self.loader_options = loader_options(num_workers, pin_memory, persistent_workers)
        self.cls_token_type, self.tail_pad = cls_token_type, tail_pad
        self.corpus_args = dict(corpus=corpus, path=path, cache_dir=cache_dir, train_glob=train_glob,
                                valid_glob=valid_glob, tokenizer=tokenizer, vocab_size=vocab_size, lower=lower,
                                num_proc=num_proc)  # num_proc: tokenising processes (None: the available cores)
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size or batch_size
        self.cfg = XLNetDataConfig(seq_len, reuse_len, perm_size, num_predict, bi_data, random_b_prob,
                                   SpanConfig(**(span or {})), targets_sampling, num_passes)
        self.masking = MaskingConfig(**(masking or {}))
        self.corpus: PretrainCorpus | None = None
        self._sampler: PassSampler | None = None
        self._resume: tuple[int, int] | None = None
        self._next: tuple[int, int] | None = None  # (pass, item) of the next training batch, item = step*A + chunk
        self._chunks = 1  # A of the items counted in _next / _resume

    def prepare_data(self) -> None:
        load_pretrain_corpus(**self.corpus_args)

    def setup(self, stage: str | None = None) -> None:
        if self.corpus is None:
            self.corpus = load_pretrain_corpus(**self.corpus_args)

    def model_overrides(self) -> dict[str, Any]:
        return {"vocab_size": self.corpus.tokenizer.vocab_size}

    def identity(self) -> dict[str, Any]:
        return self.corpus.identity()

    def sentencepiece_model(self) -> Path:
        """The SentencePiece model the examples are encoded with (trained into the cache when data.tokenizer=null)."""
        return self.corpus.tokenizer.model_file

    def _rank_world(self) -> tuple[int, int]:
        t = self.trainer
        return (t.global_rank, t.world_size) if t is not None else (0, 1)

    @property
    def accumulation(self) -> int:
        """Micro-batches the trainer accumulates per optimiser step (``data.global_batch`` derives it)."""
        t = self.trainer
        return int(t.accumulate_grad_batches) if t is not None else 1

    def batches(self, split: str, batch_size: int | None = None, rank: int | None = None,
                world: int | None = None) -> PretrainBatches:
        """Batches of ``split`` as process ``rank`` of ``world`` builds them (default: this process)."""
        if split not in self.corpus.splits:
            raise DataError(f"the corpus has no '{split}' split; set data.valid_glob= to your held-out shards.")
        if rank is None or world is None:
            rank, world = self._rank_world()
        cfg = self.cfg if split == "train" else replace(self.cfg, targets_sampling="online")
        return PretrainBatches(self.corpus.splits[split], self.objective, batch_size or self.batch_size, cfg,
                               self.masking, self.corpus.tokenizer.is_word_start, self.corpus.tokenizer.vocab_size,
                               self.seed + (0 if split == "train" else 7919), rank, world, self.nsp,
                               self.cls_token_type, self.tail_pad)

    def _loader(self, data: PretrainBatches, sampler: Sampler) -> DataLoader:
        return DataLoader(data, batch_size=None, sampler=sampler, **self.loader_options)

    def train_dataloader(self) -> DataLoader:
        rank, world = self._rank_world()
        chunks = self.accumulation
        data = ChunkedPretrainBatches(lambda r, w: self.batches("train", rank=r, world=w), rank, world, chunks)
        self._sampler = PassSampler(len(data))
        if self._resume is not None:
            p, item = self._resume
            if chunks != self._chunks:  # resumed with another accumulation: restart the interrupted step
                item = item // self._chunks * chunks
            self._sampler.pass_idx, self._sampler.start = (p, item) if item < len(data) else (p + 1, 0)
            self._resume = None
        self._chunks = chunks
        return self._loader(data, self._sampler)

    def val_dataloader(self) -> DataLoader | list:
        if "valid" not in self.corpus.splits:
            return []
        data = self.batches("valid", self.eval_batch_size)
        return self._loader(data, PassSampler(len(data)))

    def test_dataloader(self) -> DataLoader | list:
        return self.val_dataloader()

    # -- resume at the same pass and step: counted when a training batch is really consumed (after prefetch) ---
    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        if self.trainer is not None and self.trainer.training and "pass" in batch:
            item = int(batch["step"]) * self._chunks + int(batch.get("chunk", 0))
            self._next = (int(batch["pass"]), item + 1)
        return batch

    def state_dict(self) -> dict[str, Any]:
        if self._next is None:
            return {}
        return {"pass": self._next[0], "item": self._next[1], "chunks": self._chunks}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "item" in state:
            self._resume, self._chunks = (int(state["pass"]), int(state["item"])), int(state["chunks"])
        elif state:  # checkpoints from before accumulation chunks: one item per step
            self._resume, self._chunks = (int(state["pass"]), int(state["step"])), 1
