"""Tokenised texts of a finetuning or QA dataset, encoded once over ``data.num_proc`` processes and cached.

Encoding (tokenising every text, and for SQuAD aligning each piece to its characters) is what preparing a
finetuning split costs; what a layout does with the ids afterwards (truncate, pad, cut into windows) is cheap and
stays per run, so changing ``max_seq_len`` or ``doc_stride`` reuses the entry. The distinct texts are encoded in
pieces by :func:`genlab.data.text.parallel.ordered_map`, so the result is the same for any process count, with
progress through the ``genlab`` logger. The entry is a manifest-checked cache entry
(:mod:`genlab.data.text.cache_entry`, as the language-model token cache): published whole, verified before use,
rebuilt with a message when truncated or corrupted. Its key hashes the texts themselves (not the folder they came
from), the encoder's identity (tokenizer fingerprint, lower-casing, what is encoded) and the fields' names.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from itertools import chain
from pathlib import Path

import numpy as np

from genlab.data.sources.tiers import DEFAULT_CACHE
from genlab.data.text.cache_entry import build_entry, verified_meta
from genlab.data.text.parallel import ordered_map, resolve_num_proc
from genlab.data.text.progress import Progress
from genlab.errors import DataError
from genlab.utils import stable_hash

CACHE_FORMAT = 1
PIECE_TEXTS = 2000  # texts per piece handed to a worker: large enough to amortise the hand-over
Encoder = Callable[[str], Sequence[Sequence[int]]]  # text -> one int sequence per field, all of one length


def tokenizer_identity(tok: object) -> tuple:
    """What decides a tokenizer's output: its class, its fingerprint and its lower-casing."""
    return type(tok).__name__, getattr(tok, "identity", None), getattr(tok, "lower", None)


class EncodedTexts:
    """Per distinct text, its fields (e.g. ``ids``, or ``ids``/``starts``/``ends``) as int32 arrays (memory-mapped)."""

    def __init__(self, texts: Sequence[str], offsets: np.ndarray, fields: dict[str, np.ndarray]):
        self.index = {t: i for i, t in enumerate(texts)}
        self.offsets, self.fields = offsets, fields

    def field(self, text: str, name: str = "ids") -> np.ndarray:
        i = self.index[text]
        return self.fields[name][self.offsets[i]:self.offsets[i + 1]]

    def ids(self, text: str) -> list[int]:
        return self.field(text).tolist()


def _texts_digest(texts: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for t in texts:
        digest.update(t.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()


def _encode_piece(encode: Encoder, n_fields: int) -> Callable[[list[str]], tuple[np.ndarray, list[np.ndarray]]]:
    def run(texts: list[str]) -> tuple[np.ndarray, list[np.ndarray]]:
        rows = [encode(t) for t in texts]
        lengths = np.array([len(r[0]) for r in rows], dtype=np.int64)
        total = int(lengths.sum())
        cols = [np.fromiter(chain.from_iterable(r[k] for r in rows), dtype=np.int64, count=total)
                for k in range(n_fields)]
        if any(c.size and (c.min() < -2**31 or c.max() >= 2**31) for c in cols):
            raise RuntimeError("an encoder returned a value that does not fit int32 (encoder bug)")
        return lengths, [c.astype(np.int32) for c in cols]  # ids and character offsets: int32 halves the disk

    return run


def encode_texts(texts: Iterable[str], encode: Encoder, identity: object, cache_dir: str | Path | None, what: str,
                 fields: Sequence[str] = ("ids",), num_proc: int | None = None) -> EncodedTexts:
    """The distinct ``texts`` encoded by ``encode`` (whose output ``identity`` names), from the cache when an entry
    for the same texts and encoder exists; ``what`` names the job in log lines and the entry's folder."""
    distinct = list(dict.fromkeys(texts))
    cache = Path(cache_dir).expanduser() if cache_dir else DEFAULT_CACHE
    key = stable_hash(CACHE_FORMAT, identity, tuple(fields), len(distinct), _texts_digest(distinct))
    entry = cache / "encoded" / f"{what.replace(' ', '_')}-{key}"
    if verified_meta(entry) is None:

        def fill(folder: Path) -> dict:
            procs = resolve_num_proc(num_proc)
            pieces = [distinct[i:i + PIECE_TEXTS] for i in range(0, len(distinct), PIECE_TEXTS)]
            progress = Progress(f"encoding {what}", sum(len(t.encode("utf-8", "surrogatepass")) for t in distinct))
            lengths, columns = [], [[] for _ in fields]
            for piece, (n, cols) in zip(pieces, ordered_map(_encode_piece(encode, len(fields)), pieces, procs)):
                lengths.append(n)
                for k, col in enumerate(cols):
                    columns[k].append(col)
                progress.advance(sum(len(t.encode("utf-8", "surrogatepass")) for t in piece))
            progress.finish()
            offsets = np.concatenate([[0], np.cumsum(np.concatenate(lengths or [np.zeros(0, np.int64)]))])
            np.save(folder / "offsets.npy", offsets.astype(np.int64))
            for name, col in zip(fields, columns):
                np.save(folder / f"{name}.npy", np.concatenate(col or [np.zeros(0, np.int32)]))
            return {"what": what, "texts": len(distinct), "fields": list(fields)}

        build_entry(entry, fill)
    try:
        offsets = np.load(entry / "offsets.npy", allow_pickle=False)
        columns = {name: np.load(entry / f"{name}.npy", mmap_mode="r", allow_pickle=False) for name in fields}
    except (OSError, ValueError) as err:
        raise DataError(f"encoded-text cache {entry} is unreadable ({err}); delete the folder and run again.") from err
    if len(offsets) != len(distinct) + 1 or any(len(c) != offsets[-1] for c in columns.values()):
        raise DataError(f"encoded-text cache {entry} does not match its texts; delete the folder and run again.")
    return EncodedTexts(distinct, offsets, columns)


def tokenize_texts(texts: Iterable[str], tok, cache_dir: str | Path | None, what: str,
                   num_proc: int | None = None) -> EncodedTexts:
    """:func:`encode_texts` with a tokenizer's ``encode`` (ids only)."""
    return encode_texts(texts, lambda t: (tok.encode(t),), tokenizer_identity(tok), cache_dir, what,
                        num_proc=num_proc)
