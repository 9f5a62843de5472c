"""Multiple-choice examples (RACE questions, Story Cloze stories) streamed into the encoded-text cache and read back
one example at a time.

Each example is a few texts (RACE: the article, then what the layout needs of question and options; Story Cloze:
the story, then its two endings), tokenised in the encoding processes and stored as one cache row: the texts' ids
one after the other, and the values ``(label, extras..., shared, length of each text)``, tagged with the example's
id (:func:`genlab.data.text.encoded_texts.encode_rows`). The first text is stored once: a row whose first text an
earlier row holds (a RACE article read with its ~3.5 questions; :func:`share_first_text`) stores none and names
that row in ``shared`` (-1: its own). :class:`EncodedChoices` cuts a row back into its texts' ids and lets
``make_item`` lay them out when a batch asks, so memory holds the pages in use, never a laid-out
``[N, choices, T]`` array (RACE at 512: ~9 GB for the whole set).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np
from torch.utils.data import Dataset

from genlab.data.text.distinct import with_earlier_row
from genlab.data.text.encoded_texts import EncodedRows, RowEncoder

T = TypeVar("T")


def share_first_text(examples: Iterable[T], texts: Callable[[T], Sequence[str]]) -> Iterator[tuple[T, int]]:
    """Each example with the row of the first earlier example whose first text is the same, or -1 (the rows
    :func:`texts_encoder` encodes)."""
    return with_earlier_row(examples, lambda example: texts(example)[0])


def texts_encoder(encode: Callable[[str], Sequence[int]], texts: Callable[[T], Sequence[str]],
                  values: Callable[[T], Sequence[float]], tag: Callable[[T], str]) -> RowEncoder:
    """(example, row sharing its first text or -1) -> (its texts' ids one after the other, the first left out when
    shared; ``values(example)``, the shared row, then each stored text's length; its tag)."""

    def run(item: tuple[T, int]) -> tuple:
        example, shared = item
        parts = texts(example)
        ids = [[] if shared >= 0 else list(encode(parts[0])), *(list(encode(t)) for t in parts[1:])]
        return ([i for part in ids for i in part],), (*values(example), shared, *map(len, ids)), tag(example)

    return run


class EncodedChoices(Dataset):
    """A split read lazily from its cache entry (rows of :func:`share_first_text` written by :func:`texts_encoder`
    with values ``(label, *extras)``). Item ``i`` is ``make_item(texts' ids)`` plus ``labels``, each extra by
    name, ``qid`` (the tag) and ``index`` (``i``); ``order`` (default: the entry's rows in order) picks the rows
    that make the split, e.g. the Story Cloze release's permutation."""

    def __init__(self, rows: EncodedRows, make_item: Callable[[list[list[int]]], dict[str, Any]],
                 extras: Sequence[str] = (), order: np.ndarray | None = None):
        self.rows, self.make_item, self.extras = rows, make_item, tuple(extras)
        self.order = np.arange(len(rows)) if order is None else np.asarray(order)

    def __len__(self) -> int:
        return len(self.order)

    def texts(self, i: int) -> list[list[int]]:
        row, k = int(self.order[i]), 1 + len(self.extras)  # values: label, extras, shared row, lengths
        ids, lengths = self.rows.row(row).tolist(), self.rows.values[row, k + 1:].astype(np.int64)
        ends = np.cumsum(lengths).tolist()
        texts = [ids[end - n:end] for n, end in zip(lengths.tolist(), ends)]
        shared = int(self.rows.values[row, k])
        if shared >= 0:  # the first text is stored in the earlier row that met it first
            texts[0] = self.rows.row(shared)[:int(self.rows.values[shared, k + 1])].tolist()
        return texts

    @property
    def labels(self) -> np.ndarray:
        return self.rows.values[self.order, 0].astype(np.int64)

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = int(self.order[i])
        values = self.rows.values[row]
        return {**self.make_item(self.texts(i)), "labels": int(values[0]),
                **{name: int(values[1 + k]) for k, name in enumerate(self.extras)}, "qid": self.rows.tag(row),
                "index": i}
