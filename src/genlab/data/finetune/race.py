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
1 high), ``index`` [B] (position in the split) and ``qid`` (list of B question ids ``<file id>-<question index>``,
unique within a split; the key of the task's predictions file).

Preparation is bounded: a split is read one article file at a time, tokenised over ``data.num_proc`` processes into
a manifest-checked cache entry (``genlab.data.finetune.encoded_choices``: each article's ids stored once, with the
first of its questions) and read back one question at a time, so memory does not grow with the number of
questions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from genlab.data.finetune.datamodule import encode_pair
from genlab.data.finetune.downloads import race_spec
from genlab.data.finetune.encoded_choices import EncodedChoices, share_first_text, texts_encoder
from genlab.data.finetune.race_mini import RACE_MINI
from genlab.data.finetune.tokenizer_cache import piece_model
from genlab.data.loading.resumable import ResumableTrainOrder
from genlab.data.sources.tiers import DatasetSpec, locate
from genlab.data.text.cache_entry import file_stamp
from genlab.data.text.chunks import Piece, decode_piece, total_bytes
from genlab.data.text.distinct import first_occurrences
from genlab.data.text.encoded_texts import EncodedRows, encode_rows, tokenizer_identity
from genlab.data.text.progress import Progress
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


def split_files(root: Path, split: str) -> list[tuple[int, Path]]:
    """(level, file) of every article of ``split``, middle then high, each level's files in name order."""
    files = []
    for level, name in enumerate(LEVELS):
        folder = Path(root) / split / name
        if not folder.is_dir():
            raise DataError(f"RACE folder {folder} does not exist; data.path must hold {{train,dev,test}}/{{middle,high}}/.")
        files += [(level, path) for path in sorted(folder.glob("*.txt"))]
    return files


def iter_race(root: Path, split: str) -> Iterator[RaceQuestion]:
    """The questions of ``split``, read one article file at a time (a file's questions share its article)."""
    files = split_files(root, split)
    progress = Progress(f"reading RACE {split} ({len(files)} files)", total_bytes([p for _, p in files]))
    n = 0
    for level, path in files:
        raw = path.read_bytes()
        progress.advance(len(raw))
        for q in _questions(path, raw, level):
            n += 1
            yield q
    progress.finish()
    if not n:
        raise DataError(f"RACE split {Path(root) / split} holds no questions.")


def read_race(root: Path, split: str) -> list[RaceQuestion]:
    return list(iter_race(root, split))


def _questions(path: Path, raw: bytes, level: int) -> list[RaceQuestion]:
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
    out = []
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
        out.append(RaceQuestion(f"{obj.get('id', path.stem)}-{k}", article, q, tuple(opts), LETTERS.index(ans), level))
    return out


def qa_text(question: str, option: str) -> str:
    return question.replace("_", option) if "_" in question else f"{question} {option}"


def layout_specials(tok, layout: str) -> dict[str, int]:
    """The special ids ``layout`` uses with ``tok``: a WordPiece vocabulary's [CLS]/[SEP]/[PAD]; none (XLNet's fixed
    ids) for SentencePiece."""
    specials = special_ids(tok)
    if specials and layout == "xlnet":
        raise DataError(f"data.layout={layout!r} with a WordPiece (BERT) tokenizer: a BERT checkpoint reads "
                        "[CLS] article [SEP] question+option [SEP]; set data.layout=bert (funnel for a Funnel).")
    return specials


def layout_question(article: list[int], qas: Sequence[list[int]], max_seq_len: int, max_qa_length: int, layout: str,
                    specials: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The 4 rows of one question from the ids of its article and of its 4 question+option texts."""
    rows = []
    for qa in qas:
        qa = list(qa[-max_qa_length:])
        art = list(article[: max(0, max_seq_len - 3 - len(qa))])  # fresh copy per option
        # Funnel (original race.py): [CLS] question+option [SEP] article [SEP]; BERT/XLNet put the article first
        rows.append(encode_pair(qa, art, max_seq_len, layout, **specials) if layout == "funnel"
                    else encode_pair(art, qa, max_seq_len, layout, **specials))
    return tuple(np.stack([r[k] for r in rows]) for k in range(3))


def encode_question(q: RaceQuestion, tok, max_seq_len: int, max_qa_length: int,
                    layout: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The 4 rows of one question, tokenised by ``tok``."""
    specials = layout_specials(tok, layout)
    return layout_question(tok.encode(q.article), [tok.encode(qa_text(q.question, o)) for o in q.options],
                           max_seq_len, max_qa_length, layout, specials)


def question_item(texts: list[list[int]], max_seq_len: int, max_qa_length: int, layout: str,
                  specials: dict[str, int]) -> dict[str, torch.Tensor]:
    """A batch item's tensors from a cached row's texts (article, then the 4 question+option texts)."""
    arrays = layout_question(texts[0], texts[1:], max_seq_len, max_qa_length, layout, specials)
    return dict(zip(("input_ids", "token_type_ids", "attention_mask"), map(torch.from_numpy, arrays)))


def unique_ids(questions: Iterable[RaceQuestion], split: str) -> Iterator[RaceQuestion]:
    """``questions``, checked as they pass: predictions are keyed by question id, so two questions sharing one
    would overwrite each other."""
    seen: set[str] = set()
    for q in questions:
        if q.qid in seen:
            raise DataError(f"RACE split {split}: question id {q.qid!r} occurs twice (two files with the same 'id'); "
                            "give every file its own id.")
        seen.add(q.qid)
        yield q


class RaceDataModule(ResumableTrainOrder, pl.LightningDataModule):
    """RACE from ``data.path``, the download tier (RACE.tar.gz, sha256 checked) or the generated cloze mini;
    validation = dev, test = test (both middle + high). Each split is read one article file at a time, tokenised
    over ``num_proc`` processes into its cache entry (keyed on its files' names, sizes and times and the tokenizer;
    never the layout or the lengths) and read back one question at a time (``EncodedChoices``)."""

    test_split = "test"  # the split test_dataloader serves; names the task's predictions file
    # what a cached row holds (the article only in its first question's row; GPT's: question, options apart)
    encoding, n_texts = "article once, question+option", 5

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
        self.data: dict[str, EncodedChoices] = {}

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
        self.tokenizer = self._make_tokenizer(lambda: iter_race(root, "train"))
        make_item = self._item_maker()
        self.data = {name: EncodedChoices(self._encode_split(root, name), make_item, extras=("level",))
                     for name in ("train", "dev", "test")}

    def _make_tokenizer(self, train: Callable[[], Iterable[RaceQuestion]]):
        if self.tokenizer_file is not None:
            # the checkpoint's: SentencePiece .model, BERT vocab.txt / tokenizer.json, or its folder
            return load_tokenizer(self.tokenizer_file, self.lower)
        lines = lambda: chain(first_occurrences(q.article for q in train()),  # a function: read twice (cache key, training)
                              (qa_text(q.question, o) for q in train() for o in q.options))
        return PieceTokenizer(piece_model(lines, self.cache_dir, self.vocab_size), self.lower)

    def _texts(self, q: RaceQuestion) -> list[str]:
        """What a cached row holds for one question, the article first."""
        return [q.article, *(qa_text(q.question, o) for o in q.options)]

    def _item_maker(self) -> Callable[[list[list[int]]], dict[str, Any]]:
        return partial(question_item, max_seq_len=self.max_seq_len, max_qa_length=self.max_qa_length,
                       layout=self.layout, specials=layout_specials(self.tokenizer, self.layout))

    def _encode_split(self, root: Path, name: str) -> EncodedRows:
        files = [str(p.relative_to(root)) for _, p in split_files(root, name)]
        key = ("race", name, file_stamp(root, files), self.encoding, tokenizer_identity(self.tokenizer))
        encode = texts_encoder(self.tokenizer.encode, self._texts, lambda q: (q.label, q.level), lambda q: q.qid)
        questions = share_first_text(unique_ids(iter_race(root, name), name), self._texts)
        return encode_rows(questions, encode, key, self.cache_dir, f"race {name}", n_values=3 + self.n_texts,
                           num_proc=self.num_proc)

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
