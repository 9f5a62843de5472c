"""Ordered, bounded parallel map over corpus pieces (``data.num_proc`` processes).

Results come back in input order, so a cache built with any number of processes is byte-identical to the
one-process build; at most ``2 * num_proc`` pieces are in flight, so memory does not grow with the corpus.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from itertools import chain, islice
from typing import Any

from genlab.errors import ConfigError

MAX_DEFAULT_PROCS = 8  # tokenising beyond this is limited by the disk and the parent's writing, not by cores


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # honours taskset / container CPU sets
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def resolve_num_proc(num_proc: int | None) -> int:
    """``data.num_proc``: None = the cores available to this process, at most 8."""
    if num_proc is None:
        return min(available_cores(), MAX_DEFAULT_PROCS)
    if not isinstance(num_proc, int) or num_proc < 1:
        raise ConfigError(f"data.num_proc={num_proc!r} must be a positive integer (or null for the available cores).")
    return num_proc


_worker_fn: Callable[[Any], Any] | None = None


def _init(fn: Callable[[Any], Any]) -> None:
    global _worker_fn
    _worker_fn = fn


def _call(item: Any) -> Any:
    return _worker_fn(item)


def ordered_map(fn: Callable[[Any], Any], items: Iterable[Any], num_proc: int) -> Iterator[Any]:
    """``map(fn, items)`` over ``num_proc`` processes, in order. ``fn`` (e.g. a tokenizer's encoder) is handed to
    each worker once; a worker's exception (a DataError naming a bad file) is raised here."""
    items = iter(items)
    head = list(islice(items, 2))
    if num_proc <= 1 or len(head) < 2:  # a one-piece job is not worth starting processes
        yield from map(fn, chain(head, items))
        return
    # fork: the workers inherit the loaded tokenizer instead of re-importing torch and re-reading the model.
    # An executor, not mp.Pool: a worker's KeyboardInterrupt comes back here, and a worker the kernel kills (out of
    # memory) breaks the pool with an error; mp.Pool would wait for its result forever in both cases.
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    pool = ProcessPoolExecutor(num_proc, mp_context=ctx, initializer=_init, initargs=(fn,))
    try:
        pending: deque = deque()
        for item in chain(head, items):
            pending.append(pool.submit(_call, item))
            if len(pending) >= 2 * num_proc:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    except BrokenProcessPool as err:
        raise RuntimeError(f"a tokenising process died ({err}); if the machine ran out of memory, lower "
                           f"data.num_proc (now {num_proc})") from err
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
