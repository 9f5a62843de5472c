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

An answer whose text does not equal ``context[answer_start : answer_start + len(text)]`` (or that has no usable
offset, or an answerable question with no answer) is a warning: it is counted (``SquadDataModule.bad_answers``)
and the training question skipped, as the official preprocessing does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
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
from genlab.data.text.encoded_texts import EncodedTexts, encode_texts, tokenize_texts, tokenizer_identity
from genlab.data.text.json_stream import iter_json_array
from genlab.data.text.progress import Progress, text_bytes, tracked
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


@dataclass
class EncodedSquad:
    """Every paragraph's pieces with their character spans, and every question's pieces, tokenised once over
    ``num_proc`` processes and cached (``genlab.data.text.encoded_texts``): the windows are laid out from these."""

    paragraphs: EncodedTexts
    questions: EncodedTexts

    def paragraph(self, context: str) -> Paragraph:
        return Paragraph(self.paragraphs.ids(context), self.paragraphs.field(context, "starts").astype(np.int64),
                         self.paragraphs.field(context, "ends").astype(np.int64))


def encode_squad(examples: list[SquadExample], tok, cache_dir: str | None, what: str,
                 num_proc: int | None = None) -> EncodedSquad:
    def paragraph_fields(context: str) -> tuple:
        para = tokenize_paragraph(context, tok)
        return para.ids, para.char_start, para.char_end

    paragraphs = encode_texts((e.context for e in examples), paragraph_fields,
                              ("squad paragraph", tokenizer_identity(tok)), cache_dir, f"{what} paragraphs",
                              fields=("ids", "starts", "ends"), num_proc=num_proc)
    return EncodedSquad(paragraphs, tokenize_texts((e.question for e in examples), tok, cache_dir,
                                                   f"{what} questions", num_proc))


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


@dataclass
class SquadFeatures:
    """Arrays over windows plus what post-processing needs to go back to text (the [F, T] ones narrow: int32 ids,
    int8 segments and masks; the dataset widens them per item)."""

    input_ids: np.ndarray
    token_type_ids: np.ndarray
    attention_mask: np.ndarray
    p_mask: np.ndarray
    cls_index: np.ndarray
    start_positions: np.ndarray
    end_positions: np.ndarray
    is_impossible: np.ndarray
    example_index: np.ndarray
    windows: list[dict] = field(default_factory=list)  # per feature: doc offset, length, max-context flags
    paragraphs: list[Paragraph] = field(default_factory=list)  # per example


