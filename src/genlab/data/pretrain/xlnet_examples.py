"""XLNet pretraining examples (XLNet paper §2.5, §3.1; the authors' ``data_utils.py``): streams, A/B segments,
span-based targets, bi_data.

A split is one token stream plus a sentence-id stream. It is cut into contiguous rows; row b at step s+1 continues
row b at step s by ``reuse_len`` tokens, so the model's memory carries across consecutive batches. Each example is
``[inp (reuse_len) | A | <sep> | B | <sep> | <cls>]`` with segment ids 0 / 1 / 2 and the targets sampled per half.
Backward rows (``bi_data``) are the forward rows reversed in time; their spans are sampled in reading order.
Everything random is drawn from generators keyed by (seed, pass, step, row) (the span targets of a batch: by
(seed, pass, step, rank), all rows at once), so any step can be rebuilt exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from genlab.errors import ConfigError, DataError

# Fixed special ids of the XLNet SentencePiece model.
UNK_ID, BOS_ID, EOS_ID, CLS_ID, SEP_ID, PAD_ID, MASK_ID, EOD_ID, EOP_ID = range(9)
SPECIAL_IDS = (UNK_ID, BOS_ID, EOS_ID, CLS_ID, SEP_ID, PAD_ID, MASK_ID, EOD_ID, EOP_ID)


@dataclass(frozen=True)
class SpanConfig:
    """Span-based target sampling (XLNet paper §3.1). ``enabled=False``: every target is a single random piece."""

    enabled: bool = True
    max_len: int = 5
    len_dist: str = "inverse"  # inverse: P(n) ∝ 1/n (official) | uniform: the paper's wording
    unit: str = "piece"  # piece: n pieces from a word start (released behaviour, PR #16) | word: n whole words
    alpha: int = 6  # context of alpha/beta * n pieces around a span of n (= K)
    beta: int = 1

    def __post_init__(self):
        if self.len_dist not in ("inverse", "uniform"):
            raise ConfigError(f"span.len_dist={self.len_dist!r} must be 'inverse' or 'uniform'.")
        if self.unit not in ("piece", "word"):
            raise ConfigError(f"span.unit={self.unit!r} must be 'piece' or 'word'.")
        if self.max_len < 1 or self.alpha < 1 or self.beta < 1:
            raise ConfigError("span.max_len, span.alpha and span.beta must be >= 1.")

    def length_probs(self) -> np.ndarray:
        p = 1.0 / np.arange(1, self.max_len + 1) if self.len_dist == "inverse" else np.ones(self.max_len)
        return p / p.sum()


def sample_targets(
    ids: np.ndarray,
    is_word_start: np.ndarray,
    goal: int,
    rng: np.random.Generator,
    span: SpanConfig,
    reverse: np.ndarray | bool = False,
    drawn: list[int] | None = None,
) -> np.ndarray:
    """Boolean masks [N, L] with exactly ``goal`` targets in each row of ``ids`` [N, L] (one half of N examples).

    Spans first (:func:`sample_spans`, all rows at once), then uniformly random free positions top each row up to
    ``goal``. ``reverse`` (per row or for all): the row is stored right-to-left, so it is sampled flipped (in reading
    order) and the mask flipped back. ``drawn`` collects each span length n the walk used, before the cap (tests of
    P(n)). Draw order: lengths [N, goal], offsets [N, goal], top-up keys [N, L].
    """
    n_rows, seg_len = ids.shape
    if goal > seg_len:
        raise ConfigError(f"num_predict asks for {goal} targets in a half of only {seg_len} tokens; lower num_predict.")
    flip = np.broadcast_to(np.asarray(reverse, dtype=bool), (n_rows,))
    seg = np.where(flip[:, None], ids[:, ::-1], ids)
    mask, count = np.zeros((n_rows, seg_len), dtype=bool), np.zeros(n_rows, dtype=np.int64)
    if span.enabled and goal > 0:
        lengths = rng.choice(np.arange(1, span.max_len + 1), size=(n_rows, goal), p=span.length_probs())
        mask, count, used = sample_spans(is_word_start[seg], goal, lengths, rng.random((n_rows, goal)), span)
        if drawn is not None:
            drawn.extend(lengths[used].tolist())
    # top-up: the (goal - count) free positions with the smallest uniform keys = a uniform subset of the free ones
    keys = np.where(mask, 2.0, rng.random((n_rows, seg_len)))
    mask |= keys.argsort(axis=1).argsort(axis=1) < (goal - count)[:, None]
    return np.where(flip[:, None], mask[:, ::-1], mask)


def sample_spans(
    word_start: np.ndarray, goal: int, lengths: np.ndarray, offsets: np.ndarray, span: SpanConfig
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The span phase for every row at once (``word_start`` [N, L] bool, rows in reading order).

    A cursor walk per row (XLNet paper Sec. 3.1: a span of n pieces in a context of K·n): span k has
    length ``n = min(lengths[:, k], goal - count)``, context ``ctx = n·alpha/beta``, ``left = floor(offsets[:, k] ·
    ctx)`` (uniform in [0, ctx)); it starts at the first word start at or after ``cur + left`` and the cursor moves
    to ``end + ctx - left``. A row stops when a span would reach its last piece (the official edge rule), the cursor
    leaves the row or ``goal`` targets are reached. The walk is sequential in k (each start depends on the previous
    end), so the loop runs over span rounds (at most ``goal``, ~20 for 512/K=6) with every row vectorised; the
    snapping is a precomputed "next word start" table. Returns (mask [N, L], count [N], used [N, goal] bool).
    """
    n_rows, seg_len = word_start.shape
    col = np.arange(seg_len)
    nxt = np.minimum.accumulate(np.where(word_start, col, seg_len)[:, ::-1], axis=1)[:, ::-1]
    nxt = np.concatenate([nxt, np.full((n_rows, 1), seg_len)], axis=1)  # [N, L+1]: L = no word start left
    if span.unit == "word":  # the i-th word start of a row (L past the last), and each position's word index
        starts = np.sort(np.where(word_start, col, seg_len), axis=1)
        starts = np.concatenate([starts, np.full((n_rows, span.max_len + 1), seg_len)], axis=1)
        word_idx = np.cumsum(word_start, axis=1) - word_start
    cur, count = np.zeros(n_rows, dtype=np.int64), np.zeros(n_rows, dtype=np.int64)
    used = np.zeros((n_rows, goal), dtype=bool)
    begs, ends, owners = [], [], []
    rows = np.arange(n_rows)
    for k in range(goal):
        if not len(rows):
            break
        used[rows, k] = True
        n = np.minimum(lengths[rows, k], goal - count[rows])
        ctx = n * span.alpha // span.beta
        left = (offsets[rows, k] * ctx).astype(np.int64)
        beg = nxt[rows, np.minimum(cur[rows] + left, seg_len)]
        if span.unit == "piece":
            end = beg + n
            ok = end < seg_len
        else:  # n whole words: stop at the (n+1)-th word start (the row's end if none)
            end = starts[rows, word_idx[rows, np.minimum(beg, seg_len - 1)] + n]
            ok = (beg < seg_len) & (count[rows] + end - beg <= goal) & (end < seg_len)
        rows, beg, end, ctx, left = rows[ok], beg[ok], end[ok], ctx[ok], left[ok]
        begs.append(beg), ends.append(end), owners.append(rows)
        count[rows] += end - beg
        cur[rows] = end + ctx - left
        rows = rows[(cur[rows] < seg_len) & (count[rows] < goal)]
    edges = np.zeros((n_rows, seg_len + 1), dtype=np.int64)  # +1 at each span start, -1 at its end
    if begs:
        owner = np.concatenate(owners)
        np.add.at(edges, (owner, np.concatenate(begs)), 1)
        np.add.at(edges, (owner, np.concatenate(ends)), -1)
    return np.cumsum(edges, axis=1)[:, :seg_len] > 0, count, used


