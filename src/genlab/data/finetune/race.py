"""RACE reader, 4-way multiple-choice features and DataModule (XLNet paper §3.2).

Layout on disk: ``<root>/{train,dev,test}/{middle,high}/*.txt``, each a JSON object with ``article``,
``questions`` [n], ``options`` [n][4], ``answers`` [n] (letters A-D) and ``id``.

Each question gives 4 sequences ``[article] <sep> [qa_i] <sep> <cls>`` (XLNet, left padding; ``bert`` layout:
``<cls> article <sep> qa_i <sep>``, with a WordPiece checkpoint's own ``[CLS]``/``[SEP]``/``[PAD]`` ids; ``funnel``:
``<cls> qa_i <sep> article <sep>`` with segment 2 on ``<cls>``, as Funnel's original race.py), where
``qa_i`` is the question with ``_`` replaced by option i when it has a blank, else ``question + " " + option``;
``qa_i`` keeps its **last** ``max_qa_length`` pieces and the article is cut from the end to fit. Each option gets
a fresh copy of the article pieces (the released code's cross-option contamination, issue #204, is not
reproduced).

Batches: ``input_ids``/``token_type_ids``/``attention_mask`` [B, 4, T], ``labels`` [B], ``level`` [B] (0 middle,
1 high) and ``qid`` (list of B question ids ``<file id>-<question index>``, unique within a split; the key of the
task's predictions file).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset

from genlab.data.finetune.datamodule import encode_pair
from genlab.data.finetune.downloads import race_spec
from genlab.data.finetune.race_mini import RACE_MINI
from genlab.data.finetune.tokenizer_cache import piece_model
from genlab.data.loading.resumable import ResumableTrainOrder
from genlab.data.sources.tiers import DatasetSpec, locate
from genlab.data.text.chunks import Piece, decode_piece, total_bytes
from genlab.data.text.encoded_texts import EncodedTexts, tokenize_texts
from genlab.data.text.progress import Progress, text_bytes, tracked
from genlab.data.tokenizers.from_checkpoint import load_tokenizer, special_ids
from genlab.data.tokenizers.xlnet_pieces import PieceTokenizer
from genlab.errors import DataError

LEVELS = ("middle", "high")
LETTERS = "ABCD"


@dataclass(frozen=True)
class RaceQuestion:
    qid: str
    article: str
    question: str
    options: tuple[str, str, str, str]
    label: int
    level: int


def read_race(root: Path, split: str) -> list[RaceQuestion]:
    out = []
    files = []
    for level, name in enumerate(LEVELS):
        folder = Path(root) / split / name
        if not folder.is_dir():
            raise DataError(f"RACE folder {folder} does not exist; data.path must hold {{train,dev,test}}/{{middle,high}}/.")
        files += [(level, path) for path in sorted(folder.glob("*.txt"))]
    progress = Progress(f"reading RACE {split} ({len(files)} files)", total_bytes([p for _, p in files]))
    for level, path in files:
        raw = path.read_bytes()
        progress.advance(len(raw))
        text = decode_piece(Piece(str(path), 0, raw, True))  # a binary or non-UTF-8 file: named with its offset
        try:
            obj = json.loads(text)
            article, questions, options, answers = obj["article"], obj["questions"], obj["options"], obj["answers"]
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise DataError(f"{path}: not a RACE JSON file (article, questions, options, answers): {err}"
                            f"{' (the file is empty)' if not raw else ''}; replace it with the file from RACE.tar.gz "
                            "or remove it.") from err
        if not len(questions) == len(options) == len(answers):
            raise DataError(f"{path}: {len(questions)} questions, {len(options)} option lists and "
                            f"{len(answers)} answers; they must match.")
        for k, (q, opts, ans) in enumerate(zip(questions, options, answers)):
            if not isinstance(opts, list) or len(opts) != 4:
                n = len(opts) if isinstance(opts, list) else opts
                raise DataError(f"{path}, question {k}: {n} options, RACE needs exactly 4 (A-D).")
            for j, o in enumerate(opts):
                if not isinstance(o, str):
                    raise DataError(f"{path}, question {k}: option {LETTERS[j]} is {o!r}, not text; fix the file.")
            if not isinstance(q, str):
                raise DataError(f"{path}, question {k}: the question is {q!r}, not text; fix the file.")
            if ans not in LETTERS:
                raise DataError(f"{path}, question {k}: answer {ans!r} is not one of A, B, C, D.")
            out.append(RaceQuestion(f"{obj.get('id', path.stem)}-{k}", article, q, tuple(opts),
                                    LETTERS.index(ans), level))
    progress.finish()
    if not out:
        raise DataError(f"RACE split {Path(root) / split} holds no questions.")
    return out


def question_bytes(q: RaceQuestion) -> int:
    return text_bytes(q.article, q.question, *q.options)


def qa_text(question: str, option: str) -> str:
    return question.replace("_", option) if "_" in question else f"{question} {option}"


def encode_question(q: RaceQuestion, tok, max_seq_len: int, max_qa_length: int, layout: str,
                    ids: Callable[[str], list[int]] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The 4 rows of one question; ``ids`` (default ``tok.encode``) looks the pieces of a text up."""
    ids = ids or tok.encode
    specials = special_ids(tok)  # a WordPiece vocabulary's [CLS]/[SEP]/[PAD]; none for SentencePiece
    if specials and layout == "xlnet":
        raise DataError(f"data.layout={layout!r} with a WordPiece (BERT) tokenizer: a BERT checkpoint reads "
                        "[CLS] article [SEP] question+option [SEP]; set data.layout=bert (funnel for a Funnel).")
    article = ids(q.article)
    rows = []
    for opt in q.options:
        qa = ids(qa_text(q.question, opt))[-max_qa_length:]
        art = list(article[: max(0, max_seq_len - 3 - len(qa))])  # fresh copy per option
        # Funnel (original race.py): [CLS] question+option [SEP] article [SEP]; BERT/XLNet put the article first
        rows.append(encode_pair(qa, art, max_seq_len, layout, **specials) if layout == "funnel"
                    else encode_pair(art, qa, max_seq_len, layout, **specials))
    return tuple(np.stack([r[k] for r in rows]) for k in range(3))


