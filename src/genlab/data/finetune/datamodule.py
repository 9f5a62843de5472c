"""DataModule for sequence classification / regression finetuning: GLUE tasks and document classification.

Batches (dicts of tensors, fixed length ``max_seq_len``):
``input_ids`` [B,T] long, ``token_type_ids`` [B,T] long, ``attention_mask`` [B,T] long (1 = real token),
``labels`` [B] long (class index) or float (STS-B), ``index`` [B] long (row of the example in its split).

Layouts (as the official XLNet and BERT code): ``xlnet`` = ``A <sep> B <sep> <cls>``, segments A=0, B=1, ``<cls>``=2,
padding=4, **left** padding with id 0 so ``<cls>`` is last; ``bert`` = ``<cls> A <sep> B <sep>``, segments 0/1, right
padding; ``funnel`` = the ``bert`` layout with segment 2 on ``<cls>`` (Funnel-Transformer, as its code).
Pair truncation drops the last token of the longer of A/B until everything fits.

Evaluation splits: validation = the task's dev split(s) (MNLI: matched, mismatched); test = the same labelled dev
splits (GLUE test labels are hidden) plus, when present, the unlabelled test files whose predictions the task
writes in the GLUE submission format. Document classification uses its test split as dev (official protocol). SNLI
and SciTail (``genlab.data.finetune.nli``) validate on dev and test on their labelled test split.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from functools import partial
from itertools import chain, islice
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset

from genlab.data.finetune import doc_classification as docs
from genlab.data.finetune import glue, nli
from genlab.data.finetune.downloads import doc_spec, glue_spec
from genlab.data.finetune.folds import check_fold, fold_split
from genlab.data.finetune.glue_minis import GLUE_MINIS, mnli_with_dev_pairs
from genlab.data.finetune.minis import IMDB_MINI, SST2_MINI
from genlab.data.finetune.tokenizer_cache import piece_model
from genlab.data.finetune.zhang_minis import ZHANG_MINIS
from genlab.data.loading.resumable import ResumableTrainOrder
from genlab.data.sources.tiers import DatasetSpec, locate
from genlab.data.text.cache_entry import file_stamp
from genlab.data.text.distinct import SHARED_TEXTS, with_earlier_row
from genlab.data.text.encoded_texts import EncodedRows, encode_rows, tokenizer_identity
from genlab.data.tokenizers.from_checkpoint import (
    FinetuneTokenizer,
    load_tokenizer,
    special_ids,
)
from genlab.data.tokenizers.xlnet_pieces import PieceTokenizer
from genlab.errors import DataError

CLS_ID, SEP_ID, PAD_ID = 3, 4, 0  # XLNet SentencePiece ids (genlab.data.pretrain.corpus); XLNet pads with id 0
SEG_A, SEG_B, SEG_CLS, SEG_PAD = 0, 1, 2, 4
LAYOUTS = ("xlnet", "bert", "funnel")
# human labels: SST-2, IMDB, Yelp-2, Amazon-2; the others are generated (each module says how)
MINIS = {"sst2": SST2_MINI, "imdb": IMDB_MINI, **GLUE_MINIS, **ZHANG_MINIS, **nli.NLI_MINIS}


def truncate_pair(a: list[int], b: list[int] | None, budget: int) -> tuple[list[int], list[int] | None]:
    """Drop the last token of the longer sequence until ``|a| + |b| <= budget`` (single: keep the first tokens)."""
    if b is None:
        return a[:budget], None
    a, b = list(a), list(b)
    while len(a) + len(b) > budget:
        (a if len(a) > len(b) else b).pop()
    return a, b


def encode_pair(a: list[int], b: list[int] | None, max_len: int, layout: str = "xlnet", cls_id: int = CLS_ID,
                sep_id: int = SEP_ID, pad_id: int = PAD_ID) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(input_ids, token_type_ids, attention_mask) of one example, each of length ``max_len``; the special ids
    default to XLNet's SentencePiece ones (a WordPiece checkpoint passes its own)."""
    a, b = truncate_pair(a, b, max_len - (3 if b is not None else 2))
    tail = b + [sep_id] if b is not None else []
    if layout == "xlnet":  # A <sep> B <sep> <cls>, left padding
        ids = a + [sep_id] + tail + [cls_id]
        seg = [SEG_A] * (len(a) + 1) + [SEG_B] * len(tail) + [SEG_CLS]
        pad = max_len - len(ids)
        return (np.array([pad_id] * pad + ids), np.array([SEG_PAD] * pad + seg),
                np.array([0] * pad + [1] * len(ids)))
    ids = [cls_id] + a + [sep_id] + tail  # [CLS] A [SEP] B [SEP], right padding
    seg = [SEG_CLS if layout == "funnel" else 0] + [0] * (len(a) + 1) + [1] * len(tail)
    pad = max_len - len(ids)
    return np.array(ids + [pad_id] * pad), np.array(seg + [0] * pad), np.array([1] * len(ids) + [0] * pad)


