"""Document classification readers (XLNet paper §3.4): IMDB folders and the Zhang et al. (2015) CSV layout
(Yelp-2/5, DBpedia, AG News, Amazon-2/5). The papers report test **error rate**; as in the official scripts the test
split doubles as "dev" (no separate dev set).

* IMDB: ``<root>/{train,test}/{pos,neg}/*.txt`` (root = the ``aclImdb`` folder), ``<br />`` replaced by a space.
* CSV: ``<root>/{train,test}.csv``, fields ``"label","text"`` (Yelp) or ``"label","title","body"`` (others), labels
  1..K, ``\\n`` escaped as a literal backslash-n. Title and body are joined as ``title + " " + body`` (platform
  default; the papers do not say).
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from genlab.data.finetune.glue import Example
from genlab.data.text.chunks import read_lines
from genlab.errors import DataError

csv.field_size_limit(sys.maxsize)


@dataclass(frozen=True)
class DocDataset:
    name: str
    layout: str  # imdb | csv
    n_classes: int
    files: tuple[str, ...]


DATASETS = {
    "imdb": DocDataset("imdb", "imdb", 2, ("train/pos/", "train/neg/", "test/pos/", "test/neg/")),
    "yelp2": DocDataset("yelp2", "csv", 2, ("train.csv", "test.csv")),
    "yelp5": DocDataset("yelp5", "csv", 5, ("train.csv", "test.csv")),
    "dbpedia": DocDataset("dbpedia", "csv", 14, ("train.csv", "test.csv")),
    "ag_news": DocDataset("ag_news", "csv", 4, ("train.csv", "test.csv")),
    "amazon2": DocDataset("amazon2", "csv", 2, ("train.csv", "test.csv")),
    "amazon5": DocDataset("amazon5", "csv", 5, ("train.csv", "test.csv")),
}
IMDB_LABELS = ("neg", "pos")


def get_dataset(name: str) -> DocDataset:
    if name not in DATASETS:
        raise DataError(f"document-classification dataset {name!r} is unknown; use one of {sorted(DATASETS)}.")
    return DATASETS[name]


def labels_of(ds: DocDataset) -> tuple[str, ...]:
    return IMDB_LABELS if ds.layout == "imdb" else tuple(str(i) for i in range(1, ds.n_classes + 1))


def read_imdb(root: Path, split: str) -> list[Example]:
    return list(iter_imdb(root, split))


def iter_imdb(root: Path, split: str) -> Iterator[Example]:
    n = 0
    for label in IMDB_LABELS:
        folder = Path(root) / split / label
        if not folder.is_dir():
            raise DataError(f"IMDB folder {folder} does not exist; data.path must be the aclImdb directory "
                            "(with train/{pos,neg} and test/{pos,neg}).")
        for f in sorted(folder.glob("*.txt")):
            text = f.read_text(encoding="utf-8", errors="replace").replace("<br />", " ")
            yield Example(f"{split}/{label}/{f.name}", text, None, label)
            n += 1
    if not n:
        raise DataError(f"IMDB split {Path(root) / split} holds no .txt reviews.")


def imdb_files(root: Path, split: str) -> list[Path]:
    return sorted(f for label in IMDB_LABELS for f in (Path(root) / split / label).glob("*.txt"))


def read_csv(root: Path, split: str, ds: DocDataset) -> list[Example]:
    return list(iter_csv(root, split, ds))


def iter_csv(root: Path, split: str, ds: DocDataset) -> Iterator[Example]:
    path = Path(root) / f"{split}.csv"
    if not path.is_file():
        raise DataError(f"{ds.name}: {path} does not exist; data.path must hold train.csv and test.csv.")
    labels = labels_of(ds)
    n = 0
    for i, row in enumerate(csv.reader(read_lines(path)), start=1):
        if len(row) < 2:
            raise DataError(f"{path}, line {i}: expected label,text[,...] columns, got {len(row)}.")
        if row[0] not in labels:
            raise DataError(f"{path}, line {i}: label {row[0]!r} is not one of 1..{ds.n_classes} ({ds.name}).")
        text = " ".join(part.replace("\\n", " ").replace('\\"', '"') for part in row[1:] if part)
        yield Example(f"{split}-{i}", text, None, row[0])
        n += 1
    if not n:
        raise DataError(f"{path} holds no examples (an empty or truncated copy?); replace it with the "
                        "dataset's official file.")


def read_docs(ds: DocDataset, root: Path, split: str) -> list[Example]:
    return list(iter_docs(ds, root, split))


def iter_docs(ds: DocDataset, root: Path, split: str) -> Iterator[Example]:
    """The examples of one split, streamed (memory holds a piece of the file, not the split)."""
    return iter_imdb(root, split) if ds.layout == "imdb" else iter_csv(root, split, ds)


def split_files(ds: DocDataset, root: Path, split: str) -> list[Path]:
    """The files a split is read from (their stamps key its cache entry)."""
    return imdb_files(root, split) if ds.layout == "imdb" else [Path(root) / f"{split}.csv"]
