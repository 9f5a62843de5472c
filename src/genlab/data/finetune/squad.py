"""SQuAD 1.1 / 2.0: official JSON reader, doc-stride windows, XLNet input features, n-best post-processing
(XLNet paper §3.3; the official ``run_squad.py``).

Features (one per window), layout ``[P pieces] <sep> [Q pieces] <sep> <cls> [pad]`` — paragraph first, **right**
padding; segments P=0, Q=1, ``<cls>``=2, pad=3 (``bert`` layout: P=0, Q=1, ``<cls>``=1, pad=0, since BERT has two
token types); ``p_mask`` 1 for question, both ``<sep>`` and padding; ``cls_index`` = position of ``<cls>``.
Training labels: the answer's piece span when it lies fully inside the window, else start = end = ``cls_index``
and ``is_impossible`` = 1.

With a WordPiece tokenizer (a BERT checkpoint's ``vocab.txt``, ``data.layout=bert``) the features use BERT's own
layout and special ids: ``[CLS] [Q pieces] [SEP] [P pieces] [SEP] [PAD]``, segments Q=0, P=1, ``cls_index`` = 0,
``p_mask`` 0 only on ``[CLS]`` and the paragraph; every paragraph piece of a window may start or end an answer.
The ``funnel`` layout is that question-first layout with segment 2 on ``[CLS]``, with either tokenizer (the
Funnel-Transformer code's layout).

Character alignment (genlab.data.finetune.squad_align): the whole paragraph is encoded once. SentencePiece pieces are
aligned to the raw characters by the official longest-common-subsequence match, so normalisation differences
(repeated spaces, ``````/``''``, accents, NFKC forms, unknown pieces) still give every piece its exact raw span;
WordPiece pieces take their spans from the ``tokenizers`` offset mapping, which is exact by construction.

Preparation is bounded: a split's questions are streamed from the JSON an article at a time, encoded (question
pieces; paragraph pieces with their spans, once per paragraph; the first answer's piece span) over ``data.num_proc``
processes into the manifest-checked encoded-text cache (genlab.data.text.encoded_texts), and read back through memory
maps. Windows are numbered from the cached lengths (a few integers each) and laid out when a batch asks for one, so
``max_seq_len``, ``doc_stride`` and the layout never re-encode, and memory does not grow with the file. Scoring reads
the dev file again, an article at a time (``SquadPasses``), for the answer texts and the official scorer.

An answer whose text does not equal ``context[answer_start : answer_start + len(text)]`` (or that has no usable
offset, or an answerable question with no answer) is a warning: it is counted (``SquadDataModule.bad_answers``)
and the training question skipped, as the official preprocessing does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset

from genlab.data.finetune.downloads import squad_spec
from genlab.data.finetune.minis import SQUAD1_MINI, SQUAD2_MINI
from genlab.data.finetune.squad_align import (
    UNK_CHAR,
    Paragraph,
    align_pieces,
    char_to_piece_span,
    offsets_paragraph,
)
from genlab.data.finetune.tokenizer_cache import piece_model
from genlab.data.loading.resumable import ResumableTrainOrder
from genlab.data.sources.tiers import DatasetSpec, locate
from genlab.data.text.cache_entry import file_stamp
from genlab.data.text.distinct import first_occurrences
from genlab.data.text.encoded_texts import EncodedRows, RowEncoder, encode_rows, tokenizer_identity
from genlab.data.text.json_stream import iter_json_array
from genlab.data.text.progress import Progress
from genlab.data.tokenizers.from_checkpoint import load_tokenizer, special_ids
from genlab.data.tokenizers.wordpiece import WordPieceTokenizer
from genlab.data.tokenizers.xlnet_pieces import PieceTokenizer
from genlab.errors import DataError

log = logging.getLogger(__name__)
UNK_ID, CLS_ID, SEP_ID, PAD_ID = 0, 3, 4, 5  # SQuAD pads with <pad> (official run_squad)


@dataclass
class SquadExample:
    qid: str
    question: str
    context: str
    answers: list[dict]  # [{"text", "answer_start"}]; empty for unanswerable
    is_impossible: bool


def squad_articles(path: Path, buffer_bytes: int | None = None) -> Iterator[tuple[dict, list[SquadExample]]]:
    """(article, its flat examples) for each article of a SQuAD JSON file, streamed: memory holds one article,
    not the file (``genlab.data.text.json_stream``)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"SQuAD file {path} does not exist; data.path must hold train-v{{1.1,2.0}}.json and dev-*.json.")
    progress, done = Progress(f"reading {path.name}", path.stat().st_size), 0
    for a, (offset, article) in enumerate(iter_json_array(path, "data", buffer_bytes)):
        progress.advance(offset - done)
        done, out = offset, []
        try:
            for para in article["paragraphs"]:
                for qa in para["qas"]:
                    impossible = bool(qa.get("is_impossible", False))
                    out.append(SquadExample(qa["id"], qa["question"], para["context"],
                                            [] if impossible else list(qa.get("answers", [])), impossible))
        except (KeyError, TypeError, AttributeError) as err:
            title = article.get("title", "?") if isinstance(article, dict) else "?"
            raise DataError(f"{path}: article {a} ({title}, byte offset {offset}) lacks {err} -- every paragraph "
                            "needs 'context' and 'qas', every question 'id' and 'question'. Fix the file or use the "
                            "official one.") from err
        yield article, out
    progress.finish()


