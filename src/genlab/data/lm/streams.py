"""Ordered language-model streams: the batch is B contiguous streams consumed segment by segment.

Memory (Transformer-XL mems, LSTM states) carries from one segment of a stream to the next, so the order is
fixed: no shuffling, every rank owns its own contiguous streams, and the position in the pass is resumable.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

from genlab.data.loading.samplers import StatefulSampler
from genlab.errors import DataError


def split_streams(tokens: np.ndarray, n_streams: int, rank: int = 0, world_size: int = 1) -> np.ndarray:
    """Reshape a 1-D token array into ``n_streams * world_size`` contiguous rows and return this rank's rows.

    Rank r owns rows ``[r*n_streams, (r+1)*n_streams)``: with the same global batch, a single process and a
    data-parallel run see exactly the same streams. The tail that does not fill a row is dropped (as the
    official iterators do).
    """
    if n_streams < 1:
        raise DataError(f"the number of streams (data.batch_size / data.eval_batch_size) must be >= 1, got {n_streams}.")
    total = n_streams * world_size
    length = len(tokens) // total
    if length < 2:
        raise DataError(
            f"the split has {len(tokens)} tokens, too few for {total} streams of at least 2 tokens; "
            "lower data.batch_size (or data.eval_batch_size) or use a larger corpus."
        )
    rows = tokens[: length * total].reshape(total, length)
    return rows[rank * n_streams : (rank + 1) * n_streams]


class StreamSegments(Dataset):
    """Segment ``k`` of the streams: ``input_ids = rows[:, s-ext : s+L]``, ``target = rows[:, s+1 : s+1+L]``.

    ``s = ext_len + k * tgt_len``: the first ``ext_len`` tokens of a stream are context only, so every segment
    has its full extended context and every other token is predicted exactly once. The last segment may be
    shorter. Items are whole batches (use ``DataLoader(batch_size=None)``).
    """

    def __init__(self, rows: np.ndarray, tgt_len: int, ext_len: int = 0):
        if tgt_len < 1 or ext_len < 0:
            raise DataError(f"tgt_len must be >= 1 and ext_len >= 0 (got {tgt_len}, {ext_len}).")
        self.rows, self.tgt_len, self.ext_len = rows, tgt_len, ext_len
        predictable = rows.shape[1] - 1 - ext_len
        if predictable < 1:
            raise DataError(f"streams of length {rows.shape[1]} leave nothing to predict with ext_len={ext_len}.")
        self.n_segments = -(-predictable // tgt_len)

    def __len__(self) -> int:
        return self.n_segments

    def __getitem__(self, k: int) -> dict:
        start = self.ext_len + k * self.tgt_len
        seq_len = min(self.tgt_len, self.rows.shape[1] - 1 - start)
        window = np.asarray(self.rows[:, start - self.ext_len : start + seq_len + 1], dtype=np.int64)
        return {
            "input_ids": torch.from_numpy(window[:, :-1].copy()),
            "target": torch.from_numpy(window[:, self.ext_len + 1 :].copy()),
            "segment": k,
        }

    @property
    def tokens_per_pass(self) -> int:
        return self.rows.shape[0] * (self.rows.shape[1] - 1 - self.ext_len)


class ChunkedStreamSegments(Dataset):
    """This rank's ``chunks`` chunks of ``n_streams`` streams each, interleaved segment by segment (item
    ``k * chunks + j`` is segment ``k`` of chunk ``j``, with a ``chunk`` key), for gradient accumulation.

    The stream rows are split into ``world_size * chunks`` chunks and rank r owns chunks ``r*chunks + j``, as in
    the official Transformer-XL ``batch_chunk``: accumulating ``chunks`` micro-batches then sees the same streams
    at the same segment as ``chunks`` times more processes would, and each chunk carries its own memory.
    """

    def __init__(self, tokens: np.ndarray, n_streams: int, tgt_len: int, ext_len: int = 0, rank: int = 0,
                 world_size: int = 1, chunks: int = 1):
        if chunks < 1:
            raise DataError(f"the number of accumulated chunks must be >= 1, got {chunks}.")
        self.chunks = [StreamSegments(split_streams(tokens, n_streams, rank * chunks + j, world_size * chunks),
                                      tgt_len, ext_len) for j in range(chunks)]
        self.n_segments = self.chunks[0].n_segments

    def __len__(self) -> int:
        return self.n_segments * len(self.chunks)

    def __getitem__(self, i: int) -> dict:
        segment, chunk = divmod(i, len(self.chunks))
        return {**self.chunks[chunk][segment], "chunk": chunk}

    @property
    def tokens_per_pass(self) -> int:
        return sum(c.tokens_per_pass for c in self.chunks)


class ResumableSequentialSampler(StatefulSampler[int]):
    """``0..n-1`` in order, starting once at ``start`` after a resume (then from 0 on later passes).

    ``__len__`` stays the full pass so Lightning's batch counter, restored from the checkpoint, lines up.
    """

    def __init__(self, n: int):
        self.n, self.start = n, 0

    def _order(self) -> range:
        start, self.start = self.start, 0
        return range(start, self.n)

    def __len__(self) -> int:
        return self.n
