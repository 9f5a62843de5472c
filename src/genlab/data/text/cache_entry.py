"""Cache entries of prepared data: a folder published whole, with a manifest of its files' sizes and checksums.

An entry is built in a temporary folder beside its final name, its ``manifest.json`` (every file's size and CRC32,
plus the caller's metadata) written last, and renamed into place: an interrupted build leaves no entry. Before an
entry is read its files are checked against the manifest; a truncated or corrupted one is logged, removed and
rebuilt, never read as data. CRC32 (zlib, ~3 GB/s) catches truncation and flipped bytes at a fraction of sha256's
cost; the entry is not a security boundary (its contents are plain arrays, never code). Both checksum passes log
progress: a whole-size entry (Yelp-5: 1.1 GB, One Billion Word: 3.4 GB) is read back from disk when the page cache
no longer holds it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from genlab.data.text.progress import Progress
from genlab.errors import DataError

log = logging.getLogger("genlab")
MANIFEST = "manifest.json"
_verified: set[tuple] = set()  # entries (with their files' sizes and times) this process has checked


def crc32_file(path: Path, chunk: int = 1 << 24, progress: Progress | None = None) -> int:
    crc = 0
    with open(path, "rb") as f:
        while block := f.read(chunk):
            crc = zlib.crc32(block, crc)
            if progress:
                progress.advance(len(block))
    return crc


def file_stamp(root: Path, files: Sequence[str]) -> tuple:
    """(name, size, mtime_ns) of every input file: cheap, and changes whenever a file is replaced. Hashing the
    contents instead would cost every run a full read (~15 s for 13 GB); a copy that loses the times only
    costs one rebuild."""
    out = []
    for name in files:
        st = (Path(root) / name).stat()
        out.append((name, st.st_size, st.st_mtime_ns))
    return tuple(out)


def verified_meta(entry: Path) -> dict[str, Any] | None:
    """The metadata of a complete, intact entry; None when it is absent, or corrupt (then logged and removed)."""
    entry = Path(entry)
    if not entry.is_dir():
        return None
    try:
        payload = json.loads((entry / MANIFEST).read_text())
        files = {name: entry / name for name in payload["files"]}
        stamp = _stamp(entry, payload["files"])
        if stamp in _verified:
            return payload["meta"]
        check = Progress(f"verifying the cache entry {entry.name}", sum(size for size, _ in payload["files"].values()))
        for name, (size, crc) in payload["files"].items():
            if files[name].stat().st_size != size:
                raise ValueError(f"{name} is truncated or overwritten ({files[name].stat().st_size} bytes, "
                                 f"manifest: {size})")
            if crc32_file(files[name], progress=check) != crc:
                raise ValueError(f"{name} is corrupted (checksum differs from its manifest)")
        check.finish()
        meta = payload["meta"]
    except FileNotFoundError as err:
        _discard(entry, f"{Path(err.filename or MANIFEST).name} is missing")  # e.g. an interrupted copy
        return None
    except (OSError, ValueError, KeyError, TypeError) as err:
        _discard(entry, str(err))
        return None
    _verified.add(stamp)
    return meta


def _stamp(entry: Path, names: Sequence[str]) -> tuple:
    """The entry and its files' sizes and times: what :func:`verified_meta` remembers as checked."""
    return (str(entry), tuple((n, (entry / n).stat().st_size, (entry / n).stat().st_mtime_ns) for n in names))


def _discard(entry: Path, why: str) -> None:
    log.warning("cache %s is not usable (%s): rebuilding it.", entry, why)
    trash = Path(entry).with_name(f".{Path(entry).name}.discarded.{os.getpid()}")
    try:
        os.replace(entry, trash)
        shutil.rmtree(trash, ignore_errors=True)
    except OSError as err:
        raise DataError(f"cache {entry} is corrupt ({why}) and cannot be removed ({err}); delete it by hand.") from err


def build_entry(entry: Path, fill: Callable[[Path], dict[str, Any]]) -> None:
    """Run ``fill(folder)`` (it writes the files and returns the metadata) in a temporary folder; publish it whole.
    The checksums just computed count as this process's check of the entry, so a cold build reads each file once
    (a 3.3 GB One Billion Word entry is not hashed again on load); an entry found on disk is still checked."""
    entry = Path(entry)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=entry.parent, prefix=f".{entry.name}."))
    except OSError as err:
        raise DataError(f"cannot write the data cache under {entry.parent} ({err}); make it writable or point "
                        "paths.cache_dir= (or GENLAB_CACHE) at a writable folder.") from err
    try:
        try:
            meta = fill(tmp)
            written = sorted(tmp.iterdir())
            check = Progress(f"checksumming the cache entry {entry.name}", sum(p.stat().st_size for p in written))
            files = {p.name: [p.stat().st_size, crc32_file(p, progress=check)] for p in written}
            check.finish()
            with open(tmp / MANIFEST, "w") as f:  # last: its presence marks the entry complete
                json.dump({"format": 1, "files": files, "meta": meta}, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
        except OSError as err:
            raise DataError(f"writing the data cache {entry} failed ({err}); free disk space or point "
                            "paths.cache_dir= (or GENLAB_CACHE) at a writable folder with room.") from err
        try:
            os.replace(tmp, entry)
        except OSError:
            if verified_meta(entry) is None:  # not a lost race with an identical concurrent build
                raise
        else:
            _verified.add(_stamp(entry, files))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