def read_squad(path: Path, keep_data: bool = True, buffer_bytes: int | None = None
               ) -> tuple[list[dict], list[SquadExample]]:
    """(the JSON's ``data`` list for evaluation, or [] without ``keep_data``; flat examples). Read article by
    article, so a training file costs its examples, not its parse tree."""
    data: list[dict] = []
    out: list[SquadExample] = []
    for article, examples in squad_articles(path, buffer_bytes):
        if keep_data:
            data.append(article)
        out.extend(examples)
    return data, out


def squad_questions(path: Path) -> Iterator[SquadExample]:
    """The questions of a SQuAD file in file order, streamed an article at a time."""
    for _, examples in squad_articles(path):
        yield from examples


@dataclass(frozen=True)
class SquadPasses:
    """A SQuAD file read again, an article at a time, on every pass: its questions (``questions=True``; ``len``: how
    many) or its articles (the official scorer's ``dataset``). A dev set is scored at every validation; this way
    neither its examples nor its parse tree stay in memory between passes."""

    path: Path
    n_questions: int
    questions: bool

    def __iter__(self) -> Iterator:
        return squad_questions(self.path) if self.questions else (a for a, _ in squad_articles(self.path))

    def __len__(self) -> int:
        return self.n_questions


def training_text(path: Path) -> Iterator[str]:
    """What a tokenizer trained on a SQuAD training file reads: every distinct paragraph, then every question (two
    streamed passes; memory holds a 16-byte digest per paragraph)."""
    yield from first_occurrences(ex.context for ex in squad_questions(path))
    yield from (ex.question for ex in squad_questions(path))


# ------------------------------------------------------------------------------------------------ alignment
def tokenize_paragraph(context: str, tok) -> Paragraph:
    """Pieces of the whole paragraph with their raw character spans (WordPiece: the library's offsets;
    SentencePiece: LCS alignment)."""
    if isinstance(tok, WordPieceTokenizer):
        return offsets_paragraph(context, tok)
    ids = tok.encode(context)
    pieces = [UNK_CHAR if i == UNK_ID else tok.pieces[i] for i in ids]
    starts, ends = align_pieces(context, pieces, lower=getattr(tok, "lower", False))
    return Paragraph(ids, starts, ends)


# ------------------------------------------------------------------------------------------------ windows
def doc_windows(n_tokens: int, max_tokens: int, stride: int) -> list[tuple[int, int]]:
    """(start, length) of each window over the paragraph pieces."""
    spans, start = [], 0
    while start < n_tokens:
        length = min(n_tokens - start, max_tokens)
        spans.append((start, length))
        if start + length == n_tokens:
            break
        start += min(length, stride)
    return spans or [(0, 0)]


def max_context(spans: list[tuple[int, int]], w: int, pos: int) -> bool:
    """Whether window ``w`` gives piece ``pos`` the most context: max of min(left, right) + 0.01 · length."""
    return bool(best_windows(spans, pos + 1)[pos] == w)