def check_unique_ids(questions: list[RaceQuestion], split: str) -> None:
    """Predictions are keyed by question id, so two questions sharing one would overwrite each other."""
    seen: set[str] = set()
    for q in questions:
        if q.qid in seen:
            raise DataError(f"RACE split {split}: question id {q.qid!r} occurs twice (two files with the same 'id'); "
                            "give every file its own id.")
        seen.add(q.qid)


class _RaceDataset(Dataset):
    def __init__(self, ids, seg, mask, labels, levels, qids):
        self.ids, self.seg, self.mask, self.labels, self.levels, self.qids = ids, seg, mask, labels, levels, qids

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"input_ids": torch.from_numpy(self.ids[i]), "token_type_ids": torch.from_numpy(self.seg[i]),
                "attention_mask": torch.from_numpy(self.mask[i]), "labels": int(self.labels[i]),
                "level": int(self.levels[i]), "qid": self.qids[i]}


class RaceDataModule(ResumableTrainOrder, pl.LightningDataModule):
    """RACE from ``data.path``, the download tier (RACE.tar.gz, sha256 checked) or the generated cloze mini;
    validation = dev, test = test (both middle + high)."""

    test_split = "test"  # the split test_dataloader serves; names the task's predictions file

    def __init__(self, source: str = "path", path: str | None = None, cache_dir: str | None = None,
                 tokenizer: str | None = None, vocab_size: int = 32000, lower: bool = False, layout: str = "xlnet",
                 max_seq_len: int = 512, max_qa_length: int = 128, batch_size: int = 32, eval_batch_size: int = 32,
                 num_workers: int = 0, num_proc: int | None = None) -> None:
        super().__init__()
        self.source, self.path, self.cache_dir = source, path, cache_dir
        self.tokenizer_file, self.vocab_size, self.lower, self.layout = tokenizer, vocab_size, lower, layout
        self.max_seq_len, self.max_qa_length = max_seq_len, max_qa_length
        self.batch_size, self.eval_batch_size, self.num_workers = batch_size, eval_batch_size, num_workers
        self.num_proc = num_proc  # tokenising processes (null: the cores available, at most 8)
        self.tokenizer = None
        self.encoded: EncodedTexts | None = None
        self.data: dict[str, _RaceDataset] = {}

    def _spec(self) -> DatasetSpec:
        if self.source == "mini":
            return RACE_MINI

        return race_spec(download=self.source == "download")

    def model_overrides(self) -> dict[str, Any]:
        return {"vocab_size": self.tokenizer.vocab_size}

    def identity(self) -> dict[str, Any]:
        return {"dataset": "race", "tokenizer": self.tokenizer.identity, "vocab_size": self.tokenizer.vocab_size}

    def prepare_data(self) -> None:
        locate(self._spec(), self.source, self.path, self.cache_dir)

    def setup(self, stage: str | None = None) -> None:
        if self.data:
            return
        root = locate(self._spec(), self.source, self.path, self.cache_dir)
        splits = {s: read_race(root, s) for s in ("train", "dev", "test")}
        self.tokenizer = self._make_tokenizer(root, splits["train"])
        self.encoded = tokenize_texts((t for qs in splits.values() for q in qs for t in self._texts(q)),
                                      self.tokenizer, self.cache_dir, "race texts", self.num_proc)
        for name, qs in splits.items():
            check_unique_ids(qs, name)
            self.data[name] = self._dataset(qs)

    def _make_tokenizer(self, root: Path, train: list[RaceQuestion]):
        if self.tokenizer_file is not None:
            # the checkpoint's: SentencePiece .model, BERT vocab.txt / tokenizer.json, or its folder
            return load_tokenizer(self.tokenizer_file, self.lower)
        lines = [*dict.fromkeys(q.article for q in train), *(qa_text(q.question, o) for q in train for o in q.options)]
        return PieceTokenizer(piece_model(lines, self.cache_dir, self.vocab_size), self.lower)

    def _texts(self, q: RaceQuestion) -> list[str]:
        """The texts :meth:`_dataset` looks up for one question (tokenised once, cached)."""
        return [q.article, *(qa_text(q.question, o) for o in q.options)]

    def _dataset(self, qs: list[RaceQuestion]) -> Dataset:
        enc = [encode_question(q, self.tokenizer, self.max_seq_len, self.max_qa_length, self.layout, self.encoded.ids)
               for q in tracked(qs, "laying out RACE questions", question_bytes)]
        return _RaceDataset(np.stack([e[0] for e in enc]), np.stack([e[1] for e in enc]),
                            np.stack([e[2] for e in enc]), np.array([q.label for q in qs]),
                            np.array([q.level for q in qs]), [q.qid for q in qs])

    def _loader(self, name: str, shuffle: bool, bs: int) -> DataLoader:
        return DataLoader(self.data[name], batch_size=bs, shuffle=shuffle, num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0)

    def train_dataloader(self) -> DataLoader:
        return self.resumable_loader(self.data["train"], self.batch_size, num_workers=self.num_workers,
                                     persistent_workers=self.num_workers > 0)

    def val_dataloader(self) -> DataLoader:
        return self._loader("dev", False, self.eval_batch_size)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_split, False, self.eval_batch_size)
