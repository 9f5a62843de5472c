"""SNLI and SciTail (GPT-1's NLI tasks outside GLUE, GPT-1 paper §4.2, Table 1) in their official file formats, their
three data tiers and their offline minis. Both feed ``ClassificationDataModule`` as sentence pairs (``Example``).

* **SNLI 1.0** (``snli_1.0.zip``; ``data.path`` = its ``snli_1.0`` folder): ``snli_1.0_{train,dev,test}.jsonl``, one
  JSON object per line with ``gold_label``, ``sentence1`` (premise), ``sentence2`` (hypothesis) and ``pairID``.
  Pairs whose ``gold_label`` is ``-`` (no annotator majority) are dropped, as every published SNLI result does.
  The test labels are public, so ``test`` is a labelled split (the paper reports test accuracy).
* **SciTail v1.1** (``SciTailV1.1.zip``; ``data.path`` = its ``SciTailV1.1`` folder):
  ``tsv_format/scitail_1.0_{train,dev,test}.tsv``, headerless ``premise <tab> hypothesis <tab> label`` with labels
  ``entails`` / ``neutral``; test labels public.

Downloads: SNLI's sha256 is TensorFlow Datasets' record (``url_checksums/snli.txt``); for SciTail we found no public
sha256 (TFDS's builder does not list one in its checked-in records), so its RemoteFile carries ``sha256=None``.

Minis (GENERATED labels, REAL text: sentences of the gensim Wikipedia excerpt, built with the GLUE minis' sampler,
``genlab.data.finetune.glue_minis``): SNLI — entailment = a span of the premise, contradiction = that span negated,
neutral = a span of another sentence of the same article (MNLI's rule), plus 2 % of rows with ``gold_label`` ``-``
that the reader must drop; SciTail — entails = a span of the premise, neutral = a span of a same-article sentence.
4,000 train / 200 dev / 200 test pairs each.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from genlab.data.finetune.downloads import _unpack
from genlab.data.finetune.glue import Example
from genlab.data.finetune.glue_minis import (
    MNLI_LABELS,
    _by_split,
    _Gen,
    _nli_pair,
    _splits,
)
from genlab.data.sources.tiers import DatasetSpec, RemoteFile
from genlab.data.text.chunks import read_lines
from genlab.errors import DataError

SPLITS = ("train", "dev", "test")


def read_snli(path: Path) -> Iterator[Example]:
    """Labelled pairs of one SNLI ``.jsonl`` file (``-`` gold labels dropped)."""
    if not path.is_file():
        raise DataError(f"SNLI file {path} does not exist; data.path must be the snli_1.0 folder "
                        "(snli_1.0_{train,dev,test}.jsonl).")
    n = 0
    for i, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            label, a, b = obj["gold_label"], obj["sentence1"], obj["sentence2"]
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise DataError(f"{path}, line {i}: not an SNLI JSON line with gold_label, sentence1, sentence2 "
                            f"({err}).") from err
        if label == "-":
            continue
        if label not in SNLI.labels:
            raise DataError(f"{path}, line {i}: gold_label {label!r} is not one of {list(SNLI.labels)} or '-'.")
        yield Example(str(obj.get("pairID", f"{path.name}-{i}")), a, b, label)
        n += 1
    if not n:
        raise DataError(f"{path} holds no labelled SNLI pairs.")


def read_scitail(path: Path) -> Iterator[Example]:
    """Pairs of one SciTail ``tsv_format`` file (premise, hypothesis, label; no header)."""
    if not path.is_file():
        raise DataError(f"SciTail file {path} does not exist; data.path must be the SciTailV1.1 folder "
                        "(tsv_format/scitail_1.0_{train,dev,test}.tsv).")
    n = 0
    for i, row in enumerate(csv.reader(read_lines(path), delimiter="\t", quotechar=None), start=1):
        if not row:
            continue
        if len(row) != 3:
            raise DataError(f"{path}, line {i}: {len(row)} tab-separated columns, SciTail rows are premise, "
                            "hypothesis, label.")
        if row[2] not in SCITAIL.labels:
            raise DataError(f"{path}, line {i}: label {row[2]!r} is not one of {list(SCITAIL.labels)}.")
        yield Example(f"{path.name}-{i}", row[0], row[1], row[2])
        n += 1
    if not n:
        raise DataError(f"{path} holds no SciTail pairs.")


@dataclass(frozen=True)
class NLIDataset:
    name: str
    labels: tuple[str, ...]
    files: dict[str, str]  # split -> file under the dataset folder
    read: Callable[[Path], Iterator[Example]]  # streamed
    download: RemoteFile
    folder: str  # the archive's top folder (the dataset folder)
    homepage: str

    def read_split(self, root: Path, split: str) -> list[Example]:
        return list(self.read(Path(root) / self.files[split]))

    def spec(self) -> DatasetSpec:
        return DatasetSpec(self.name, tuple(self.files.values()), downloads=(self.download,),
                           prepare=_unpack(self.download.filename, self.folder), homepage=self.homepage)


SNLI = NLIDataset(
    "snli", ("entailment", "neutral", "contradiction"), {s: f"snli_1.0_{s}.jsonl" for s in SPLITS}, read_snli,
    RemoteFile("https://nlp.stanford.edu/projects/snli/snli_1.0.zip",  # TFDS url_checksums/snli.txt
               "afb3d70a5af5d8de0d9d81e2637e0fb8c22d1235c2749d83125ca43dab0dbd3e", "snli_1.0.zip"),
    "snli_1.0", "https://nlp.stanford.edu/projects/snli/")
SCITAIL = NLIDataset(
    "scitail", ("entails", "neutral"), {s: f"tsv_format/scitail_1.0_{s}.tsv" for s in SPLITS}, read_scitail,
    RemoteFile("http://data.allenai.org.s3.amazonaws.com/downloads/SciTailV1.1.zip", None, "SciTailV1.1.zip"),
    "SciTailV1.1", "https://allenai.org/data/scitail")
DATASETS = {d.name: d for d in (SNLI, SCITAIL)}


# ------------------------------------------------------------------------------------------------ minis
def build_snli_mini(root: Path) -> None:
    g = _Gen(121)
    rows = []
    for n, (split, a, y) in enumerate(_splits(g, 3)):
        s1, s2 = _nli_pair(g, a, MNLI_LABELS[y])
        gold = "-" if n % 50 == 49 else MNLI_LABELS[y]  # the real files hold unresolved pairs too
        rows.append((split, {"annotator_labels": [MNLI_LABELS[y]], "captionID": f"wiki{g.article(a):03d}",
                             "gold_label": gold, "pairID": f"wiki{a}{'ecn'[y]}{n}", "sentence1": s1,
                             "sentence2": s2}))
    for split, objs in _by_split(rows).items():
        with open(root / SNLI.files[split], "w", encoding="utf-8") as f:
            f.writelines(json.dumps(o) + "\n" for o in objs)


def build_scitail_mini(root: Path) -> None:
    g = _Gen(122)
    rows = []
    for split, a, y in _splits(g, 2):
        premise = g.text(a)
        hypothesis = g.span(premise) if y == 0 else g.span(g.text(g.same_article(a)))
        rows.append((split, (premise, hypothesis, SCITAIL.labels[y])))
    for split, items in _by_split(rows).items():
        path = root / SCITAIL.files[split]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join("\t".join(r) + "\n" for r in items), encoding="utf-8")


NLI_MINIS = {
    "snli": DatasetSpec("snli_mini", tuple(SNLI.files.values()), build_mini=build_snli_mini,
                        notes="SNLI jsonl layout, Wikipedia-excerpt text, GENERATED labels (span / negated span / "
                              "same-article span), 2% unresolved '-' rows"),
    "scitail": DatasetSpec("scitail_mini", tuple(SCITAIL.files.values()), build_mini=build_scitail_mini,
                           notes="SciTail tsv_format layout, Wikipedia-excerpt text, GENERATED labels (span vs "
                                 "same-article span)"),
}