def build_features(examples: list[SquadExample], tok, max_seq_len: int = 512, doc_stride: int = 128,
                   max_query_length: int = 64, training: bool = False, layout: str = "xlnet",
                   encoded: EncodedSquad | None = None) -> tuple[SquadFeatures, int]:
    """Windows of every example; returns (features, number of answers whose text mismatched its offset).
    ``encoded``: the examples' texts already tokenised (:func:`encode_squad`); None tokenises here."""
    specials = special_ids(tok)
    if specials and layout == "xlnet":
        raise DataError(f"data.layout={layout!r} with a WordPiece (BERT) tokenizer: a BERT checkpoint reads "
                        "[CLS] question [SEP] paragraph [SEP]; set data.layout=bert (funnel for a Funnel).")
    cls_id, sep_id, pad_id = (specials.get(k, d) for k, d in (("cls_id", CLS_ID), ("sep_id", SEP_ID),
                                                                ("pad_id", PAD_ID)))
    # the real BERT layout and Funnel's (segment 2 on [CLS]); SentencePiece BERT keeps the paragraph-first one
    question_first = bool(specials) or layout == "funnel"
    cls_seg = 2 if layout == "funnel" else 0
    seg_q, seg_cls, seg_pad = (1, 2, 3) if layout == "xlnet" else (1, 1, 0)
    cols: dict[str, list] = {k: [] for k in ("ids", "seg", "mask", "p", "cls", "s", "e", "imp", "ex")}
    windows, paragraphs, bad = [], [], 0
    cache: dict[str, Paragraph] = {}
    for ei, ex in enumerate(tracked(examples, "windowing SQuAD questions", lambda e: text_bytes(e.question))):
        para = cache.get(ex.context) or cache.setdefault(ex.context, encoded.paragraph(ex.context) if encoded
                                                         else tokenize_paragraph(ex.context, tok))
        paragraphs.append(para)
        q = (encoded.questions.ids(ex.question) if encoded else tok.encode(ex.question))[:max_query_length]
        span = None
        if training and not ex.is_impossible:
            problem = _answer_problem(ex)
            if problem:
                bad += 1
                log.warning("SQuAD question %s: %s; skipped", ex.qid, problem)
                continue
            a = ex.answers[0]
            start, text = int(a["answer_start"]), a["text"]
            span = char_to_piece_span(para, start, start + len(text))
        max_tokens = max_seq_len - len(q) - 3
        if max_tokens <= 0:
            raise DataError(f"data.max_seq_len={max_seq_len} leaves no room for the paragraph after a "
                            f"{len(q)}-piece question; raise it or lower data.max_query_length.")
        spans = doc_windows(len(para.ids), max_tokens, doc_stride)
        best = best_windows(spans, len(para.ids))
        for w, (s, n) in enumerate(spans):
            if question_first:  # [CLS] Q [SEP] P [SEP]: BERT's run_squad, every paragraph piece usable
                ids = [cls_id] + q + [sep_id] + para.ids[s:s + n] + [sep_id]
                seg = [cls_seg] + [0] * (len(q) + 1) + [1] * (n + 1)
                p = [0] + [1] * (len(q) + 1) + [0] * n + [1]
                cls, ctx, usable = 0, len(q) + 2, n
            else:  # P <sep> Q <sep> <cls>: XLNet's, whose post-processing never uses the last paragraph piece
                ids = para.ids[s:s + n] + [sep_id] + q + [sep_id] + [cls_id]
                seg = [0] * (n + 1) + [seg_q] * (len(q) + 1) + [seg_cls]
                p = [0] * n + [1] * (len(q) + 2) + [0]
                cls, ctx, usable = len(ids) - 1, 0, n - 1
            pad = max_seq_len - len(ids)
            if span is not None and s <= span[0] and span[1] < s + n:
                st, en, imp = span[0] - s + ctx, span[1] - s + ctx, 0
            else:
                st, en, imp = cls, cls, 1
            # one narrow array per window (int32/int8, widened per item): a list of lists of Python ints cost
            # ~4x the memory (5 GB for SQuAD 2.0's 129k windows)
            cols["ids"].append(np.array(ids + [pad_id] * pad, dtype=np.int32))
            cols["seg"].append(np.array(seg + [seg_pad] * pad, dtype=np.int8))
            cols["mask"].append(np.array([1] * len(ids) + [0] * pad, dtype=np.int8))
            cols["p"].append(np.array(p + [1] * pad, dtype=np.int8))
            cols["cls"].append(cls)
            cols["s"].append(st)
            cols["e"].append(en)
            cols["imp"].append(imp)
            cols["ex"].append(ei)
            windows.append({"offset": s, "length": n, "ctx_start": ctx, "usable": usable,
                            "max_context": best[s:s + n] == w})

    def arr(key: str, dtype=np.int64) -> np.ndarray:
        return np.array(cols[key], dtype=dtype)

    def rows(key: str) -> np.ndarray:
        return np.stack(cols[key]) if cols[key] else np.zeros((0, max_seq_len), dtype=np.int8)

    feats = SquadFeatures(rows("ids"), rows("seg"), rows("mask"), rows("p"), arr("cls"), arr("s"), arr("e"),
                          arr("imp", np.float32), arr("ex"), windows, paragraphs)
    return feats, bad


