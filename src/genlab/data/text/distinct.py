"""Distinct texts of a stream, remembered by a 128-bit digest instead of the text (a paragraph, premise or article
repeated across many rows is kept once while memory holds 16 bytes per distinct text)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")
# distinct texts a split remembers to share (~30 MB of digests): MNLI's ~130k premises, SNLI's ~150k, RACE's ~28k
SHARED_TEXTS = 1 << 18


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


def with_earlier_row(items: Iterable[T], text: Callable[[T], str | None],
                     limit: int = SHARED_TEXTS) -> Iterator[tuple[T, int]]:
    """Each item with the position of the first earlier item whose ``text`` is the same, or -1 (its text met for
    the first time, None, or met after ``limit`` distinct texts are remembered: memory stays bounded and the text
    is simply stored again). Decided here, in reading order, so an entry written from it is the same for any number
    of encoding processes."""
    first: dict[bytes, int] = {}
    for row, item in enumerate(items):
        shared, t = -1, text(item)
        if t is not None:
            digest = text_digest(t)
            shared = first.get(digest, -1)
            if shared < 0 and len(first) < limit:
                first[digest] = row
        yield item, shared
