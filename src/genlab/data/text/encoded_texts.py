"""Tokenised texts and examples of a finetuning or QA dataset, encoded once over ``data.num_proc`` processes and
cached, read back through memory maps.

Encoding (tokenising every text, and for SQuAD aligning each piece to its characters) is what preparing a
finetuning split costs; what a layout does with the ids afterwards (truncate, pad, cut into windows) is cheap and
stays per run, so changing ``max_seq_len`` or ``doc_stride`` reuses the entry. :func:`encode_rows` streams rows
(an example, a text) through :func:`genlab.data.text.parallel.ordered_map` in pieces and appends each piece's
arrays to the entry's ``.npy`` files as it comes back, so the build holds a few pieces, not the dataset, and the
result is the same for any process count. The entry is a manifest-checked cache entry
(:mod:`genlab.data.text.cache_entry`, as the language-model token cache): published whole, verified before use,
rebuilt with a message when truncated or corrupted. Its arrays are memory-mapped: a dataset indexes them lazily and
DataLoader workers share the pages. :func:`encode_texts` keys an entry on distinct texts themselves (not the
folder they came from), the encoder's identity (tokenizer fingerprint, lower-casing, what is encoded) and the
fields' names; a streamed split (:func:`encode_rows`) on its caller's key (its files' stamps and the encoder).
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain, islice
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from genlab.data.sources.tiers import DEFAULT_CACHE
from genlab.data.text.cache_entry import build_entry, verified_meta
from genlab.data.text.npy_stream import NpyWriter
from genlab.data.text.parallel import ordered_map, resolve_num_proc
from genlab.data.text.progress import Progress
from genlab.errors import DataError
from genlab.utils import stable_hash

CACHE_FORMAT = 2  # 2: rows with per-row values and tags, streamed
PIECE_TEXTS = 2000  # rows per piece handed to a worker: large enough to amortise the hand-over
T = TypeVar("T")
Encoder = Callable[[str], Sequence[Sequence[int]]]  # text -> one int sequence per field, all of one length
# row -> (one int sequence per field, all of one length; per-row numbers; a tag such as an example id, or None)
RowEncoder = Callable[[Any], tuple[Sequence[Sequence[int]], Sequence[float], str | None]]


def tokenizer_identity(tok: object) -> tuple:
    """What decides a tokenizer's output: its class, its fingerprint and its lower-casing."""
    return type(tok).__name__, getattr(tok, "identity", None), getattr(tok, "lower", None)


