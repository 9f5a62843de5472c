"""Benchmark archives read as streams: a zip member cut into its splits a piece at a time, and members extracted
atomically (enwik8, text8, One Billion Word)."""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO

import numpy as np

from genlab.data.text.progress import Progress
from genlab.errors import DataError
from genlab.utils import atomic_write


def member_splits(archive: Path, member: str, splits_of: Callable[[int], list[tuple[str, int]]],
                  piece_bytes: int) -> Iterator[tuple[str, np.ndarray]]:
    """(split, bytes) pieces of ``member`` in order, decompressed ``piece_bytes`` at a time and cut where
    ``splits_of(member size)`` (name, size) pairs say (enwik8's 90M/5M/5M), so memory stays at a piece (the 100 MB
    member is never held whole). The archive's CRC is checked when the last piece is read."""
    try:
        with zipfile.ZipFile(archive) as z, z.open(member) as src:
            total = z.getinfo(member).file_size
            progress = Progress(f"preparing {member} from {archive.name}", total)
            for split, size in splits_of(total):
                while size:
                    block = src.read(min(size, piece_bytes))
                    if not block:
                        raise EOFError(f"{member} ends before the {total} bytes its header gives")
                    size -= len(block)
                    yield split, np.frombuffer(block, dtype=np.uint8)
                    progress.advance(len(block))
            src.read()  # reaches the end of the stream, where zipfile compares the CRC
            progress.finish()
    except FileNotFoundError as err:
        raise DataError(f"{archive} is missing; download it or point data.path at a folder holding it.") from err
    except (zipfile.BadZipFile, KeyError, OSError, EOFError) as err:
        raise DataError(f"{archive} is corrupt or truncated ({err}); delete it and download it again.") from err


@contextmanager
def split_writers(root: Path, names: Sequence[str]) -> Iterator[dict[str, IO[bytes]]]:
    """``<name>.txt`` for each of ``names`` open for writing, published together when the block succeeds and none of them
    when it fails (e.g. a CRC error found at the archive's end), so a run never sees a partial split."""
    with ExitStack() as stack:
        yield {s: stack.enter_context(atomic_write(Path(root) / f"{s}.txt", "wb")) for s in names}


def extract_members(archive: Path, wanted: dict[str, str], root: Path) -> None:
    """Extract ``wanted`` (member path -> destination relative to ``root``) from a zip or tar archive, atomically
    per file, streaming (the LM1B tarball is 1.7 GB)."""
    import shutil
    import tarfile

    root = Path(root)
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as z:
                missing = sorted(set(wanted) - set(z.namelist()))
                if missing:
                    raise DataError(f"{archive} lacks {', '.join(missing[:3])}; it is not the expected archive.")
                for member, dest in wanted.items():
                    with z.open(member) as src, atomic_write(root / dest, "wb") as out:
                        shutil.copyfileobj(src, out, 1 << 20)
            return
        with tarfile.open(archive, "r:*") as t:
            found = set()
            for info in t:
                name = os.path.normpath(info.name)
                if name in wanted and info.isfile():
                    src = t.extractfile(info)
                    assert src is not None
                    with src, atomic_write(root / wanted[name], "wb") as out:
                        shutil.copyfileobj(src, out, 1 << 20)
                    found.add(name)
        missing = sorted(set(wanted) - found)
        if missing:
            raise DataError(f"{archive} lacks {', '.join(missing[:3])}; it is not the expected archive.")
    except (zipfile.BadZipFile, tarfile.TarError, KeyError, EOFError, OSError) as err:
        raise DataError(f"{archive} is corrupt or truncated ({err}); delete it and download it again.") from err
