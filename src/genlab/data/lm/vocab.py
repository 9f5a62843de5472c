"""Symbol vocabularies for language modelling (word, char, byte), built exactly as the Transformer-XL code does.

Frequency order (the Transformer-XL code's ``Vocab``): the specials first, then ``Counter.most_common()`` over the
counted files, where each line is stripped and split on whitespace and end-of-line markers are not counted. Equal counts
keep their first-occurrence order (Python 3 ``Counter`` plus a stable sort), so the ids are reproducible.

First-appearance order (MoS / AWD-LSTM ``data.py``): ids in the order symbols are first met in train, then
valid, then test, with ``<eos>`` counted inline at the end of each line.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Literal

import numpy as np

from genlab.data.text.chunks import Piece, decode_piece, line_pieces, split_lines, total_bytes
from genlab.data.text.parallel import ordered_map
from genlab.data.text.progress import Progress
from genlab.errors import DataError
from genlab.utils import atomic_write, stable_hash

Order = Literal["frequency", "first_appearance"]
ORDERS = ("frequency", "first_appearance")
FORMAT_VERSION = 1


@dataclass
class Vocab:
    """An ordered list of symbols; id = position. ``unk`` (if set) receives every out-of-vocabulary symbol."""

    symbols: list[str]
    unk: str | None = None
    specials: tuple[str, ...] = ()
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.symbols = list(self.symbols)
        self.specials = tuple(self.specials)
        self._index = {s: i for i, s in enumerate(self.symbols)}
        if len(self._index) != len(self.symbols):
            dup = next(s for s in self.symbols if self.symbols.count(s) > 1)
            raise DataError(f"vocabulary has the symbol {dup!r} twice; each symbol must appear once.")
        if self.unk is not None and self.unk not in self._index:
            raise DataError(f"vocabulary declares unk={self.unk!r} but does not contain it.")

    # ------------------------------------------------------------------ lookup
    def __len__(self) -> int:
        return len(self.symbols)

    def __contains__(self, sym: str) -> bool:
        return sym in self._index

    def get(self, sym: str, default: int | None = None) -> int | None:
        """Id of ``sym`` without the unk fallback."""
        return self._index.get(sym, default)

    def index(self, sym: str) -> int:
        idx = self._index.get(sym)
        if idx is None:
            if self.unk is None:
                raise KeyError(sym)
            return self._index[self.unk]
        return idx

    @property
    def unk_id(self) -> int | None:
        return None if self.unk is None else self._index[self.unk]

    def encode(self, tokens: Sequence[str], where: str = "input") -> np.ndarray:
        """Ids of ``tokens`` as int32 (one dict lookup per token). OOV -> ``unk``, or a DataError without one."""
        miss = -1 if self.unk is None else self._index[self.unk]
        ids = np.array(list(map(self._index.get, tokens, repeat(miss))), dtype=np.int32)
        if self.unk is None and len(ids) and ids.min() < 0:
            bad = tokens[int(np.argmin(ids))]
            raise DataError(
                f"{where}: symbol {bad!r} is not in the vocabulary ({len(self)} symbols, no unk symbol). "
                "Build the vocabulary from files that contain it, or use a corpus with a closed vocabulary."
            )
        return ids

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.symbols[int(i)] for i in ids]

    # ------------------------------------------------------------------ identity
    def fingerprint(self) -> str:
        """Stable hash of the id -> symbol map; differs whenever any id would map to another symbol."""
        return stable_hash("vocab", FORMAT_VERSION, tuple(self.symbols), self.unk, length=32)

    def save(self, path: str | os.PathLike) -> None:
        payload = {
            "format": "genlab.vocab",
            "version": FORMAT_VERSION,
            "unk": self.unk,
            "specials": list(self.specials),
            "fingerprint": self.fingerprint(),
            "symbols": self.symbols,
        }
        with atomic_write(path, "w") as f:
            json.dump(payload, f, ensure_ascii=False)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Vocab:
        try:
            with open(path, encoding="utf-8") as f:
                payload = json.load(f)
            vocab = cls(payload["symbols"], unk=payload["unk"], specials=tuple(payload["specials"]))
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise DataError(f"cannot read the vocabulary file {path} ({err}); delete it to rebuild it.") from err
        if payload.get("fingerprint") not in (None, vocab.fingerprint()):
            raise DataError(f"vocabulary file {path} fails its fingerprint check (edited or corrupt); delete it.")
        return vocab

    # ------------------------------------------------------------------ building
    @classmethod
    def from_counter(
        cls,
        counter: Counter,
        specials: Sequence[str] = (),
        order: Order = "frequency",
        min_freq: int = 0,
        max_size: int | None = None,
        unk: str | None = None,
    ) -> Vocab:
        """Specials, then the counted symbols (``counter`` must have been filled in corpus order)."""
        if order not in ORDERS:
            raise DataError(f"vocab order {order!r} is not one of {ORDERS}.")
        symbols = list(specials)
        seen = set(symbols)
        if order == "frequency":
            ranked = counter.most_common(max_size)
        else:
            ranked = list(counter.items())[:max_size] if max_size else list(counter.items())
        for sym, cnt in ranked:
            if cnt < min_freq:
                if order == "frequency":
                    break  # most_common is sorted: nothing below passes either
                continue
            if sym not in seen:
                symbols.append(sym)
                seen.add(sym)
        return cls(symbols, unk=unk, specials=tuple(specials))


@dataclass(frozen=True)
class WordCounter:
    """Counts of the whitespace tokens of one piece of a file, in first-appearance order (one worker's share)."""

    eos: str | None = None  # counted once per line when given
    lower: bool = False

    def __call__(self, piece: Piece) -> tuple[Counter, int]:
        text = decode_piece(piece)
        text = text.lower() if self.lower else text
        counter: Counter = Counter()
        if self.eos is None:
            counter.update(text.split())
        else:
            for line in split_lines(text):
                toks = line.split()
                toks.append(self.eos)
                counter.update(toks)
        return counter, len(piece.data)


def build_word_vocab(
    files: Sequence[str | os.PathLike],
    specials: Sequence[str] = ("<eos>",),
    order: Order = "frequency",
    eos: str = "<eos>",
    unk: str | None = None,
    min_freq: int = 0,
    max_size: int | None = None,
    lower: bool = False,
    num_proc: int = 1,
) -> Vocab:
    """Word vocabulary from text files (Transformer-XL or MoS order), counted in bounded pieces over ``num_proc``
    processes; the counts are merged in file order, so ties and first-appearance order do not depend on it."""
    counter: Counter = Counter()
    progress = Progress("counting words for the vocabulary", total_bytes(files))
    # frequency order never counts the <eos> markers; first-appearance order meets them inline
    count = WordCounter(eos if order == "first_appearance" else None, lower)
    pieces = (piece for path in files for piece in line_pieces(path))
    for part, n_bytes in ordered_map(count, pieces, num_proc):
        counter.update(part)
        progress.advance(n_bytes)
    progress.finish()
    if not counter:
        raise DataError(f"no tokens in {', '.join(map(str, files))}: the corpus is empty. Check the files.")
    if unk is not None and unk not in counter and unk not in specials:
        specials = (*specials, unk)
    return Vocab.from_counter(counter, specials, order=order, min_freq=min_freq, max_size=max_size, unk=unk)


def build_value_vocab(
    streams: Iterable[np.ndarray], n_values: int, names: Sequence[str], specials: Sequence[str] = ()
) -> tuple[Vocab, np.ndarray]:
    """Frequency-ordered vocabulary over small integer symbols (bytes, characters), vectorised over the corpus.

    ``streams`` hold raw symbol values in [0, n_values) in corpus order (any re-iterable: they are read again only to
    break ties; ``readers.ParsedValues`` parses files piece by piece on each pass) and ``names[v]`` is the printed
    symbol of value v. Ties keep first-occurrence order, as ``Counter.most_common`` does. Returns the vocabulary and the
    value -> id lookup table (-1 for values never seen).
    """
    counts = np.zeros(n_values, dtype=np.int64)
    for s in streams:
        counts += np.bincount(s, minlength=n_values)[:n_values]
    seen = np.flatnonzero(counts)
    if len(seen) == 0:
        raise DataError("no symbols in the corpus: it is empty. Check the files.")
    # first occurrence only decides among equal counts, so it is looked up for tied values alone
    first = np.zeros(n_values, dtype=np.int64)
    _, inverse, group = np.unique(counts[seen], return_inverse=True, return_counts=True)
    for v in seen[group[inverse] > 1]:
        first[v] = _first_position(streams, v)
    ranked = seen[np.lexsort((first[seen], -counts[seen]))]
    table = np.full(n_values, -1, dtype=np.int32)
    table[ranked] = np.arange(len(specials), len(specials) + len(ranked), dtype=np.int32)
    symbols = list(specials) + [names[v] for v in ranked]
    return Vocab(symbols, specials=tuple(specials)), table


def _first_position(streams: Iterable[np.ndarray], value: int) -> int:
    offset = 0
    for s in streams:
        hit = s == value
        if hit.any():
            return offset + int(hit.argmax())
        offset += len(s)
    raise ValueError(value)
