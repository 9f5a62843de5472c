"""GLUE readers for the real TSV layouts of all nine tasks plus the diagnostic set (AX), and the submission
format of the GLUE server (XLNet paper §3.5).

Files follow the layout of the official GLUE download (one folder per task): ``train.tsv``, ``dev.tsv``,
``test.tsv``; MNLI has ``dev_matched.tsv``/``dev_mismatched.tsv``/``test_matched.tsv``/``test_mismatched.tsv``;
the diagnostic set is ``diagnostic/diagnostic.tsv`` (predicted with the MNLI model). Columns are addressed by
index exactly as the official processors do (e.g. MNLI text_a = column 8, text_b = column 9, label = last).
A row with too few columns or a label outside the task's label set is a DataError naming file and line.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from genlab.data.text.chunks import read_lines
from genlab.errors import DataError

csv.field_size_limit(sys.maxsize)  # QQP/MNLI parses can be long


@dataclass(frozen=True)
class Example:
    guid: str
    text_a: str
    text_b: str | None
    label: str | float | None  # str for classification, float for STS-B, None for unlabelled test rows


@dataclass(frozen=True)
class Split:
    """One TSV split: which columns hold text and label, whether a header row comes first."""

    file: str
    a: int
    b: int | None
    label: int | None  # None = unlabelled (test); -1 = last column
    header: bool = True
    index: int | None = None  # column with the GLUE test index (submission ids)


@dataclass(frozen=True)
class GlueTask:
    name: str
    labels: tuple[str, ...]  # empty = regression
    train: Split
    dev: dict[str, Split]   # split name -> layout (MNLI: matched / mismatched)
    test: dict[str, Split]  # split name -> layout; the value's submission file is SUBMISSION[split name]
    metric: str             # mcc | acc_f1 | corr | acc

    @property
    def is_regression(self) -> bool:
        return not self.labels


NLI2 = ("entailment", "not_entailment")
TASKS: dict[str, GlueTask] = {
    "cola": GlueTask("cola", ("0", "1"), Split("train.tsv", 3, None, 1, header=False),
                     {"dev": Split("dev.tsv", 3, None, 1, header=False)}, {"CoLA": Split("test.tsv", 1, None, None, index=0)},
                     "mcc"),
    "sst2": GlueTask("sst2", ("0", "1"), Split("train.tsv", 0, None, 1), {"dev": Split("dev.tsv", 0, None, 1)},
                     {"SST-2": Split("test.tsv", 1, None, None, index=0)}, "acc"),
    "mrpc": GlueTask("mrpc", ("0", "1"), Split("train.tsv", 3, 4, 0), {"dev": Split("dev.tsv", 3, 4, 0)},
                     {"MRPC": Split("test.tsv", 3, 4, None, index=0)}, "acc_f1"),
    "stsb": GlueTask("stsb", (), Split("train.tsv", 7, 8, -1), {"dev": Split("dev.tsv", 7, 8, -1)},
                     {"STS-B": Split("test.tsv", 7, 8, None, index=0)}, "corr"),
    "qqp": GlueTask("qqp", ("0", "1"), Split("train.tsv", 3, 4, 5), {"dev": Split("dev.tsv", 3, 4, 5)},
                    {"QQP": Split("test.tsv", 1, 2, None, index=0)}, "acc_f1"),
    "mnli": GlueTask("mnli", ("contradiction", "entailment", "neutral"), Split("train.tsv", 8, 9, -1),
                     {"dev_matched": Split("dev_matched.tsv", 8, 9, -1),
                      "dev_mismatched": Split("dev_mismatched.tsv", 8, 9, -1)},
                     {"MNLI-m": Split("test_matched.tsv", 8, 9, None, index=0),
                      "MNLI-mm": Split("test_mismatched.tsv", 8, 9, None, index=0),
                      "AX": Split("diagnostic/diagnostic.tsv", 1, 2, None, index=0)}, "acc"),
    "qnli": GlueTask("qnli", NLI2, Split("train.tsv", 1, 2, -1), {"dev": Split("dev.tsv", 1, 2, -1)},
                     {"QNLI": Split("test.tsv", 1, 2, None, index=0)}, "acc"),
    "rte": GlueTask("rte", NLI2, Split("train.tsv", 1, 2, -1), {"dev": Split("dev.tsv", 1, 2, -1)},
                    {"RTE": Split("test.tsv", 1, 2, None, index=0)}, "acc"),
    "wnli": GlueTask("wnli", ("0", "1"), Split("train.tsv", 1, 2, -1), {"dev": Split("dev.tsv", 1, 2, -1)},
                     {"WNLI": Split("test.tsv", 1, 2, None, index=0)}, "acc"),
}


def get_task(name: str) -> GlueTask:
    key = name.lower().replace("-", "").replace("_", "")
    if key not in TASKS:
        raise DataError(f"GLUE task {name!r} is unknown; use one of {sorted(TASKS)}.")
    return TASKS[key]


def read_tsv(path: Path) -> Iterator[list[str]]:
    """Rows of a GLUE TSV (tab-separated, no quoting, as the official processors read them), streamed."""
    if not path.is_file():
        raise DataError(f"GLUE file {path} does not exist; point data.path at the task folder of the GLUE download.")
    return csv.reader(read_lines(path), delimiter="\t", quotechar=None)


def read_split(task: GlueTask, root: Path, split: Split) -> list[Example]:
    return list(iter_split(task, root, split))


def iter_split(task: GlueTask, root: Path, split: Split) -> Iterator[Example]:
    """The examples of one split, streamed (memory holds a piece of the file, not the split)."""
    path = Path(root) / split.file
    rows = read_tsv(path)
    start = 1 if split.header else 0
    needed = max(c for c in (split.a, split.b, split.label if split.label != -1 else None, split.index)
                 if c is not None)
    n = 0
    for i, row in enumerate(islice(rows, start, None), start=start + 1):
        if len(row) <= needed or (split.label == -1 and len(row) < 2):
            raise DataError(f"{path}, line {i}: {len(row)} tab-separated columns, task {task.name} needs at least "
                            f"{needed + 1}; fix or delete the malformed row.")
        label = None
        if split.label is not None:
            raw = row[split.label].strip()
            if task.is_regression:
                try:
                    label = float(raw)
                except ValueError:
                    raise DataError(f"{path}, line {i}: STS-B score {raw!r} is not a number.") from None
            else:
                if raw not in task.labels:
                    raise DataError(f"{path}, line {i}: label {raw!r} is not one of {list(task.labels)} "
                                    f"(task {task.name}); wrong task folder, or a corrupt row.")
                label = raw
        guid = row[split.index] if split.index is not None else f"{split.file}-{i}"
        yield Example(guid, row[split.a], row[split.b] if split.b is not None else None, label)
        n += 1
    if not n:
        raise DataError(f"{path} holds no examples (an empty or truncated copy?); replace it with the "
                        "dataset's official file.")


def write_submission(path: Path, task: GlueTask, guids: list[str], predictions: list) -> None:
    """GLUE server format: header ``index\\tprediction``; label strings for classification, floats for STS-B."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("index\tprediction\n")
        for guid, pred in zip(guids, predictions):
            value = f"{float(pred):.3f}" if task.is_regression else task.labels[int(pred)]
            f.write(f"{guid}\t{value}\n")
