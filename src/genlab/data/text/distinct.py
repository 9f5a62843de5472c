"""Distinct texts of a stream, remembered by a 128-bit digest instead of the text (a paragraph, premise or article
repeated across many rows is kept once while memory holds 16 bytes per distinct text)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator


def text_digest(text: str) -> bytes:
    """16 bytes naming ``text`` (lone surrogates kept, so any Python string has one)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def first_occurrences(texts: Iterable[str]) -> Iterator[str]:
    """Each distinct text of ``texts`` once, at its first occurrence, in order."""
    seen: set[bytes] = set()
    for text in texts:
        digest = text_digest(text)
        if digest not in seen:
            seen.add(digest)
            yield text
