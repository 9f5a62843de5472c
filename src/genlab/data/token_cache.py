"""Tokenise a corpus once; later loads memory-map the cached ids.

A cache entry is a folder ``<cache>/tokens/<dataset>-<key>/`` holding ``vocab.json``, one ``<split>.npy`` (int32)
per split and ``meta.json``. The key hashes the dataset name, the source tier, every input file's name, size and
mtime, the reader settings and the cache format, so any change to the files or settings builds a new entry. The
folder is built under a temporary name and renamed into place, so a crash never leaves a half entry.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from genlab.data.vocab import Vocab
from genlab.errors import DataError
from genlab.utils import stable_hash

CACHE_FORMAT = 1


def file_stamp(root: Path, files: Sequence[str]) -> tuple:
    """(name, size, mtime_ns) of every input file: cheap, and changes whenever a file is replaced."""
    out = []
    for name in files:
        st = (Path(root) / name).stat()
        out.append((name, st.st_size, st.st_mtime_ns))
    return tuple(out)


def cache_key(dataset: str, source: str, root: Path, files: Sequence[str], settings: Mapping) -> str:
    return stable_hash(CACHE_FORMAT, dataset, source, file_stamp(root, files), sorted(settings.items()))


def load_or_build(
    cache_root: Path,
    dataset: str,
    key: str,
    build: Callable[[], tuple[Vocab, dict[str, np.ndarray]]],
) -> tuple[Vocab, dict[str, np.ndarray], Path]:
    """Return (vocab, memory-mapped splits, entry folder), building the entry with ``build()`` when absent."""
    entry = Path(cache_root) / "tokens" / f"{dataset}-{key}"
    if not (entry / "meta.json").is_file():
        vocab, splits = build()
        _write_entry(entry, vocab, splits)
    return _read_entry(entry)


def _write_entry(entry: Path, vocab: Vocab, splits: dict[str, np.ndarray]) -> None:
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=entry.parent, prefix=f".{entry.name}."))
    try:
        for split, ids in splits.items():
            ids = np.ascontiguousarray(ids, dtype=np.int32)
            if ids.size and (ids.min() < 0 or ids.max() >= len(vocab)):
                raise RuntimeError(f"{split}: ids outside [0, {len(vocab)}) (reader bug)")
            np.save(tmp / f"{split}.npy", ids)
        vocab.save(tmp / "vocab.json")
        meta = {
            "format": CACHE_FORMAT,
            "vocab_size": len(vocab),
            "vocab_fingerprint": vocab.fingerprint(),
            "splits": {s: int(len(v)) for s, v in splits.items()},
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))  # written last: marks the entry complete
        try:
            os.replace(tmp, entry)
        except OSError:
            if not (entry / "meta.json").is_file():  # not a lost race with an identical concurrent build
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _read_entry(entry: Path) -> tuple[Vocab, dict[str, np.ndarray], Path]:
    try:
        meta = json.loads((entry / "meta.json").read_text())
        vocab = Vocab.load(entry / "vocab.json")
        splits = {s: np.load(entry / f"{s}.npy", mmap_mode="r") for s in meta["splits"]}
    except (OSError, ValueError, KeyError) as err:
        raise DataError(f"token cache {entry} is corrupt ({err}); delete the folder and run again.") from err
    for s, n in meta["splits"].items():
        if splits[s].shape != (n,) or splits[s].dtype != np.int32:
            raise DataError(f"token cache {entry}/{s}.npy does not match meta.json; delete the folder and rerun.")
    if vocab.fingerprint() != meta["vocab_fingerprint"]:
        raise DataError(f"token cache {entry}: vocab.json does not match meta.json; delete the folder and rerun.")
    return vocab, splits, entry
