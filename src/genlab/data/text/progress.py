"""Progress of long data preparation through the ``genlab`` logger: bytes done, rate and time left, throttled.

A job shorter than one interval prints nothing; a long one prints a line every ``every_s`` seconds and a last line
with the total time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

log = logging.getLogger("genlab")
EVERY_S = 5.0
T = TypeVar("T")


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.0f} min" if s < 5400 else f"{s / 3600:.1f} h"


class Progress:
    """Call :meth:`advance` with the bytes just processed; :meth:`finish` when done."""

    def __init__(self, what: str, total: int, every_s: float | None = None):
        # total <= 0: unknown (a download without a length)
        self.what, self.total, self.every_s = what, int(total), EVERY_S if every_s is None else every_s
        self.done = 0
        self.start = self.last = time.monotonic()
        self.printed = False

    def advance(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last, self.printed = now, True
            rate = self.done / max(now - self.start, 1e-9)
            if self.total <= 0:
                log.info("%s: %s, %s/s", self.what, _size(self.done), _size(rate))
                return
            left = max(self.total - self.done, 0) / max(rate, 1e-9)
            log.info("%s: %s of %s (%.0f%%), %s/s, about %s left", self.what, _size(self.done), _size(self.total),
                     100 * self.done / self.total, _size(rate), _duration(left))

    def finish(self) -> None:
        if self.printed:
            elapsed = time.monotonic() - self.start
            log.info("%s: done, %s in %s (%s/s)", self.what, _size(self.done), _duration(elapsed),
                     _size(self.done / max(elapsed, 1e-9)))


@contextmanager
def heartbeat(what: str, every_s: float | None = None) -> Iterator[None]:
    """For a step that reports nothing itself (SentencePiece training): log the time spent every ``every_s``."""
    every_s = EVERY_S if every_s is None else every_s
    stop = threading.Event()
    start = time.monotonic()

    def beat() -> None:
        while not stop.wait(every_s):
            log.info("%s: %s so far", what, _duration(time.monotonic() - start))

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        if time.monotonic() - start >= every_s:
            log.info("%s: done in %s", what, _duration(time.monotonic() - start))


def text_bytes(*texts: str | None) -> int:
    """UTF-8 size of the texts (None counts 0): the unit :func:`tracked` reports examples in."""
    return sum(len(t.encode()) for t in texts if t)


def tracked(items: Sequence[T], what: str, size: Callable[[T], int], every_s: float | None = None) -> Iterator[T]:
    """``items`` one by one, logging :class:`Progress` by ``size(item)`` bytes (e.g. :func:`text_bytes` of an
    example's texts) while a long loop (tokenising a finetuning split) consumes them."""
    progress = Progress(what, sum(size(item) for item in items), every_s)
    for item in items:
        yield item
        progress.advance(size(item))
    progress.finish()