def next_boundary(sent_ids: np.ndarray, start: int, chunk: int = 4096) -> int:
    """First k >= start with ``sent_ids[k] != sent_ids[k-1]`` (a sentence start), or the row length."""
    n = len(sent_ids)
    while start < n:
        stop = min(n, start + chunk)
        win = np.asarray(sent_ids[start - 1 : stop])
        hit = np.flatnonzero(win[1:] != win[:-1])
        if len(hit):
            return start + int(hit[0])
        start = stop
    return n


def sentence_start(sent_ids: np.ndarray, k: int, chunk: int = 4096) -> int:
    """Largest j <= k with j == 0 or ``sent_ids[j] != sent_ids[j-1]``: the start of the sentence holding k."""
    while k > 0:
        lo = max(1, k - chunk)
        win = np.asarray(sent_ids[lo - 1 : k + 1])
        hit = np.flatnonzero(win[1:] != win[:-1])
        if len(hit):
            return lo + int(hit[-1])
        if lo == 1:
            return 0
        k = lo - 1
    return 0


@dataclass(frozen=True)
class SegmentPair:
    """A = ``row[a_begin:a_end]``, B = ``row[b_begin:b_end]``; label 1 = B is the true continuation of A."""

    a_begin: int
    a_end: int
    b_begin: int
    b_end: int
    label: int