def pair_item(a: list[int], b: list[int] | None, label: float | None, layout: str, max_len: int,
              regression: bool, specials: dict[str, int]) -> dict[str, Any]:
    """One example's tensors in an XLNet/BERT/Funnel ``layout`` (the label as a long, or a float for STS-B)."""
    ids, seg, mask = encode_pair(a, b, max_len, layout, **specials)
    item = {"input_ids": torch.from_numpy(ids).long(), "token_type_ids": torch.from_numpy(seg).long(),
            "attention_mask": torch.from_numpy(mask).long()}
    if label is not None:
        item["labels"] = torch.tensor(label, dtype=torch.float32) if regression else torch.tensor(int(label))
    return item


def share_first_texts(examples: Iterable[glue.Example], limit: int = SHARED_TEXTS
                      ) -> Iterator[tuple[glue.Example, int]]:
    """Each example with the row of the first earlier pair whose text A is the same, or -1: an NLI premise comes
    with three hypotheses (MNLI: 393k pairs, ~130k premises, in shuffled order), so it is tokenised and stored
    once (:func:`genlab.data.text.distinct.with_earlier_row`: at most ``limit`` texts remembered); single texts
    are never shared."""
    return with_earlier_row(examples, lambda ex: ex.text_a if ex.text_b is not None else None, limit)


class EncodedSplit(Dataset):
    """One split read lazily from its memory-mapped cache entry (:class:`genlab.data.text.encoded_texts.EncodedRows`):
    per example the ids of text A then text B, and the values (len A, len B or -1 without B, label or NaN when
    unlabelled, and the earlier row whose A this example shares or -1: then its own row holds only B, see
    :func:`share_first_texts`). ``make_item(a, b, label)`` lays one example out when a batch asks for it, so memory holds the
    ids' pages in use, never ``[N, T]`` arrays (Amazon-2 at 512 would take 22 GB laid out in advance)."""

    def __init__(self, name: str, rows: EncodedRows, make_item: Callable[..., dict[str, Any]], labelled: bool,
                 regression: bool):
        self.name, self.rows, self.make_item = name, rows, make_item
        self.labelled, self.regression = labelled, regression

    def __len__(self) -> int:
        return len(self.rows)

    def pair(self, i: int) -> tuple[list[int], list[int] | None]:
        ids, (len_a, len_b, _, shared) = self.rows.row(i).tolist(), self.rows.values[i].tolist()
        len_a, shared = int(len_a), int(shared)
        # a first text met earlier in the split (a premise with several hypotheses) is stored in that row only
        a = self.rows.row(shared)[:int(self.rows.values[shared, 0])].tolist() if shared >= 0 else ids[:len_a]
        return a, (ids[len_a:] if len_b >= 0 else None)

    @property
    def labels(self) -> np.ndarray | None:
        """Every example's label (class index, or float for STS-B); None when unlabelled (GLUE test)."""
        if not self.labelled:
            return None
        return self.rows.values[:, 2].astype(np.float32 if self.regression else np.int64)

    @property
    def guids(self) -> list[str]:
        return self.rows.tags()

    def __getitem__(self, i: int) -> dict[str, Any]:
        a, b = self.pair(i)
        return {**self.make_item(a, b, float(self.rows.values[i, 2]) if self.labelled else None), "index": i}


