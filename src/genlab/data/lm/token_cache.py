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
import struct
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from genlab.data.lm.vocab import Vocab
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
    build: Callable[[], tuple[Vocab, Mapping[str, np.ndarray | Iterable[np.ndarray]]]],
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
        lengths = {split: _save_ids(tmp / f"{split}.npy", ids, len(vocab)) for split, ids in splits.items()}
        vocab.save(tmp / "vocab.json")
        meta = {
            "format": CACHE_FORMAT,
            "vocab_size": len(vocab),
            "vocab_fingerprint": vocab.fingerprint(),
            "splits": lengths,
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))  # written last: marks the entry complete
        try:
            os.replace(tmp, entry)
        except OSError:
            if not (entry / "meta.json").is_file():  # not a lost race with an identical concurrent build
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


NPY_HEADER_BYTES = 128


def _npy_header(n: int) -> bytes:
    """A version-1.0 .npy header for a 1-D little-endian int32 array of length ``n``, padded to a fixed size so
    the data can be streamed first and the length filled in afterwards."""
    fields = f"{{'descr': '<i4', 'fortran_order': False, 'shape': ({n},), }}"
    header = fields.ljust(NPY_HEADER_BYTES - 10 - 1) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1")


def _save_ids(path: Path, ids: np.ndarray | Iterable[np.ndarray], vocab_size: int) -> int:
    """Write ids (one array or a stream of chunks) as an int32 .npy file; return the length."""
    chunks = (ids,) if isinstance(ids, np.ndarray) else ids
    n = 0
    with open(path, "wb") as f:
        f.write(b"\0" * NPY_HEADER_BYTES)
        for chunk in chunks:
            chunk = np.ascontiguousarray(chunk, dtype="<i4")
            if chunk.size and (chunk.min() < 0 or chunk.max() >= vocab_size):
                raise RuntimeError(f"{path.name}: ids outside [0, {vocab_size}) (reader bug)")
            f.write(chunk.tobytes())
            n += len(chunk)
        f.seek(0)
        f.write(_npy_header(n))
    return n


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