# ------------------------------------------------------------------------------------------------ predictions
def postprocess(examples: list[SquadExample], feats: SquadFeatures, results: dict[str, np.ndarray],
                start_n_top: int = 5, end_n_top: int = 5, n_best: int = 5, max_answer_length: int = 64
                ) -> tuple[dict[str, str], dict[str, float], dict[str, list[dict[str, Any]]]]:
    """(best non-null text, null score = min over windows of the answer-class logit, n-best list) per question.

    ``results`` holds per-feature arrays: start_top_log_probs/start_top_index [F, k], end_top_log_probs/
    end_top_index [F, k·e] (flat i·e + j), cls_logits [F]."""
    by_example: dict[int, list[int]] = {}
    for f, ei in enumerate(feats.example_index.tolist()):
        by_example.setdefault(ei, []).append(f)
    preds, null, nbest = {}, {}, {}
    for ei, ex in enumerate(examples):
        para = feats.paragraphs[ei]
        cands, null_score = [], None
        for f in by_example.get(ei, []):
            win = feats.windows[f]
            c0, usable = win.get("ctx_start", 0), win.get("usable", win["length"] - 1)
            c = float(results["cls_logits"][f])
            null_score = c if null_score is None else min(null_score, c)
            for i in range(start_n_top):
                s = int(results["start_top_index"][f, i]) - c0  # sequence position -> window piece
                for j in range(end_n_top):
                    e = int(results["end_top_index"][f, i * end_n_top + j]) - c0
                    # only paragraph pieces; XLNet's official code also drops the window's last one (usable)
                    if s < 0 or s >= usable or e >= usable or e < s:
                        continue
                    if not win["max_context"][s] or e - s + 1 > max_answer_length:
                        continue
                    score = float(results["start_top_log_probs"][f, i]) + float(results["end_top_log_probs"][f, i * end_n_top + j])
                    a, b = win["offset"] + s, win["offset"] + e
                    cands.append((score, ex.context[para.char_start[a]:para.char_end[b]],
                                  float(results["start_top_log_probs"][f, i]),
                                  float(results["end_top_log_probs"][f, i * end_n_top + j])))
        cands.sort(key=lambda t: -t[0])
        seen, best = set(), []
        for score, text, slp, elp in cands:
            if text in seen:
                continue
            seen.add(text)
            best.append({"text": text, "score": score, "start_log_prob": slp, "end_log_prob": elp})
            if len(best) == n_best:
                break
        if best:
            z = np.exp(np.array([b["score"] for b in best]) - max(b["score"] for b in best))
            for b, pr in zip(best, z / z.sum()):
                b["probability"] = float(pr)
        preds[ex.qid] = best[0]["text"] if best else ""
        null[ex.qid] = 0.0 if null_score is None else null_score
        nbest[ex.qid] = best
    return preds, null, nbest


# ------------------------------------------------------------------------------------------------ DataModule
class _FeatureDataset(Dataset):
    def __init__(self, f: SquadFeatures):
        self.f = f

    def __len__(self) -> int:
        return len(self.f.cls_index)

    def __getitem__(self, i: int) -> dict[str, Any]:
        f = self.f
        return {"input_ids": torch.from_numpy(f.input_ids[i]).long(),
                "token_type_ids": torch.from_numpy(f.token_type_ids[i]).long(),
                "attention_mask": torch.from_numpy(f.attention_mask[i]).long(),
                "p_mask": torch.from_numpy(f.p_mask[i]).float(),
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
        self.dev_data: list[dict] = []
        self.dev_examples: list[SquadExample] = []
        self.features: dict[str, SquadFeatures] = {}
        self._train_examples: list[SquadExample] = []

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
        _, train = read_squad(root / f"train-v{self.version}.json", keep_data=False)
        self._train_examples = train
        self.dev_data, self.dev_examples = read_squad(dev_root / f"dev-v{self.dev_version}.json")
        if self.tokenizer_file is not None:  # the checkpoint's: SentencePiece .model, BERT vocab.txt or folder
            self.tokenizer = load_tokenizer(self.tokenizer_file, self.lower)
        else:
            lines = [*dict.fromkeys(e.context for e in train), *(e.question for e in train)]
            self.tokenizer = PieceTokenizer(piece_model(lines, self.cache_dir, self.vocab_size), self.lower)
        self.features["dev"], _ = build_features(self.dev_examples, self.tokenizer, training=False,
                                                 **self._feature_args("dev"))

    def _feature_args(self, split: str) -> dict[str, Any]:
        examples = self.dev_examples if split == "dev" else self._train_examples
        return {"max_seq_len": self.max_seq_len, "doc_stride": self.doc_stride,
                "max_query_length": self.max_query_length, "layout": self.layout,
                "encoded": encode_squad(examples, self.tokenizer, self.cache_dir, f"squad {split}", self.num_proc)}

    def train_features(self) -> SquadFeatures:
        """Windows of the training questions with their labels (built once; unusable answers are counted in
        ``bad_answers`` and skipped)."""
        if "train" not in self.features:
            if "dev" not in self.features:
                self.setup("fit")
            self.features["train"], self.bad_answers = build_features(self._train_examples, self.tokenizer,
                                                                      training=True, **self._feature_args("train"))
            if self.bad_answers:
                log.warning("%d SQuAD training answers were unusable (see the warnings above) and were skipped",
                            self.bad_answers)
            if len(_FeatureDataset(self.features["train"])) == 0:
                raise DataError(f"the SQuAD training data (data.path={self.path}) has no usable answers "
                                f"({len(self._train_examples)} questions, {self.bad_answers} answers that do not "
                                "match their context); check that answer_start points at the answer text in the "
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