def best_windows(spans: list[tuple[int, int]], n_tokens: int) -> np.ndarray:
    """For every paragraph piece, the window with the most context (ties keep the first window), vectorised."""
    starts = np.array([s for s, _ in spans])[:, None]
    lengths = np.array([n for _, n in spans])[:, None]
    pos = np.arange(n_tokens)[None, :]
    inside = (pos >= starts) & (pos < starts + lengths)
    score = np.minimum(pos - starts, starts + lengths - 1 - pos) + 0.01 * lengths
    return np.argmax(np.where(inside, score, -np.inf), axis=0)


def _answer_problem(ex: SquadExample) -> str | None:
    """Why the first gold answer of a training question cannot be used (None when it can)."""
    if not ex.answers:
        return "no answers and not marked is_impossible"
    a = ex.answers[0]
    try:
        start, text = int(a["answer_start"]), str(a["text"])
    except (KeyError, TypeError, ValueError):
        return f"answer {a!r} lacks an integer answer_start or a text"
    if ex.context[start:start + len(text)] != text:
        return f"answer {text!r} does not match context at offset {start}"
    return None


# ------------------------------------------------------------------------------------------------ encoded questions
# Per question, one row of the encoded-text cache (genlab.data.text.encoded_texts): its fields hold the paragraph's
# pieces with their character spans (only on the first row of each paragraph, which the others point to), then the
# question's pieces (spans -1); its values are QUESTION_VALUES. What a layout does with them (truncate the question,
# cut windows, pad) is cheap and happens per run, per window, when a batch asks.
QUESTION_FIELDS = ("ids", "starts", "ends")
QUESTION_VALUES = ("paragraph pieces here", "paragraph row", "question pieces", "impossible", "answer first piece",
                   "answer last piece", "unusable answer")


def question_rows(examples: Iterable[SquadExample]) -> Iterator[tuple[SquadExample, int, int]]:
    """(example, its row, the row holding its paragraph: the first of the consecutive questions on that context)."""
    owner, context = -1, None
    for row, ex in enumerate(examples):
        if ex.context != context:
            owner, context = row, ex.context
        yield ex, row, owner


def question_encoder(tok, training: bool) -> RowEncoder:
    """(example, row, paragraph row) -> a cache row. Training rows carry the first gold answer's piece span (-1 when no
    piece covers it), or flag an unusable answer with a warning, as the official preprocessing skips it."""
    last: dict[str, Paragraph] = {}  # the paragraph last aligned in this process: its questions come together

    def paragraph(context: str) -> Paragraph:
        if context not in last:
            last.clear()
            last[context] = tokenize_paragraph(context, tok)
        return last[context]

    def encode(item: tuple[SquadExample, int, int]) -> tuple:
        ex, row, owner = item
        q = list(tok.encode(ex.question))
        first, final, unusable = -1, -1, 0
        if training and not ex.is_impossible:
            problem = _answer_problem(ex)
            if problem:
                unusable = 1
                log.warning("SQuAD question %s: %s; skipped", ex.qid, problem)
            else:
                start, text = int(ex.answers[0]["answer_start"]), ex.answers[0]["text"]
                first, final = char_to_piece_span(paragraph(ex.context), start, start + len(text)) or (-1, -1)
        no_span = [-1] * len(q)
        para = paragraph(ex.context) if row == owner else Paragraph([], np.zeros(0), np.zeros(0))
        fields = ([*para.ids, *q], [*para.char_start.tolist(), *no_span], [*para.char_end.tolist(), *no_span])
        return fields, (len(para.ids), owner, len(q), float(ex.is_impossible), first, final, unusable), None

    return encode


def encode_questions(path: Path, tok, cache_dir: str | None, what: str, training: bool,
                     num_proc: int | None = None) -> EncodedRows:
    """The questions of SQuAD file ``path`` encoded over ``num_proc`` processes into their cache entry (built once,
    streamed; keyed on the file's name, size and time and the tokenizer, never the folder or the layout)."""
    path = Path(path)
    try:
        stamp = file_stamp(path.parent, [path.name])
    except FileNotFoundError:
        stamp = None  # no entry can exist: the reader names the missing file and the fix
    key = ("squad questions", stamp, tokenizer_identity(tok), training)
    return encode_rows(question_rows(squad_questions(path)), question_encoder(tok, training), key, cache_dir, what,
                       QUESTION_FIELDS, len(QUESTION_VALUES), num_proc)