class ClassificationDataModule(ResumableTrainOrder, pl.LightningDataModule):
    """``task``: a GLUE task (cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli), an NLI dataset (snli, scitail) or
    a document-classification dataset (imdb, yelp2, yelp5, dbpedia, ag_news, amazon2, amazon5). ``tokenizer``: the
    SentencePiece model of the pretrained checkpoint (required to finetune a pretrained model); null trains one on
    the training text. Subclasses with other input layouts (GPT) name theirs in ``layouts``. Every text is
    tokenised once over ``num_proc`` processes (null: the cores available, at most 8) and cached
    (``genlab.data.text.encoded_texts``); later runs only lay the cached ids out.

    ``n_folds`` (document classification only): k-fold cross-validation over the labelled train and test splits
    pooled (``genlab.data.finetune.folds``: stratified, the folds fixed by the labels alone); ``fold`` picks the part
    that becomes the ``test`` split (also the dev split, as for every document-classification set), the other parts
    are ``train``. A multirun over ``data.fold=0,..,k-1`` scores every example exactly once. null = the dataset's own
    split.

    ``mini_dev_pairs`` (the MNLI mini only): pairs in each dev file, the mini's 200 first, then pairs on premises no
    split uses (``genlab.data.finetune.glue_minis.build_mnli``); null = the mini's 200."""

    layouts: tuple[str, ...] = LAYOUTS

    def __init__(self, task: str, source: str = "path", path: str | None = None, cache_dir: str | None = None,
                 tokenizer: str | None = None, vocab_size: int = 8000, lower: bool = False, layout: str = "xlnet",
                 max_seq_len: int = 128, batch_size: int = 32, eval_batch_size: int = 64, num_workers: int = 0,
                 max_train_examples: int | None = None, n_folds: int | None = None, fold: int = 0,
                 num_proc: int | None = None, mini_dev_pairs: int | None = None) -> None:
        super().__init__()
        if layout not in self.layouts:
            raise DataError(f"data.layout={layout!r} must be one of {self.layouts}.")
        check_fold(n_folds, fold)
        self.is_glue = task.lower().replace("-", "") in glue.TASKS
        self.nli = nli.DATASETS.get(task.lower())
        if self.is_glue:
            self.glue_task = glue.get_task(task)
            self.labels: tuple[str, ...] = self.glue_task.labels
        elif self.nli is not None:
            self.labels = self.nli.labels
        else:
            self.doc = docs.get_dataset(task)
            self.labels = docs.labels_of(self.doc)
        self.task = task
        self.source, self.path, self.cache_dir = source, path, cache_dir
        self.tokenizer_file, self.vocab_size, self.lower, self.layout = tokenizer, vocab_size, lower, layout
        self.max_seq_len, self.batch_size, self.eval_batch_size = max_seq_len, batch_size, eval_batch_size
        self.num_workers, self.max_train_examples = num_workers, max_train_examples
        self.n_folds, self.fold, self.num_proc = n_folds, fold, num_proc
        self.mini_dev_pairs = mini_dev_pairs
        if mini_dev_pairs is not None and (source != "mini" or not self.is_glue or self.glue_task.name != "mnli"):
            raise DataError(f"data.mini_dev_pairs={mini_dev_pairs} enlarges the dev files of the offline MNLI mini; "
                            f"here data.task={task}, data.source={source}: set data.mini_dev_pairs=null.")
        if n_folds is not None and (self.is_glue or self.nli is not None):
            raise DataError(f"data.n_folds={n_folds}: cross-validation pools a document-classification set's train and "
                            f"test splits; data.task={task} has its own dev split: set data.n_folds=null.")
        self.tokenizer: FinetuneTokenizer | None = None
        self.splits: dict[str, Dataset] = {}
        self.root: Path | None = None

    # --- sizes and identity -------------------------------------------------------------------------------------
    @property
    def n_labels(self) -> int:
        return len(self.labels) or 1  # 1 = regression

    @property
    def is_regression(self) -> bool:
        return not self.labels

    def model_overrides(self) -> dict[str, Any]:
        return {"vocab_size": self.tokenizer.vocab_size}

    def identity(self) -> dict[str, Any]:
        out = {"dataset": self.task, "tokenizer": self.tokenizer.identity, "vocab_size": self.tokenizer.vocab_size}
        if self.n_folds is not None:
            out["fold"] = f"{self.fold}/{self.n_folds}"
        if self.mini_dev_pairs is not None:
            out["mini_dev_pairs"] = self.mini_dev_pairs
        return out

    # --- files --------------------------------------------------------------------------------------------------
    def _spec(self) -> DatasetSpec:
        if self.source == "mini":
            key = self.glue_task.name if self.is_glue else self.task
            if key not in MINIS:
                raise DataError(f"data.task={self.task} has no offline mini (minis: {sorted(MINIS)}); "
                                "use data.source=path data.path=/your/copy.")
            return MINIS[key] if self.mini_dev_pairs is None else mnli_with_dev_pairs(self.mini_dev_pairs)
        if self.nli is not None:
            return self.nli.spec()
        return glue_spec(self.glue_task.name) if self.is_glue else doc_spec(self.doc.name)

    def _split_names(self) -> dict[str, bool]:
        """split name -> labelled."""
        if self.is_glue:
            t = self.glue_task
            out = {"train": True, **{name: True for name in t.dev}}
            out.update({name: False for name, s in t.test.items() if (self.root / s.file).is_file()})
            return out
        return {s: True for s in nli.SPLITS} if self.nli is not None else {"train": True, "test": True}

    def _files(self, name: str) -> list[Path]:
        """The files split ``name`` is read from (document classification with folds: both pooled splits)."""
        if self.is_glue:
            t = self.glue_task
            return [self.root / {"train": t.train, **t.dev, **t.test}[name].file]
        if self.nli is not None:
            return [self.root / self.nli.files[name]]
        parts = ("train", "test") if self.n_folds is not None else (name,)
        return [f for part in parts for f in docs.split_files(self.doc, self.root, part)]

    def _examples(self, name: str) -> Iterator[glue.Example]:
        """The examples of split ``name``, streamed from its files."""
        if self.is_glue:
            t = self.glue_task
            examples = glue.iter_split(t, self.root, {"train": t.train, **t.dev, **t.test}[name])
        elif self.nli is not None:
            examples = self.nli.read(self.root / self.nli.files[name])
        elif self.n_folds is not None:
            examples = self._fold_examples(name)
        else:
            examples = docs.iter_docs(self.doc, self.root, name)
        return islice(examples, self.max_train_examples) if name == "train" else examples

    def _pooled(self) -> Iterator[glue.Example]:
        return chain(docs.iter_docs(self.doc, self.root, "train"), docs.iter_docs(self.doc, self.root, "test"))

    def _fold_examples(self, name: str) -> Iterator[glue.Example]:
        """Part ``name`` of the pooled train + test examples: the folds are fixed by the labels, read in a first
        pass (one small integer per example), then the part's examples are streamed in a second."""
        labels = np.fromiter((self.labels.index(e.label) for e in self._pooled()), dtype=np.int16)
        check_fold(self.n_folds, self.fold, len(labels))
        # the label strings (shared objects), as before streaming: the folds' class order sorts on them
        train_idx, test_idx = fold_split([self.labels[y] for y in labels.tolist()], self.n_folds, self.fold)
        keep = np.zeros(len(labels), dtype=bool)
        keep[test_idx if name == "test" else train_idx] = True
        yield from (e for e, k in zip(self._pooled(), keep) if k)

    def _load_tokenizer(self, train_texts: Callable[[], Iterable[str | None]]) -> FinetuneTokenizer:
        if self.tokenizer_file is not None:  # a checkpoint's own: SentencePiece or WordPiece (folder, file)
            return load_tokenizer(self.tokenizer_file, self.lower)
        return PieceTokenizer(piece_model(train_texts, self.cache_dir, self.vocab_size), self.lower)

    def _encoder(self) -> Callable[[tuple[glue.Example, int]], tuple]:
        """(Example, row sharing its A or -1) -> (A's ids unless shared, then B's; (len A stored here, len B or -1,
        label index / score / NaN, the shared row); guid); runs in the tokenising processes."""
        tok, labels, regression = self.tokenizer, self.labels, self.is_regression

        def encode(item: tuple[glue.Example, int]) -> tuple:
            ex, shared = item
            a = list(tok.encode(ex.text_a)) if shared < 0 else []
            b = list(tok.encode(ex.text_b)) if ex.text_b is not None else []
            label = (np.nan if ex.label is None else float(ex.label) if regression else labels.index(ex.label))
            return (a + b,), (len(a), -1 if ex.text_b is None else len(b), label, shared), ex.guid

        return encode

    def _encode_split(self, name: str) -> EncodedRows:
        """Split ``name`` tokenised over ``num_proc`` processes into its cache entry (built once; keyed on its files'
        names relative to the dataset folder, sizes and times, and the tokenizer; never the layout)."""
        try:
            stamp = file_stamp(self.root, [str(f.relative_to(self.root)) for f in self._files(name)])
        except FileNotFoundError:
            stamp = None  # no entry can exist: the reader names the missing file and the fix
        key = (self.task, name, stamp,
               tokenizer_identity(self.tokenizer), self.labels, self.max_train_examples if name == "train" else None,
               (self.n_folds, self.fold))
        return encode_rows(share_first_texts(self._examples(name)), self._encoder(), key, self.cache_dir,
                           f"{self.task} {name}", n_values=4, num_proc=self.num_proc)

    def _encode(self, name: str, rows: EncodedRows, labelled: bool) -> Dataset:
        make_item = partial(pair_item, layout=self.layout, max_len=self.max_seq_len, regression=self.is_regression,
                            specials=special_ids(self.tokenizer))  # {} for SentencePiece (XLNet's fixed ids)
        return EncodedSplit(name, rows, make_item, labelled, self.is_regression)

    # --- Lightning hooks ----------------------------------------------------------------------------------------
    def prepare_data(self) -> None:
        locate(self._spec(), self.source, self.path, self.cache_dir)

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        self.root = locate(self._spec(), self.source, self.path, self.cache_dir)
        # a tokenizer trained here (no checkpoint's) streams the training text: once to key its cache, once to train
        self.tokenizer = self._load_tokenizer(lambda: (t for e in self._examples("train") for t in (e.text_a, e.text_b)))
        self.splits = {name: self._encode(name, self._encode_split(name), labelled)
                       for name, labelled in self._split_names().items()}

    @property
    def dev_splits(self) -> list[str]:
        if self.nli is not None:
            return ["dev"]
        return list(self.glue_task.dev) if self.is_glue else ["test"]

    @property
    def predict_splits(self) -> list[str]:
        return [n for n in self.glue_task.test if n in self.splits] if self.is_glue else []

    def _loader(self, split: EncodedSplit, shuffle: bool, batch_size: int) -> DataLoader:
        return DataLoader(split, batch_size=batch_size, shuffle=shuffle, num_workers=self.num_workers,
                          drop_last=False, persistent_workers=self.num_workers > 0)

    def train_dataloader(self) -> DataLoader:
        return self.resumable_loader(self.splits["train"], self.batch_size, num_workers=self.num_workers,
                                     persistent_workers=self.num_workers > 0)

    def val_dataloader(self) -> list[DataLoader]:
        return [self._loader(self.splits[n], False, self.eval_batch_size) for n in self.dev_splits]

    def test_dataloader(self) -> list[DataLoader]:
        return [self._loader(self.splits[n], False, self.eval_batch_size) for n in self.test_split_names()]

    def test_split_names(self) -> list[str]:
        """Labelled splits scored in ``test`` (each logs ``test/...``), then unlabelled ones to predict."""
        if self.nli is not None:
            return ["test"]  # SNLI / SciTail test labels are public: the reported split
        return self.dev_splits + self.predict_splits

    def write_predictions(self, split: str, predictions: list, out_dir: Path) -> Path:
        """GLUE submission file ``<out_dir>/<split>.tsv`` (e.g. ``MNLI-m.tsv``) for an unlabelled split."""
        path = Path(out_dir) / f"{split}.tsv"
        glue.write_submission(path, self.glue_task, self.splits[split].guids, predictions)
        return path
