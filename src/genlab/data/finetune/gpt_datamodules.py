"""GPT-1 finetuning data (GPT-1 paper §3.3, §4.2): the finetuning suite's DataModules with GPT's input
transformations (``genlab.data.finetune.gpt_transforms``) and tokenizer (``genlab.data.tokenizers.gpt_bpe``).

* :class:`GPTClassificationDataModule` — every GLUE task, SNLI / SciTail and the document-classification sets
  through ``ClassificationDataModule``'s readers, tiers and splits. ``layout``: ``gpt`` = ``<s> text <e>`` or
  ``<s> a $ b <e>`` (classification, entailment); ``gpt_both_orders`` = ``[<s> a $ b <e>, <s> b $ a <e>]``
  (similarity: MRPC, QQP, STS-B).
* :class:`GPTRaceDataModule` — RACE's reader and tiers; one ``<s> article question $ option <e>`` per option.
* :class:`GPTStoryClozeDataModule` — Story Cloze (``genlab.data.finetune.story_cloze``): the release's 1,497 / 374
  split of the validation file for train / dev, the test file for test; ``<s> story $ ending <e>`` per ending, both
  parts cut to ``max_seq_len // 2 − 2`` tokens (``transform_roc``).

RACE and Story Cloze are streamed into the encoded-text cache (``genlab.data.finetune.encoded_choices``: one row of
ids per question or story, a RACE article's ids stored once, tokenised over ``data.num_proc`` processes) and laid out
one example at a time.

Batches (right padding to the longest sequence of the batch, as the release shrinks ``n_ctx``): ``input_ids`` /
``lm_mask`` long ``[B, T]`` (one sequence), ``[B, 2, T]`` (both orders) or ``[B, K, T]`` (choices); ``labels``
``[B]`` (long, or float for STS-B); ``index`` ``[B]``; RACE adds ``level`` ``[B]`` (0 middle, 1 high) and ``qid``.
The specials are the ids after the tokenizer's vocabulary (``SpecialTokens.after_vocab``), as the model's rows.

``tokenizer``: the pretraining run's (``data.tokenizer=<its .ckpt>``, or a BPE ``.model``, or an HF ``openai-gpt``
folder); null trains a GPT BPE of ``vocab_size`` pieces on the task's training text (from-scratch runs).
Training order: the finetuning suite's resumable order (``genlab.data.loading.resumable``), a permutation per
epoch keyed on (``seed``, epoch) whose position is checkpointed, so a killed run resumes mid-epoch on exactly the
batches it would have seen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from itertools import chain
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset

from genlab.data.finetune import gpt_transforms as T
from genlab.data.finetune import story_cloze as sc
from genlab.data.finetune.datamodule import ClassificationDataModule, EncodedSplit
from genlab.data.finetune.encoded_choices import EncodedChoices, share_first_text, texts_encoder
from genlab.data.finetune.race import RaceDataModule, RaceQuestion
from genlab.data.finetune.tokenizer_cache import cached_tokenizer_model
from genlab.data.loading.resumable import ResumableTrainOrder
from genlab.data.sources.tiers import locate
from genlab.data.text.cache_entry import file_stamp
from genlab.data.text.distinct import first_occurrences
from genlab.data.text.encoded_texts import EncodedRows, encode_rows, tokenizer_identity
from genlab.data.tokenizers.gpt_bpe import (
    GPTSentencePiece,
    GPTTokenizer,
    load_gpt_tokenizer,
    train_gpt_bpe,
)
from genlab.errors import DataError

GPT_LAYOUTS = ("gpt", "gpt_both_orders")


# ------------------------------------------------------------------------------------------------ shared parts
def gpt_tokenizer(path: str | None, texts: Callable[[], Iterable[str | None]], cache_dir: str | None,
                  vocab_size: int) -> GPTTokenizer:
    """``data.tokenizer`` when set; else a GPT BPE trained (once, cached per text) on ``texts()`` (streamed)."""
    if path is not None:
        return load_gpt_tokenizer(path)
    return GPTSentencePiece(cached_tokenizer_model(texts, cache_dir, "gpt_bpe", vocab_size,
                                                   lambda text, model: train_gpt_bpe([text], model, vocab_size)))


def collate(items: list[dict[str, Any]]) -> dict[str, Any]:
    ids, mask = T.right_pad([it["tokens"] for it in items])
    batch: dict[str, Any] = {"input_ids": ids, "lm_mask": mask, "index": torch.tensor([it["index"] for it in items])}
    if "labels" in items[0]:
        batch["labels"] = torch.tensor([it["labels"] for it in items])
    if "level" in items[0]:
        batch["level"] = torch.tensor([it["level"] for it in items])
    if "qid" in items[0]:
        batch["qid"] = [it["qid"] for it in items]
    return batch


class GPTLoaders:
    """The GPT DataModules' loaders: the training split in the shared resumable order
    (``genlab.data.loading.resumable``, keyed on ``data.seed``), evaluation splits in order; GPT's collate."""

    seed: int
    num_workers: int

    def train_loader(self, data: Dataset, batch_size: int) -> DataLoader:
        return self.resumable_loader(data, batch_size, seed=self.seed, collate_fn=collate,
                                     num_workers=self.num_workers, persistent_workers=self.num_workers > 0)

    def eval_loader(self, data: Dataset, batch_size: int) -> DataLoader:
        return DataLoader(data, batch_size=batch_size, shuffle=False, collate_fn=collate,
                          num_workers=self.num_workers, persistent_workers=self.num_workers > 0)


