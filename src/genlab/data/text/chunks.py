"""Text files read in bounded, line-aligned pieces: the one way corpus preparation reads its inputs.

A piece ends at a newline (or at the end of the file), so no line and no UTF-8 sequence is cut in two, and memory
stays at a few pieces whatever the file size. :func:`decode_piece` turns a piece into text and names the file and
byte offset when it is binary or not UTF-8.
"""

from __future__ import annotations

import codecs
import io
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from genlab.data.text.progress import Progress
from genlab.errors import DataError

PIECE_BYTES = 1 << 20  # fixed, so the pieces (and the cache built from them) do not depend on the worker count
MAX_LINE_BYTES = 1 << 28  # a "line" longer than this is not line-oriented text


@dataclass(frozen=True)
class Piece:
    """``data`` of ``path`` starting at byte ``offset``; ``last`` marks the file's final piece."""

    path: str
    offset: int
    data: bytes
    last: bool


def line_pieces(path: str | os.PathLike, piece_bytes: int | None = None) -> Iterator[Piece]:
    """Pieces of about ``piece_bytes`` (default :data:`PIECE_BYTES`) bytes of ``path``, each ending at a newline
    or at the end of the file."""
    path, piece_bytes = str(path), piece_bytes or PIECE_BYTES
    offset, carry = 0, b""
    try:
        with open(path, "rb") as f:
            block = f.read(piece_bytes)
            while block:
                data = carry + block
                nxt = f.read(piece_bytes)
                cut = len(data) if not nxt else data.rfind(b"\n") + 1
                if cut == 0:
                    if len(data) > MAX_LINE_BYTES:
                        raise DataError(f"{path}: no line break in {len(data) >> 20} MB after byte {offset}; it is not "
                                        "line-oriented text (one sentence per line). Remove it or fix the glob.")
                    carry, block = data, nxt
                    continue
                yield Piece(path, offset, data[:cut], last=not nxt)
                offset, carry, block = offset + cut, data[cut:], nxt
    except OSError as err:
        raise DataError(f"cannot read {path} ({err}); check the file and data.path.") from err


def decode_piece(piece: Piece) -> str:
    """The piece as text; a NUL byte (binary file) or invalid UTF-8 is a DataError naming the file and offset."""
    return _decode(piece.path, piece.offset, piece.data, final=True)


def _decode(path: str, offset: int, data: bytes, final: bool) -> str:
    nul = data.find(b"\0")
    if nul >= 0:
        raise DataError(f"{path} is a binary file (NUL byte at offset {offset + nul}), not UTF-8 text; "
                        "remove it from the corpus folder or narrow the glob.")
    try:
        return codecs.getincrementaldecoder("utf-8")().decode(data, final=final)
    except UnicodeDecodeError as err:
        raise DataError(f"{path} is not valid UTF-8 text (byte offset {offset + err.start}: {err.reason}); "
                        "convert it (e.g. iconv -t utf-8) or remove it from the corpus.") from err


def read_lines(path: str | os.PathLike, progress: bool = True) -> Iterator[str]:
    """The lines of a text file with their line ends, as ``open(path, newline="")`` yields them (what ``csv.reader``
    wants), read in bounded pieces; a leading byte-order mark is dropped. A binary or non-UTF-8 file is a DataError
    naming the file and byte offset instead of a traceback. ``progress``: log bytes consumed, rate and time left
    while a long read runs (a caller whose per-line work dominates logs its own)."""
    report = Progress(f"reading {Path(path).name}", total_bytes([path])) if progress else None
    for piece in line_pieces(path):
        text = decode_piece(piece)
        yield from io.StringIO(text.removeprefix("\ufeff") if piece.offset == 0 else text, newline="")
        if report:
            report.advance(len(piece.data))
    if report:
        report.finish()


def split_lines(text: str) -> list[str]:
    """The lines of a piece (without their newlines): one per newline, plus an unterminated last line."""
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return lines


def sniff_text(paths: Sequence[Path], n_bytes: int = 1 << 16) -> None:
    """Check the start of every file before a step that would not say which file is bad (tokenizer training):
    an empty, binary or non-UTF-8 file is a DataError naming it. Encoding checks every byte later."""
    check_not_empty(paths)
    for p in paths:
        try:
            with open(p, "rb") as f:
                data = f.read(n_bytes)
        except OSError as err:
            raise DataError(f"cannot read {p} ({err}); check the file and data.path.") from err
        _decode(str(p), 0, data, final=len(data) < n_bytes)  # a sequence cut at n_bytes is not an error


def check_not_empty(paths: Sequence[Path]) -> None:
    """Every input file must hold some bytes: an empty shard is a broken download or a wrong glob."""
    for p in paths:
        if Path(p).stat().st_size == 0:
            raise DataError(f"{p} is empty (0 bytes): an empty shard is a truncated copy or a wrong glob. "
                            "Replace it with the real file or delete it.")


def total_bytes(paths: Sequence[str | os.PathLike]) -> int:
    total = 0
    for p in paths:
        try:
            total += Path(p).stat().st_size
        except OSError as err:
            raise DataError(f"cannot read {p} ({err}); check the file and data.path.") from err
    return total
