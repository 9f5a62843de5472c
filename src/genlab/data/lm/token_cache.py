"""Tokenise a corpus once; later loads memory-map the cached ids.

A cache entry is a folder ``<cache>/tokens/<dataset>-<key>/`` holding ``vocab.json`` and one ``<split>.npy``
(int32) per split, published whole with a size/checksum manifest (:mod:`genlab.data.text.cache_entry`): a crash
never leaves a half entry, and a damaged one is rebuilt. The key hashes the dataset name, every input file's path
relative to the dataset folder, size and mtime, the reader settings and the cache format: the same files give the
same key whichever tier, spelling or symlink named their folder, and a replaced file gives a new one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from genlab.data.lm.vocab import Vocab
from genlab.data.text.cache_entry import build_entry, file_stamp, verified_meta
from genlab.data.text.npy_stream import NpyWriter
from genlab.errors import DataError
from genlab.utils import stable_hash

CACHE_FORMAT = 2  # 2: manifest with checksums; the source tier left the key


def cache_key(dataset: str, root: Path, files: Sequence[str], settings: Mapping) -> str:
    return stable_hash(CACHE_FORMAT, dataset, file_stamp(root, files), sorted(settings.items()))


def load_or_build(
    cache_root: Path,
    dataset: str,
    key: str,
    build: Callable[[], tuple[Vocab, Mapping[str, np.ndarray | Iterable[np.ndarray]]]],
) -> tuple[Vocab, dict[str, np.ndarray], Path]:
    """Return (vocab, memory-mapped splits, entry folder), building the entry with ``build()`` when absent or
    damaged."""
    entry = Path(cache_root) / "tokens" / f"{dataset}-{key}"
    meta = verified_meta(entry)
    if meta is None:
        build_entry(entry, lambda folder: _fill(folder, *build()))
        meta = verified_meta(entry)
    return _read_entry(entry, meta)


def _fill(folder: Path, vocab: Vocab, splits: Mapping[str, np.ndarray | Iterable[np.ndarray]]) -> dict:
    lengths = {split: _save_ids(folder / f"{split}.npy", ids, len(vocab)) for split, ids in splits.items()}
    vocab.save(folder / "vocab.json")
    return {"vocab_size": len(vocab), "vocab_fingerprint": vocab.fingerprint(), "splits": lengths}


def _save_ids(path: Path, ids: np.ndarray | Iterable[np.ndarray], vocab_size: int) -> int:
    """Write ids (one array or a stream of chunks) as an int32 .npy file; return the length."""
    out = NpyWriter(path, "<i4")
    for chunk in (ids,) if isinstance(ids, np.ndarray) else ids:
        if len(chunk) and (np.min(chunk) < 0 or np.max(chunk) >= vocab_size):
            raise RuntimeError(f"{path.name}: ids outside [0, {vocab_size}) (reader bug)")
        out.append(chunk)
    return out.close()


def _read_entry(entry: Path, meta: dict) -> tuple[Vocab, dict[str, np.ndarray], Path]:
    try:
        vocab = Vocab.load(entry / "vocab.json")
        splits = {s: np.load(entry / f"{s}.npy", mmap_mode="r") for s in meta["splits"]}
    except (OSError, ValueError, KeyError) as err:
        raise DataError(f"token cache {entry} is corrupt ({err}); delete the folder and run again.") from err
    for s, n in meta["splits"].items():
        if splits[s].shape != (n,) or splits[s].dtype != np.int32:
            raise DataError(f"token cache {entry}/{s}.npy does not match its manifest; delete the folder and rerun.")
    if vocab.fingerprint() != meta["vocab_fingerprint"]:
        raise DataError(f"token cache {entry}: vocab.json does not match its manifest; delete the folder and rerun.")
    return vocab, splits, entry