class EncodedRows:
    """Per row, its fields (int32, e.g. ``ids`` or ``ids``/``starts``/``ends``), its ``values`` (float64, e.g. a
    label and the length of a pair's first text) and, when written, its tag; all memory-mapped from the entry.
    Pickling (a spawned DataLoader worker) sends the entry's path, and the worker maps the same files."""

    def __init__(self, entry: Path, fields: Sequence[str]):
        self.entry, self.names = Path(entry), tuple(fields)
        self._open()

    def _open(self) -> None:
        try:
            self.offsets = np.load(self.entry / "offsets.npy", mmap_mode="r", allow_pickle=False)
            self.fields = {n: np.load(self.entry / f"{n}.npy", mmap_mode="r", allow_pickle=False) for n in self.names}
            self.values = np.load(self.entry / "values.npy", mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as err:
            raise DataError(f"encoded-text cache {self.entry} is unreadable ({err}); delete the folder and run "
                            "again.") from err
        if len(self.offsets) != len(self.values) + 1 or any(len(c) != self.offsets[-1] for c in self.fields.values()):
            raise DataError(f"encoded-text cache {self.entry} is inconsistent; delete the folder and run again.")
        self._tag_text: np.ndarray | None = None  # tags.txt mapped, and its line ends, on the first tag(i)
        self._tag_ends: np.ndarray | None = None

    @classmethod
    def in_memory(cls, rows: Iterable, encode: RowEncoder, fields: Sequence[str] = ("ids",),
                  n_values: int = 0) -> EncodedRows:
        """The same rows encoded here into arrays, without an entry (a handful of rows: a test, one example)."""
        lengths, cols, values, _ = _encode_piece(encode, len(fields), n_values)(list(rows))
        self = cls.__new__(cls)
        self.entry, self.names, self.values = None, tuple(fields), values
        self.offsets, self.fields = np.concatenate([[0], np.cumsum(lengths)]), dict(zip(self.names, cols))
        return self

    def __getstate__(self) -> dict:
        return {"entry": self.entry, "names": self.names} if self.entry else dict(self.__dict__)

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if self.entry:
            self._open()

    def __len__(self) -> int:
        return len(self.values)

    def row(self, i: int, name: str = "ids") -> np.ndarray:
        return self.fields[name][self.offsets[i]:self.offsets[i + 1]]

    def tag(self, i: int) -> str:
        """Row ``i``'s tag, read through a memory map of the tags (a batch's question ids; nothing held per row but
        the position of its line end)."""
        if self._tag_ends is None:
            path = self.entry / "tags.txt"
            text = np.memmap(path, np.uint8, mode="r") if path.stat().st_size else np.zeros(0, np.uint8)
            self._tag_text, self._tag_ends = text, np.flatnonzero(text == ord("\n"))
            if len(self._tag_ends) != len(self):
                raise DataError(f"encoded-text cache {self.entry} has {len(self._tag_ends)} tags for {len(self)} "
                                "rows; delete the folder and run again.")
        start = int(self._tag_ends[i - 1]) + 1 if i else 0
        return bytes(self._tag_text[start:self._tag_ends[i]]).decode("utf-8")

    def tags(self) -> list[str]:
        """Every row's tag (read from the entry on request: only a submission file needs them)."""
        with open(self.entry / "tags.txt", encoding="utf-8", newline="") as f:
            return f.read().split("\n")[:-1]

    def iter_tags(self) -> Iterator[str]:
        """Every row's tag in order, one line at a time (memory: one tag, whatever the entry's size)."""
        with open(self.entry / "tags.txt", encoding="utf-8", newline="\n") as f:
            for line in f:
                yield line[:-1]


def _encode_piece(encode: RowEncoder, n_fields: int, n_values: int) -> Callable[[list], tuple]:
    def run(rows: list) -> tuple:
        out = [encode(r) for r in rows]
        lengths = np.array([len(f[0]) for f, _, _ in out], dtype=np.int64)
        total = int(lengths.sum())
        cols = [np.fromiter(chain.from_iterable(f[k] for f, _, _ in out), dtype=np.int64, count=total)
                for k in range(n_fields)]
        if any(c.size and (c.min() < -2**31 or c.max() >= 2**31) for c in cols):
            raise RuntimeError("an encoder returned a value that does not fit int32 (encoder bug)")
        values = np.array([v for _, v, _ in out], dtype=np.float64).reshape(len(out), n_values)
        tags = "".join(f"{t}\n" for _, _, t in out if t is not None)
        if tags.count("\n") not in (0, len(out)):
            raise RuntimeError("a tag holds a newline, or only some rows have one (encoder bug)")
        return lengths, [c.astype(np.int32) for c in cols], values, tags  # int32 ids and offsets: half the disk

    return run


def _pieces(items: Iterable[T], size: int) -> Iterator[list[T]]:
    items = iter(items)
    while piece := list(islice(items, size)):
        yield piece


def encode_rows(rows: Iterable[T], encode: RowEncoder, key: object, cache_dir: str | Path | None, what: str,
                fields: Sequence[str] = ("ids",), n_values: int = 0, num_proc: int | None = None,
                progress: tuple[int, Callable[[T], int]] | None = None) -> EncodedRows:
    """The entry for ``key`` (which must name the rows' source and ``encode``'s identity), built when absent by
    streaming ``rows`` (consumed only then) through ``encode``; ``what`` names the job in log lines and the entry's
    folder. ``progress``: (total bytes, bytes of a row) to log progress here (a reader that logs its own: None)."""
    cache = Path(cache_dir).expanduser() if cache_dir else DEFAULT_CACHE
    entry = cache / "encoded" / f"{what.replace(' ', '_')}-{stable_hash(CACHE_FORMAT, key, tuple(fields), n_values)}"
    if verified_meta(entry) is None:

        def fill(folder: Path) -> dict:
            report = Progress(f"encoding {what}", progress[0]) if progress else None
            offsets = NpyWriter(folder / "offsets.npy", "<i8")
            offsets.append(np.zeros(1))
            columns = [NpyWriter(folder / f"{name}.npy", "<i4") for name in fields]
            values = NpyWriter(folder / "values.npy", "<f8", (n_values,))
            end = 0
            with open(folder / "tags.txt", "w", encoding="utf-8", newline="") as tags:
                for piece, (lengths, cols, vals, tag_text) in _zip_pieces(rows, encode, len(fields), n_values,
                                                                           num_proc):
                    offsets.append(end + np.cumsum(lengths))
                    end += int(lengths.sum())
                    for writer, col in zip(columns, cols):
                        writer.append(col)
                    values.append(vals)
                    tags.write(tag_text)
                    if report:
                        report.advance(sum(progress[1](r) for r in piece))
            if report:
                report.finish()
            n = values.close()
            offsets.close()
            for writer in columns:
                writer.close()
            return {"what": what, "rows": n, "fields": list(fields)}

        build_entry(entry, fill)
    return EncodedRows(entry, fields)


def _zip_pieces(rows: Iterable, encode: RowEncoder, n_fields: int, n_values: int,
                num_proc: int | None) -> Iterator[tuple[list, tuple]]:
    """(piece, its encoded arrays) in order, the pieces encoded over ``num_proc`` processes."""
    procs = resolve_num_proc(num_proc)
    held: deque[list] = deque()  # the pieces in flight (at most 2 * procs + 1), to pair each with its result

    def remember(pieces: Iterable[list]) -> Iterator[list]:
        for piece in pieces:
            held.append(piece)
            yield piece

    for result in ordered_map(_encode_piece(encode, n_fields, n_values), remember(_pieces(rows, PIECE_TEXTS)), procs):
        yield held.popleft(), result


class EncodedTexts:
    """Per distinct text, its fields (e.g. ``ids``, or ``ids``/``starts``/``ends``) as int32 arrays (memory-mapped)."""

    def __init__(self, texts: Sequence[str], rows: EncodedRows):
        self.index = {t: i for i, t in enumerate(texts)}
        self.rows = rows

    def field(self, text: str, name: str = "ids") -> np.ndarray:
        return self.rows.row(self.index[text], name)

    def ids(self, text: str) -> list[int]:
        return self.field(text).tolist()


def texts_digest(texts: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for t in texts:
        digest.update(t.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()


def encode_texts(texts: Iterable[str], encode: Encoder, identity: object, cache_dir: str | Path | None, what: str,
                 fields: Sequence[str] = ("ids",), num_proc: int | None = None) -> EncodedTexts:
    """The distinct ``texts`` encoded by ``encode`` (whose output ``identity`` names), from the cache when an entry
    for the same texts and encoder exists; ``what`` names the job in log lines and the entry's folder."""
    distinct = list(dict.fromkeys(texts))
    size = sum(len(t.encode("utf-8", "surrogatepass")) for t in distinct)
    rows = encode_rows(distinct, lambda t: (encode(t), (), None), (identity, len(distinct), texts_digest(distinct)),
                       cache_dir, what, fields, num_proc=num_proc,
                       progress=(size, lambda t: len(t.encode("utf-8", "surrogatepass"))))
    if len(rows) != len(distinct):
        raise DataError(f"encoded-text cache {rows.entry} does not match its texts; delete the folder and run again.")
    return EncodedTexts(distinct, rows)


def tokenize_texts(texts: Iterable[str], tok, cache_dir: str | Path | None, what: str,
                   num_proc: int | None = None) -> EncodedTexts:
    """:func:`encode_texts` with a tokenizer's ``encode`` (ids only)."""
    return encode_texts(texts, lambda t: (tok.encode(t),), tokenizer_identity(tok), cache_dir, what,
                        num_proc=num_proc)
