"""Samplers whose iteration moves their own state (the next pass, a resume offset used once)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

from torch.utils.data import Sampler

T = TypeVar("T")


class StatefulSampler(Sampler[T]):
    """Base of a sampler whose iteration changes its own state. ``DataLoader``'s multi-process iterator calls
    ``iter(sampler)`` twice when it is created (in ``_BaseDataLoaderIter.__init__`` and again in ``_reset``) and
    drops the first iterator unstarted, so state taken eagerly in ``__iter__`` would be spent on an iteration that
    never runs: with loader workers a resume offset was lost and a pass skipped, and a resumed run trained on other
    batches than the run it continued. Subclasses write ``_order``; it runs at the first ``next()``, so only an
    iteration that really yields moves the state, whatever the number of workers."""

    def __iter__(self) -> Iterator[T]:
        yield from self._order()

    def _order(self) -> Iterable[T]:
        raise NotImplementedError