def split_a_and_b(
    sent_ids: np.ndarray, begin: int, tot_len: int, rng: np.random.Generator, random_b_prob: float = 0.5
) -> SegmentPair | None:
    """Cut ``tot_len`` tokens starting at ``begin`` into A and B at sentence boundaries (the authors'
    ``_split_a_and_b``).

    Returns None when the row has no room left (the writer stops there). A random B (label 0) is drawn from the
    same row and widened to whole sentences; the longer of A/B is then cut from its right end (B on a tie).
    """
    row_len = len(sent_ids)
    if begin + tot_len >= row_len:
        return None
    window = np.asarray(sent_ids[begin : begin + tot_len])  # only this window is scanned, not the whole row
    cut_points = np.flatnonzero(window[1:] != window[:-1]) + begin + 1  # boundaries at offsets 1..tot_len-1
    end = next_boundary(sent_ids, begin + tot_len)
    if len(cut_points) == 0 or rng.random() < random_b_prob:
        label = 0
        a_end = end if len(cut_points) == 0 else int(rng.choice(cut_points))
        b_len = max(1, tot_len - (a_end - begin))
        b_begin = int(rng.integers(0, row_len - 1 - b_len + 1))
        b_end = b_begin + b_len
        b_begin = sentence_start(sent_ids, b_begin)  # widen B to whole sentences
        b_end = min(next_boundary(sent_ids, b_end), row_len - 1)
    else:
        label = 1
        a_end = int(rng.choice(cut_points))
        b_begin, b_end = a_end, end
    a_cut, b_cut = _truncation(a_end - begin, b_end - b_begin, tot_len)
    return SegmentPair(begin, a_end - a_cut, b_begin, b_end - b_cut, label)


def _truncation(a_len: int, b_len: int, tot_len: int) -> tuple[int, int]:
    """Tokens cut from the right of A and B by "drop one from the longer (B on a tie) until they fit", in O(1)."""
    excess = a_len + b_len - tot_len
    if excess <= 0:
        return 0, 0
    first = min(excess, abs(a_len - b_len))  # from the longer one until both are equal
    a_cut, b_cut = (first, 0) if a_len > b_len else (0, first)
    rest = excess - first  # then alternately B, A, B, ...
    return a_cut + rest // 2, b_cut + rest - rest // 2


@dataclass(frozen=True)
class XLNetDataConfig:
    """Example layout and target sampling. ``num_predict`` = ⌊seq_len/K⌋ split reuse-half first (43 + 42 for 85)."""

    seq_len: int = 512
    reuse_len: int = 256
    perm_size: int = 256
    num_predict: int = 85
    bi_data: bool = True
    random_b_prob: float = 0.5  # the official writer always draws a random B half of the time (NSP label)
    span: SpanConfig = SpanConfig()
    targets_sampling: str = "online"  # online | offline_per_pass (spans and B fixed per pass modulo num_passes)
    num_passes: int = 20

    def __post_init__(self):
        if self.seq_len - self.reuse_len < 4 or self.reuse_len < 1:
            raise ConfigError(
                f"seq_len={self.seq_len} and reuse_len={self.reuse_len}: need 1 <= reuse_len <= seq_len - 4 "
                "(A, B and three special tokens follow the reuse part)."
            )
        if self.num_predict < 0 or self.num_predict > self.seq_len:
            raise ConfigError(f"num_predict={self.num_predict} must be in [0, seq_len={self.seq_len}].")
        if self.targets_sampling not in ("online", "offline_per_pass"):
            raise ConfigError(f"targets_sampling={self.targets_sampling!r} must be 'online' or 'offline_per_pass'.")

    @property
    def tot_len(self) -> int:
        return self.seq_len - self.reuse_len - 3

    @property
    def predict_split(self) -> tuple[int, int]:
        reuse = self.num_predict - self.num_predict // 2
        return reuse, self.num_predict // 2