# ------------------------------------------------------------------------------------------------ GLUE / NLI / docs
def gpt_item(a: list[int], b: list[int] | None, label: float | None, both_orders: bool, max_len: int,
             special: T.SpecialTokens, regression: bool) -> dict[str, Any]:
    """One example in GPT's layout: ``<s> a <e>``, ``<s> a $ b <e>`` or both orders of the pair."""
    if b is None:
        tokens: Any = T.classification(a, special, max_len)
    elif both_orders:
        tokens = list(T.similarity(a, b, special, max_len))
    else:
        tokens = T.entailment(a, b, special, max_len)
    item = {"tokens": tokens}
    if label is not None:
        item["labels"] = float(label) if regression else int(label)
    return item


class GPTClassificationDataModule(GPTLoaders, ClassificationDataModule):
    """``ClassificationDataModule`` (same ``task`` names, tiers, splits and ``n_folds`` / ``fold``
    cross-validation) with GPT's transforms."""

    layouts = GPT_LAYOUTS

    def __init__(self, task: str, source: str = "path", path: str | None = None, cache_dir: str | None = None,
                 tokenizer: str | None = None, vocab_size: int = 40478, lower: bool = True, layout: str = "gpt",
                 max_seq_len: int = 512, batch_size: int = 32, eval_batch_size: int = 64, num_workers: int = 0,
                 max_train_examples: int | None = None, n_folds: int | None = None, fold: int = 0,
                 seed: int = 0, num_proc: int | None = None) -> None:
        super().__init__(task, source, path, cache_dir, tokenizer, vocab_size, lower, layout, max_seq_len,
                         batch_size, eval_batch_size, num_workers, max_train_examples, n_folds, fold, num_proc)
        self.seed = seed

    def _load_tokenizer(self, train_texts: Callable[[], Iterable[str | None]]) -> GPTTokenizer:
        return gpt_tokenizer(self.tokenizer_file, train_texts, self.cache_dir, self.vocab_size)

    def _encode(self, name: str, rows: EncodedRows, labelled: bool) -> EncodedSplit:
        if self.layout == "gpt_both_orders" and len(rows) and (rows.values[:, 1] < 0).any():
            raise DataError(f"data.layout=gpt_both_orders needs sentence pairs; data.task={self.task} has "
                            "single texts: use data.layout=gpt.")
        make_item = partial(gpt_item, both_orders=self.layout == "gpt_both_orders", max_len=self.max_seq_len,
                            special=T.SpecialTokens.after_vocab(self.tokenizer.vocab_size),
                            regression=self.is_regression)
        return EncodedSplit(name, rows, make_item, labelled, self.is_regression)  # its guids key GLUE submissions

    def train_dataloader(self) -> DataLoader:
        return self.train_loader(self.splits["train"], self.batch_size)

    def _loader(self, split: EncodedSplit, shuffle: bool, batch_size: int) -> DataLoader:
        return self.eval_loader(split, batch_size)


# ------------------------------------------------------------------------------------------------ RACE
def race_item(texts: list[list[int]], special: T.SpecialTokens, max_len: int) -> dict[str, Any]:
    """One question's choices from a cached row's texts (article, question, the 4 options)."""
    return {"tokens": T.multiple_choice(texts[0], texts[1], texts[2:], special, max_len)}


class GPTRaceDataModule(GPTLoaders, RaceDataModule):
    """RACE with one ``<s> article question $ option <e>`` per option (the article cut from its end to fit)."""

    encoding, n_texts = "article once, question, options", 6

    def __init__(self, source: str = "path", path: str | None = None, cache_dir: str | None = None,
                 tokenizer: str | None = None, vocab_size: int = 40478, max_seq_len: int = 512, batch_size: int = 32,
                 eval_batch_size: int = 32, num_workers: int = 0, seed: int = 0, num_proc: int | None = None) -> None:
        super().__init__(source, path, cache_dir, tokenizer, vocab_size, True, "gpt", max_seq_len,
                         max_seq_len, batch_size, eval_batch_size, num_workers, num_proc)
        self.seed = seed

    def _make_tokenizer(self, train: Callable[[], Iterable[RaceQuestion]]) -> GPTTokenizer:
        texts = lambda: chain(first_occurrences(q.article for q in train()), (q.question for q in train()),
                              (o for q in train() for o in q.options))
        return gpt_tokenizer(self.tokenizer_file, texts, self.cache_dir, self.vocab_size)

    def _texts(self, q: RaceQuestion) -> list[str]:
        return [q.article, q.question, *q.options]

    def _item_maker(self) -> Callable[[list[list[int]]], dict[str, Any]]:
        return partial(race_item, special=T.SpecialTokens.after_vocab(self.tokenizer.vocab_size),
                       max_len=self.max_seq_len)

    def train_dataloader(self) -> DataLoader:
        return self.train_loader(self.data["train"], self.batch_size)

    def _loader(self, name: str, shuffle: bool, bs: int) -> DataLoader:
        return self.eval_loader(self.data[name], bs)


