"""The host heap a CPU training step grows: glibc's malloc replayed on the step's tensor allocations (the spans
``genlab.cli.memory_probe`` records), because the resident set is the heap's high-water mark, not the peak of live
bytes.

With ``reuse_host_memory`` (``genlab.cli.host_memory``) nothing below 2 GiB is mmapped and nothing is trimmed, so every
tensor lives in one heap that never shrinks. A freed tensor leaves a hole that later tensors fill best-fit (glibc
takes the smallest free chunk that holds a request and keeps the rest free); a tensor no hole holds extends the heap's
top. Holes are modelled as never merging with each other: the small allocations a step makes between its tensors
(autograd nodes, tensor headers, saved-variable records) sit between them, so neighbouring freed tensors are seldom
adjacent chunks. Measured on Funnel B6-6-6 with one layer per block, 8 x 512 tokens, bf16-mixed, two forward,
loss and backward passes: glibc's heap (``mallinfo2``) grew to 1.87x the peak of live tensors (gradients
included), this model gives 1.82x, and the same model with merged neighbours 1.02x (``experiments/perf/real_scale.md``).
Without the setting glibc mmaps blocks from 32 MiB (its dynamic threshold's ceiling) and unmaps them on free.
"""

from __future__ import annotations

import bisect
import math

MMAP_WITH_SETTING = 2**31 - 1  # host_memory's threshold: blocks this large are still mmapped
MMAP_DEFAULT = 32 * 2**20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit Linux
ALIGN, HEADER = 64, 16  # c10's CPU allocator aligns to 64 bytes; a malloc chunk's header
STEPS = 2  # steps replayed: as many as experiments/perf/memory_estimate.py measures


def high_water(spans: list[list[int]], mmap_at: int, steps: int = STEPS) -> int:
    """Peak bytes of heap plus mmapped blocks over ``steps`` replays of ``spans`` ([first op, op after the last,
    bytes] per storage, in the order they were allocated; a last op of -1 means alive to the step's end)."""
    order = sorted(range(len(spans)), key=lambda i: spans[i][0])  # stable: allocation order within an op
    frees: dict[int, list[int]] = {}
    for i, (_, after, _) in enumerate(spans):
        frees.setdefault(after - 1 if after >= 0 else math.inf, []).append(i)
    heap = _Heap(mmap_at)
    for step in range(steps):
        pending = sorted(k for k in frees if k != math.inf)
        j = 0
        for i in order:
            first = spans[i][0]
            while j < len(pending) and pending[j] < first:  # storages freed before this op
                for k in frees[pending[j]]:
                    heap.release((step, k))
                j += 1
            heap.allocate((step, i), spans[i][2])
        for key in pending[j:] + ([math.inf] if math.inf in frees else []):
            for k in frees[key]:
                heap.release((step, k))
    return heap.peak


class _Heap:
    def __init__(self, mmap_at: int) -> None:
        self.mmap_at = mmap_at
        self.holes: list[tuple[int, int]] = []  # (size, address), sorted: best fit is a bisection
        self.blocks: dict[tuple[int, int], tuple[int, int]] = {}  # key -> (address or -1 if mmapped, size)
        self.top = self.mapped = self.peak = 0

    def allocate(self, key: tuple[int, int], nbytes: int) -> None:
        size = -(-max(nbytes, 1) // ALIGN) * ALIGN + HEADER
        if size >= self.mmap_at:
            self.blocks[key] = (-1, size)
            self.mapped += size
        else:
            at = bisect.bisect_left(self.holes, (size, -1))
            if at < len(self.holes):
                hole_size, address = self.holes.pop(at)
                if hole_size > size:
                    bisect.insort(self.holes, (hole_size - size, address + size))
            else:
                tail = next((h for h in self.holes if h[0] + h[1] == self.top), None)
                if tail is not None:  # the hole at the top is extended, not left behind
                    self.holes.remove(tail)
                    self.top = tail[1]
                address, self.top = self.top, self.top + size
            self.blocks[key] = (address, size)
        self.peak = max(self.peak, self.top + self.mapped)

    def release(self, key: tuple[int, int]) -> None:
        address, size = self.blocks.pop(key)
        if address < 0:
            self.mapped -= size
        elif address + size == self.top:  # a chunk next to the top merges into it
            self.top = address
        else:
            bisect.insort(self.holes, (size, address))
