"""Multiple-choice examples (RACE questions, Story Cloze stories) streamed into the encoded-text cache and read back
one example at a time.

Each example is a few texts (RACE: the article, then what the layout needs of question and options; Story Cloze:
the story, then its two endings), tokenised in the encoding processes and stored as one cache row: the texts' ids
one after the other, and the values ``(label, extras..., length of each text)``, tagged with the example's id
(:func:`genlab.data.text.encoded_texts.encode_rows`). :class:`EncodedChoices` cuts a row back into its texts' ids
and lets ``make_item`` lay them out when a batch asks, so memory holds the pages in use, never a laid-out
``[N, choices, T]`` array (RACE at 512: ~9 GB for the whole set).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
from torch.utils.data import Dataset

from genlab.data.text.encoded_texts import EncodedRows, RowEncoder

T = TypeVar("T")


def reuse_last(encode: Callable[[str], Sequence[int]]) -> Callable[[str], Sequence[int]]:
    """``encode``, answering a text equal to the previous one from memory: a RACE article is shared by its ~3.5
    questions, which arrive one after the other."""
    last: list = [None, None]

    def run(text: str) -> Sequence[int]:
        if text != last[0]:
            last[:] = text, encode(text)
        return last[1]

    return run


def texts_encoder(encode: Callable[[str], Sequence[int]], texts: Callable[[T], Sequence[str]],
                  values: Callable[[T], Sequence[float]], tag: Callable[[T], str]) -> RowEncoder:
    """Example -> (its texts' ids one after the other, ``values(example)`` then each text's length, its tag); the
    first text (the one examples share) through :func:`reuse_last`."""
    first = reuse_last(encode)

    def run(example: T) -> tuple:
        parts = texts(example)
        ids = [list(first(parts[0])), *(list(encode(t)) for t in parts[1:])]
        return ([i for part in ids for i in part],), (*values(example), *map(len, ids)), tag(example)

    return run


class EncodedChoices(Dataset):
    """A split read lazily from its cache entry (rows written by :func:`texts_encoder` with values ``(label,
    *extras)``). Item ``i`` is ``make_item(texts' ids)`` plus ``labels``, each extra by name, ``qid`` (the tag) and
    ``index`` (``i``); ``order`` (default: the entry's rows in order) picks the rows that make the split, e.g. the
    Story Cloze release's permutation."""

    def __init__(self, rows: EncodedRows, make_item: Callable[[list[list[int]]], dict[str, Any]],
                 extras: Sequence[str] = (), order: np.ndarray | None = None):
        self.rows, self.make_item, self.extras = rows, make_item, tuple(extras)
        self.order = np.arange(len(rows)) if order is None else np.asarray(order)

    def __len__(self) -> int:
        return len(self.order)

    def texts(self, i: int) -> list[list[int]]:
        row = int(self.order[i])
        ids, lengths = self.rows.row(row).tolist(), self.rows.values[row, 1 + len(self.extras):].astype(np.int64)
        ends = np.cumsum(lengths).tolist()
        return [ids[end - n:end] for n, end in zip(lengths.tolist(), ends)]

    @property
    def labels(self) -> np.ndarray:
        return self.rows.values[self.order, 0].astype(np.int64)

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = int(self.order[i])
        values = self.rows.values[row]
        return {**self.make_item(self.texts(i)), "labels": int(values[0]),
                **{name: int(values[1 + k]) for k, name in enumerate(self.extras)}, "qid": self.rows.tag(row),
                "index": i}