# ------------------------------------------------------------------------------------------------ Story Cloze
def story_item(texts: list[list[int]], special: T.SpecialTokens, max_part: int) -> dict[str, Any]:
    """One story's two choices from a cached row's texts (the story, its two endings)."""
    return {"tokens": T.story_cloze(texts[0], texts[1:], special, max_part)}


class GPTStoryClozeDataModule(GPTLoaders, ResumableTrainOrder, pl.LightningDataModule):
    """Story Cloze (``source``: ``path`` = the folder of the two official CSVs, or ``mini``); validation = the dev
    part of the release split, test = the test file."""

    def __init__(self, source: str = "path", path: str | None = None, cache_dir: str | None = None,
                 tokenizer: str | None = None, vocab_size: int = 40478, max_seq_len: int = 512, n_dev: int = 374,
                 split_seed: int = sc.RELEASE_SEED, batch_size: int = 32, eval_batch_size: int = 64,
                 num_workers: int = 0, seed: int = 0, num_proc: int | None = None) -> None:
        super().__init__()
        self.source, self.path, self.cache_dir, self.tokenizer_file = source, path, cache_dir, tokenizer
        self.num_proc = num_proc
        self.vocab_size, self.max_seq_len, self.n_dev, self.split_seed = vocab_size, max_seq_len, n_dev, split_seed
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size
        self.num_workers, self.seed = num_workers, seed
        self.tokenizer: GPTTokenizer | None = None
        self.data: dict[str, EncodedChoices] = {}

    def _spec(self):
        return sc.STORY_CLOZE_MINI if self.source == "mini" else sc.STORY_CLOZE

    def prepare_data(self) -> None:
        locate(self._spec(), self.source, self.path, self.cache_dir)

    def setup(self, stage: str | None = None) -> None:
        if self.data:
            return
        root = locate(self._spec(), self.source, self.path, self.cache_dir)
        # a BPE trained here sees the release's training stories in its order (the whole 1,871-story file is read)
        texts = lambda: [t for s in sc.release_split(sc.read_stories(root / sc.VAL_FILE), self.n_dev,
                                                     self.split_seed)[0] for t in (s.context, *s.endings)]
        tok = self.tokenizer = gpt_tokenizer(self.tokenizer_file, texts, self.cache_dir, self.vocab_size)
        make_item = partial(story_item, special=T.SpecialTokens.after_vocab(tok.vocab_size),
                            max_part=self.max_seq_len // 2 - 2)
        val, test = self._encode_file(root, sc.VAL_FILE, "val"), self._encode_file(root, sc.TEST_FILE, "test")
        train, dev = sc.release_order(len(val), self.n_dev, self.split_seed)
        self.data = {"train": EncodedChoices(val, make_item, order=train), "dev": EncodedChoices(val, make_item, order=dev),
                     "test": EncodedChoices(test, make_item)}

    def _encode_file(self, root: Path, name: str, part: str) -> EncodedRows:
        """One official CSV streamed into its cache entry: per story its context's and endings' ids."""
        key = ("story_cloze", file_stamp(root, [name]), tokenizer_identity(self.tokenizer))
        texts = lambda s: (s.context, *s.endings)
        encode = texts_encoder(self.tokenizer.encode, texts, lambda s: (s.label,), lambda s: s.story_id)
        return encode_rows(share_first_text(sc.iter_stories(root / name), texts), encode, key, self.cache_dir,
                           f"story_cloze {part}", n_values=5, num_proc=self.num_proc)

    def model_overrides(self) -> dict[str, Any]:
        return {"vocab_size": self.tokenizer.vocab_size}

    def identity(self) -> dict[str, Any]:
        return {"dataset": "story_cloze", "tokenizer": self.tokenizer.identity, "vocab_size": self.tokenizer.vocab_size}

    def train_dataloader(self) -> DataLoader:
        return self.train_loader(self.data["train"], self.batch_size)

    def val_dataloader(self) -> DataLoader:
        return self.eval_loader(self.data["dev"], self.eval_batch_size)

    def test_dataloader(self) -> DataLoader:
        return self.eval_loader(self.data["test"], self.eval_batch_size)