# ------------------------------------------------------------------------------------------------ features
class _Computed(Sequence):
    """A read-only sequence whose items are computed when asked for."""

    def __init__(self, n: int, get: Callable[[int], Any]):
        self.n, self.get = n, get

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.get(k) for k in range(*i.indices(self.n))]
        if not -self.n <= i < self.n:
            raise IndexError(i)
        return self.get(int(i) % self.n)


@dataclass
class _Layout:
    max_seq_len: int
    question_first: bool  # [CLS] Q [SEP] P [SEP] (BERT, Funnel) or P <sep> Q <sep> <cls> (XLNet)
    cls_id: int
    sep_id: int
    pad_id: int
    seg_q: int
    seg_cls: int
    seg_pad: int
    cls_seg: int  # question-first layouts: the segment of [CLS] (Funnel: 2)


class SquadFeatures:
    """The windows of a split. Per window only its numbers are kept (``[F]`` arrays: the example it comes from, its
    first paragraph piece and length, ``cls_index``, the labels); its ``[T]`` rows are laid out from the encoded
    questions (memory-mapped when cached) when a batch asks (:meth:`arrays`), so a split costs ~40 bytes per window
    instead of ``7 · max_seq_len``. ``windows[f]`` (offset, length, ``ctx_start``, ``usable``, ``max_context``) and
    ``paragraphs[e]`` are computed on request too; ``input_ids`` & co. lay out every window at once (inspection)."""

    def __init__(self, rows: EncodedRows, layout: _Layout, keep: np.ndarray, max_query_length: int,
                 doc_stride: int, training: bool):
        v = np.asarray(rows.values)
        self.rows, self.layout, n_ex = rows, layout, len(v)
        self.here, self.owner = v[:, 0].astype(np.int64), v[:, 1].astype(np.int64)
        self.plen = self.here[self.owner] if n_ex else np.zeros(0, dtype=np.int64)
        self.qlen = np.minimum(v[:, 2], max_query_length).astype(np.int64)
        max_tokens = layout.max_seq_len - self.qlen - 3
        if np.any(keep & (max_tokens <= 0)):
            raise DataError(f"data.max_seq_len={layout.max_seq_len} leaves no room for the paragraph after a "
                            f"{int(self.qlen[keep & (max_tokens <= 0)][0])}-piece question; raise it or lower "
                            "data.max_query_length.")
        # doc_windows for every question at once: windows advance by min(max_tokens, stride) until one ends the
        # paragraph (an empty paragraph still has one)
        step = np.minimum(np.maximum(max_tokens, 1), doc_stride)
        count = np.where(self.plen <= max_tokens, 1, 1 + -(-(self.plen - max_tokens) // step)) * keep
        self.n_windows, self.first_window = count, np.cumsum(count) - count
        ex = np.repeat(np.arange(n_ex), count)
        start = (np.arange(len(ex)) - self.first_window[ex]) * step[ex]
        length = np.minimum(self.plen[ex] - start, max_tokens[ex])
        q = self.qlen[ex]
        cls = np.zeros_like(ex) if layout.question_first else length + q + 2
        self.ctx_start = q + 2 if layout.question_first else np.zeros_like(ex)
        first, final = v[ex, 4].astype(np.int64), v[ex, 5].astype(np.int64)
        inside = (first >= 0) & (start <= first) & (final < start + length) if training else np.zeros(len(ex), bool)
        self.example_index, self.offset, self.length, self.cls_index = ex, start, length, cls
        self.start_positions = np.where(inside, first - start + self.ctx_start, cls)
        self.end_positions = np.where(inside, final - start + self.ctx_start, cls)
        self.is_impossible = (~inside).astype(np.float32)
        self.windows = _Computed(len(ex), self.window)
        self.paragraphs = _Computed(n_ex, self.paragraph)

    def __len__(self) -> int:
        return len(self.example_index)

    def paragraph(self, e: int) -> Paragraph:
        """Example ``e``'s paragraph pieces with their character spans."""
        row, n = int(self.owner[e]), int(self.plen[e])
        return Paragraph(self.rows.row(row)[:n].tolist(), self.rows.row(row, "starts")[:n].astype(np.int64),
                         self.rows.row(row, "ends")[:n].astype(np.int64))

    def window(self, f: int) -> dict[str, Any]:
        """Window ``f``: its first paragraph piece, length, where the paragraph starts in the sequence, how many of
        its pieces may be an answer, and which of them get the most context here (:func:`best_windows`)."""
        e = int(self.example_index[f])
        w0 = int(self.first_window[e])
        spans = list(zip(self.offset[w0:w0 + self.n_windows[e]].tolist(),
                         self.length[w0:w0 + self.n_windows[e]].tolist()))
        s, n = spans[f - w0]
        best = best_windows(spans, int(self.plen[e]))
        # XLNet's post-processing never uses the window's last paragraph piece; BERT's may
        return {"offset": s, "length": n, "ctx_start": int(self.ctx_start[f]),
                "usable": n if self.layout.question_first else n - 1, "max_context": best[s:s + n] == f - w0}

    def arrays(self, f: int) -> dict[str, np.ndarray]:
        """Window ``f`` laid out: ``input_ids`` int32, ``token_type_ids``, ``attention_mask``, ``p_mask`` int8."""
        L, e, s, n = self.layout, int(self.example_index[f]), int(self.offset[f]), int(self.length[f])
        para = self.rows.row(int(self.owner[e]))[s:s + n]
        q = self.rows.row(e)[self.here[e]:self.here[e] + self.qlen[e]]
        k = len(q)
        if L.question_first:  # [CLS] Q [SEP] P [SEP]: BERT's run_squad, every paragraph piece usable
            parts = ([L.cls_id], q, [L.sep_id], para, [L.sep_id])
            seg = np.repeat([L.cls_seg, 0, 1], [1, k + 1, n + 1])
            p = np.repeat([0, 1, 0, 1], [1, k + 1, n, 1])
        else:  # P <sep> Q <sep> <cls>: XLNet's
            parts = (para, [L.sep_id], q, [L.sep_id], [L.cls_id])
            seg = np.repeat([0, L.seg_q, L.seg_cls], [n + 1, k + 1, 1])
            p = np.repeat([0, 1, 0], [n, k + 2, 1])
        m = n + k + 3
        out = {"input_ids": np.full(L.max_seq_len, L.pad_id, dtype=np.int32),
               "token_type_ids": np.full(L.max_seq_len, L.seg_pad, dtype=np.int8),
               "attention_mask": np.zeros(L.max_seq_len, dtype=np.int8), "p_mask": np.ones(L.max_seq_len, np.int8)}
        out["input_ids"][:m] = np.concatenate(parts)
        out["token_type_ids"][:m], out["attention_mask"][:m], out["p_mask"][:m] = seg, 1, p
        return out

    def _stacked(self, name: str) -> np.ndarray:
        if not len(self):
            return np.zeros((0, self.layout.max_seq_len), dtype=np.int32 if name == "input_ids" else np.int8)
        return np.stack([self.arrays(f)[name] for f in range(len(self))])

    input_ids = property(lambda self: self._stacked("input_ids"))
    token_type_ids = property(lambda self: self._stacked("token_type_ids"))
    attention_mask = property(lambda self: self._stacked("attention_mask"))
    p_mask = property(lambda self: self._stacked("p_mask"))


def lay_out(rows: EncodedRows, tok, max_seq_len: int = 512, doc_stride: int = 128, max_query_length: int = 64,
            training: bool = False, layout: str = "xlnet") -> tuple[SquadFeatures, int]:
    """The windows of encoded questions ``rows`` in ``layout``; returns (features, number of unusable training
    answers, which get no window)."""
    specials = special_ids(tok)
    if specials and layout == "xlnet":
        raise DataError(f"data.layout={layout!r} with a WordPiece (BERT) tokenizer: a BERT checkpoint reads "
                        "[CLS] question [SEP] paragraph [SEP]; set data.layout=bert (funnel for a Funnel).")
    if doc_stride < 1:
        raise DataError(f"data.doc_stride={doc_stride} must be a positive number of pieces.")
    cls_id, sep_id, pad_id = (specials.get(k, d) for k, d in (("cls_id", CLS_ID), ("sep_id", SEP_ID),
                                                                ("pad_id", PAD_ID)))
    seg_q, seg_cls, seg_pad = (1, 2, 3) if layout == "xlnet" else (1, 1, 0)
    # the real BERT layout and Funnel's (segment 2 on [CLS]); SentencePiece BERT keeps the paragraph-first one
    spec = _Layout(max_seq_len, bool(specials) or layout == "funnel", cls_id, sep_id, pad_id, seg_q, seg_cls, seg_pad,
                   2 if layout == "funnel" else 0)
    unusable = np.asarray(rows.values[:, 6], dtype=bool) if training else np.zeros(len(rows), dtype=bool)
    return SquadFeatures(rows, spec, ~unusable, max_query_length, doc_stride, training), int(unusable.sum())


def build_features(examples: Iterable[SquadExample], tok, max_seq_len: int = 512, doc_stride: int = 128,
                   max_query_length: int = 64, training: bool = False, layout: str = "xlnet"
                   ) -> tuple[SquadFeatures, int]:
    """Windows of ``examples`` encoded here, in memory (a few questions; a split goes through :func:`encode_questions`
    and :func:`lay_out`, the same encoder and layout)."""
    rows = EncodedRows.in_memory(question_rows(examples), question_encoder(tok, training), QUESTION_FIELDS,
                                 len(QUESTION_VALUES))
    return lay_out(rows, tok, max_seq_len, doc_stride, max_query_length, training, layout)

# ------------------------------------------------------------------------------------------------ DataModule
class _FeatureDataset(Dataset):
    """The windows of a split, each laid out when a batch asks for it (:meth:`SquadFeatures.arrays`)."""

    def __init__(self, f: SquadFeatures):
        self.f = f

    def __len__(self) -> int:
        return len(self.f)

    def __getitem__(self, i: int) -> dict[str, Any]:
        f, rows = self.f, self.f.arrays(i)
        return {"input_ids": torch.from_numpy(rows["input_ids"]).long(),
                "token_type_ids": torch.from_numpy(rows["token_type_ids"]).long(),
                "attention_mask": torch.from_numpy(rows["attention_mask"]).long(),
                "p_mask": torch.from_numpy(rows["p_mask"]).float(),
                "cls_index": int(f.cls_index[i]), "start_positions": int(f.start_positions[i]),
                "end_positions": int(f.end_positions[i]), "is_impossible": float(f.is_impossible[i]),
                "feature_index": i}


class SquadDataModule(ResumableTrainOrder, pl.LightningDataModule):
    """SQuAD ``version`` 1.1 or 2.0 from ``data.path`` (official file names), the download tier or the offline
    cloze minis. Validation and test both run on the dev file (the test set is hidden); the task post-processes
    the windows with :func:`postprocess` and scores with genlab.metrics.squad_eval.

    ``eval_version`` (default: ``version``) picks the dev set that is scored, from ``eval_path`` (default
    ``path``): ``version=2.0 eval_version=1.1`` is the SQuAD 1.1 protocol of XLNet paper §3.3 -- the model finetuned on
    2.0 data answers the 1.1 dev questions with its best non-null span (``dev_version`` tells the task)."""

    def __init__(self, version: str = "2.0", source: str = "path", path: str | None = None,
                 cache_dir: str | None = None, tokenizer: str | None = None, vocab_size: int = 32000,
                 lower: bool = False, layout: str = "xlnet", max_seq_len: int = 512, doc_stride: int = 128,
                 max_query_length: int = 64, batch_size: int = 48, eval_batch_size: int = 64,
                 num_workers: int = 0, eval_version: str | None = None, eval_path: str | None = None,
                 num_proc: int | None = None) -> None:
        super().__init__()
        for key, v in (("version", version), ("eval_version", eval_version or version)):
            if v not in ("1.1", "2.0"):
                raise DataError(f"data.{key}={v!r} must be '1.1' or '2.0'.")
        self.version, self.source, self.path, self.cache_dir = version, source, path, cache_dir
        # the XLNet paper's SQuAD 1.1 protocol: train on 2.0, score the 1.1 dev set (eval_version="1.1")
        self.dev_version, self.eval_path = eval_version or version, eval_path
        self.tokenizer_file, self.vocab_size, self.lower, self.layout = tokenizer, vocab_size, lower, layout
        self.max_seq_len, self.doc_stride, self.max_query_length = max_seq_len, doc_stride, max_query_length
        self.batch_size, self.eval_batch_size, self.num_workers = batch_size, eval_batch_size, num_workers
        self.num_proc = num_proc  # tokenising processes (null: the cores available, at most 8)
        self.tokenizer = None
        self.bad_answers = 0
        self.dev_data: Iterable[dict] = []  # the dev file's articles, re-read on each pass (SquadPasses)
        self.dev_examples: Iterable[SquadExample] = []  # its questions, the same way
        self.features: dict[str, SquadFeatures] = {}
        self.train_path: Path | None = None

    def _spec(self, version: str | None = None, dev_only: bool = False) -> DatasetSpec:
        version = version or self.version
        if self.source == "mini":
            return SQUAD2_MINI if version == "2.0" else SQUAD1_MINI
        return squad_spec(version, dev_only)

    def _roots(self) -> tuple[Path, Path]:
        """(folder with train-v{version}.json, folder with dev-v{dev_version}.json)."""
        root = locate(self._spec(), self.source, self.path, self.cache_dir)
        if self.dev_version == self.version and self.eval_path is None:
            return root, root
        dev = locate(self._spec(self.dev_version, dev_only=True), self.source, self.eval_path or self.path,
                     self.cache_dir)
        return root, dev

    def model_overrides(self) -> dict[str, Any]:
        return {"vocab_size": self.tokenizer.vocab_size}

    def identity(self) -> dict[str, Any]:
        return {"dataset": f"squad{self.version}", "tokenizer": self.tokenizer.identity,
                "vocab_size": self.tokenizer.vocab_size}

    def prepare_data(self) -> None:
        self._roots()

    def setup(self, stage: str | None = None) -> None:
        """Tokenizer and dev features; the training features are built on first use (:meth:`train_features`),
        so ``eval.py`` never windows the training set."""
        if "dev" in self.features:
            return
        root, dev_root = self._roots()
        self.train_path = root / f"train-v{self.version}.json"
        dev_path = dev_root / f"dev-v{self.dev_version}.json"
        if self.tokenizer_file is not None:  # the checkpoint's: SentencePiece .model, BERT vocab.txt or folder
            self.tokenizer = load_tokenizer(self.tokenizer_file, self.lower)
        else:
            self.tokenizer = PieceTokenizer(piece_model(lambda: training_text(self.train_path), self.cache_dir,
                                                        self.vocab_size), self.lower)
        self.features["dev"], _ = self._features(dev_path, "dev", training=False)
        n = len(self.features["dev"].rows)
        self.dev_data, self.dev_examples = SquadPasses(dev_path, n, False), SquadPasses(dev_path, n, True)

    def _features(self, path: Path, split: str, training: bool) -> tuple[SquadFeatures, int]:
        rows = encode_questions(path, self.tokenizer, self.cache_dir, f"squad {split}", training, self.num_proc)
        return lay_out(rows, self.tokenizer, self.max_seq_len, self.doc_stride, self.max_query_length, training,
                       self.layout)

    def train_features(self) -> SquadFeatures:
        """Windows of the training questions with their labels (built once; unusable answers are counted in
        ``bad_answers`` and skipped)."""
        if "train" not in self.features:
            if "dev" not in self.features:
                self.setup("fit")
            self.features["train"], self.bad_answers = self._features(self.train_path, "train", training=True)
            if self.bad_answers:
                log.warning("%d SQuAD training answers were unusable (each named by a warning when the file was "
                            "first encoded) and were skipped", self.bad_answers)
            if len(self.features["train"]) == 0:
                raise DataError(f"the SQuAD training data (data.path={self.path}) has no usable answers "
                                f"({len(self.features['train'].rows)} questions, {self.bad_answers} answers that do "
                                "not match their context); check that answer_start points at the answer text in the "
                                "context, or pass the right file as data.path.")
        return self.features["train"]

    def _loader(self, split: str, shuffle: bool, bs: int) -> DataLoader:
        return DataLoader(_FeatureDataset(self.features[split]), batch_size=bs, shuffle=shuffle,
                          num_workers=self.num_workers, persistent_workers=self.num_workers > 0)

    def train_dataloader(self) -> DataLoader:
        self.train_features()
        return self.resumable_loader(_FeatureDataset(self.features["train"]), self.batch_size,
                                     num_workers=self.num_workers, persistent_workers=self.num_workers > 0)

    def val_dataloader(self) -> DataLoader:
        return self._loader("dev", False, self.eval_batch_size)

    def test_dataloader(self) -> DataLoader:
        return self._loader("dev", False, self.eval_batch_size)
