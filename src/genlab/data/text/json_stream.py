"""The elements of one array inside a JSON file's top-level object, streamed: ``{"data": [e0, e1, ...], ...}``.

Memory is bounded by the read buffer plus the largest element (a SQuAD article, ~0.1 MB), never by the file: the
file is decoded as UTF-8 in pieces and each element parsed with ``json.JSONDecoder.raw_decode``; a piece that
ends inside an element is extended and the element parsed again. A file that is not UTF-8 or not JSON of this
shape is one DataError naming the file and the byte offset.
"""

from __future__ import annotations

import codecs
import json
import os
from collections.abc import Iterator
from typing import Any

from genlab.errors import DataError

BUFFER_BYTES = 1 << 20
_WS = " \t\r\n"
_NEAR_END = 40  # a parse error this close to the buffer's end may be a token cut by the read (a number, `true`)


class _Reader:
    """A text buffer over the file; ``base`` = the file's byte offset of ``buf[0]``."""

    def __init__(self, path: str, f, buffer_bytes: int):
        self.path, self.f, self.size = path, f, buffer_bytes
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.buf, self.pos, self.base, self.read_bytes, self.eof, self.started = "", 0, 0, 0, False, False

    def more(self) -> bool:
        """Append the next piece of the file; False at its end."""
        if self.eof:
            return False
        self.drop()
        data = self.f.read(self.size)
        pending = len(self.decoder.getstate()[0])  # bytes of a sequence cut by the previous piece
        try:
            text = self.decoder.decode(data, final=not data)
        except UnicodeDecodeError as err:
            raise DataError(f"{self.path} is not valid UTF-8 text (byte offset {self.read_bytes - pending + err.start}:"
                            f" {err.reason}); convert it (e.g. iconv -t utf-8) or use the official file.") from err
        if text and not self.started:  # a byte-order mark may arrive over several one-byte reads
            self.started = True
            if text.startswith("\ufeff"):
                text, self.base = text[1:], len(codecs.BOM_UTF8)
        self.read_bytes += len(data)
        self.eof = not data
        self.buf += text
        return bool(data)

    def drop(self) -> None:
        """Forget the text before ``pos`` (counting its bytes)."""
        self.base += len(self.buf[:self.pos].encode())
        self.buf, self.pos = self.buf[self.pos:], 0

    def offset(self, pos: int) -> int:
        return self.base + len(self.buf[:pos].encode())

    def fail(self, what: str, pos: int | None = None) -> DataError:
        return DataError(f"{self.path} is not valid JSON of the expected shape at byte offset "
                         f"{self.offset(self.pos if pos is None else pos)}: {what}. Use the official file, or fix it.")

    def skip_ws(self) -> str:
        """The next non-space character (not consumed); '' at the end of the file."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _WS:
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            self.drop()
            if not self.more():
                return ""

    def expect(self, chars: str, what: str) -> str:
        c = self.skip_ws()
        if not c or c not in chars:
            raise self.fail(f"expected {what}, found {c!r}" if c else f"the file ends where {what} was expected")
        self.pos += 1
        return c

    def value(self, decoder: json.JSONDecoder) -> Any:
        """Parse one JSON value at ``pos``, reading more of the file while it is cut by the buffer's end."""
        self.skip_ws()
        piece = self.size
        try:
            while True:
                try:
                    obj, end = decoder.raw_decode(self.buf, self.pos)
                except json.JSONDecodeError as err:
                    cut = err.msg.startswith("Unterminated string") or len(self.buf) - err.pos <= _NEAR_END
                    self.size = max(piece, len(self.buf))  # an element spanning pieces: read geometrically more
                    if cut and self.more():
                        continue
                    ends = err.msg.startswith("Unterminated string") or not self.buf[err.pos:].strip()
                    raise self.fail(f"{err.msg}{' where the file ends (truncated?)' if ends else ''}",
                                    err.pos) from None
                if end == len(self.buf) and not self.eof and self.more():  # a number may go on in the next piece
                    continue
                self.pos = end
                return obj
        finally:
            self.size = piece


def iter_json_array(path: str | os.PathLike, key: str, buffer_bytes: int | None = None
                    ) -> Iterator[tuple[int, Any]]:
    """(byte offset, element) for each element of the array under ``key`` of the file's top-level object."""
    path = str(path)
    decoder = json.JSONDecoder()
    try:
        f = open(path, "rb")
    except OSError as err:
        raise DataError(f"cannot read {path} ({err}); check the file and data.path.") from err
    with f:
        r = _Reader(path, f, buffer_bytes or BUFFER_BYTES)
        r.more()
        r.expect("{", "a JSON object '{'")
        found = False
        if r.skip_ws() == "}":
            r.pos += 1
        else:
            while True:
                if r.skip_ws() != '"':
                    raise r.fail("expected a key string")
                name = r.value(decoder)
                r.expect(":", "':'")
                if name == key and not found:
                    found = True
                    r.expect("[", f"the '{key}' array '['")
                    if r.skip_ws() == "]":
                        r.pos += 1
                    else:
                        while True:
                            r.skip_ws()
                            r.drop()
                            at = r.base
                            yield at, r.value(decoder)
                            if r.expect(",]", "',' or ']'") == "]":
                                break
                else:
                    r.value(decoder)  # another key ("version"): parsed, not kept
                if r.expect(",}", "',' or '}'") == "}":
                    break
        if r.skip_ws():
            raise r.fail("unexpected text after the top-level object")
    if not found:
        raise DataError(f"{path} has no '{key}' array at the top level; use the official file.")