def example_rng(seed: int, pass_idx: int, step: int, row: int, stream: int) -> np.random.Generator:
    """Independent generator per (seed, pass, step, row, purpose); rebuilt identically after a resume."""
    return np.random.default_rng([seed, pass_idx, step, row, stream])


def stream_rows(tokens: np.ndarray, sent_ids: np.ndarray, n_rows: int, bi_data: bool, rank: int = 0, world: int = 1):
    """This rank's rows as lists of views (tokens, sent_ids) and reversed flags: [forward rows; the same rows
    reversed] with bi_data. Views of the memmaps (negative strides for backward rows): nothing is copied.

    Rank r owns forward rows ``[r·F, (r+1)·F)`` with F = n_rows/2 (bi_data) or n_rows, so every device batch is
    [fwd; bwd] and a data-parallel run sees the streams of one process with the global batch.
    """
    if bi_data and n_rows % 2:
        raise ConfigError(f"bi_data needs an even per-device batch (data.batch_size={n_rows}).")
    n_fwd = n_rows // 2 if bi_data else n_rows
    total = n_fwd * world
    length = len(tokens) // total
    tok = tokens[: length * total].reshape(total, length)[rank * n_fwd : (rank + 1) * n_fwd]
    sid = sent_ids[: length * total].reshape(total, length)[rank * n_fwd : (rank + 1) * n_fwd]
    rows, sids = list(tok), list(sid)
    if bi_data:
        rows += [r[::-1] for r in tok]
        sids += [r[::-1] for r in sid]
    return rows, sids, np.arange(n_rows) >= n_fwd if bi_data else np.zeros(n_rows, dtype=bool)


def steps_per_pass(row_len: int, cfg: XLNetDataConfig) -> int:
    """Steps s with room for ``reuse_len`` + A + B after offset s·reuse_len (the official writer's stop rule)."""
    room = row_len - cfg.reuse_len - cfg.tot_len  # need s·R + R + tot_len < row_len
    return 0 if room <= 0 else (room - 1) // cfg.reuse_len + 1


def build_segments(
    row_tok: np.ndarray, row_sid: np.ndarray, step: int, cfg: XLNetDataConfig, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, int]:
    """``(ids [T], seg_ids [T], nsp_label)`` of one row at one step: [inp | A <sep> B <sep> <cls>]."""
    i = step * cfg.reuse_len
    pair = split_a_and_b(row_sid, i + cfg.reuse_len, cfg.tot_len, rng, cfg.random_b_prob)
    if pair is None:
        raise DataError(f"step {step} runs past the end of a stream of {len(row_tok)} tokens.")
    a = row_tok[pair.a_begin : pair.a_end]
    b = row_tok[pair.b_begin : pair.b_end]
    ids = np.concatenate([row_tok[i : i + cfg.reuse_len], a, [SEP_ID], b, [SEP_ID, CLS_ID]]).astype(np.int64)
    seg = np.concatenate(
        [np.zeros(cfg.reuse_len + len(a) + 1, np.int64), np.ones(len(b) + 1, np.int64), np.array([2], np.int64)]
    )
    return ids, seg, pair.label


def sample_example_targets(
    ids: np.ndarray, reverse: np.ndarray, cfg: XLNetDataConfig, is_word_start: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Targets [N, T] of N examples ``ids`` [N, T], per half (reuse half first), each sampled in reading order."""
    goal_0, goal_1 = cfg.predict_split
    R = cfg.reuse_len
    return np.concatenate([sample_targets(ids[:, :R], is_word_start, goal_0, rng, cfg.span, reverse),
                           sample_targets(ids[:, R:], is_word_start, goal_1, rng, cfg.span, reverse)], axis=1)
