"""Context sampling for Planetoid (Yang thesis §3.3.3, Algorithm 2): random-walk (graph) context and label context,
vectorised in numpy.

Two samplers:
- :class:`PaperSampler` — Algorithm 2 of the thesis: every triple flips an ``r2`` coin (graph vs label context)
  and an ``r1`` coin (positive vs negative); a graph triple is one pair picked uniformly inside the window of a
  ``q``-node walk, corrupted uniformly when negative.
- :class:`ReferenceSampler` — the released code: a graph batch walks ``path_size`` steps from the next
  ``g_batch_size`` start nodes of a permutation and emits every window pair; a label batch emits
  ``g_sample_size`` same-label pairs; ``neg_samp`` uniform negatives per positive (0 = full softmax, positives only).

Each batch is a :class:`ContextBatch` of instance ids ``i``, context ids ``c`` and ``gamma`` (+1 / -1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from genlab.errors import ConfigError

NEG_MODES = ("r1_coin", "k_negatives", "full_softmax")
WINDOW_RULES = ("paper", "code")


@dataclass
class ContextBatch:
    i: np.ndarray  # int64 instance ids
    c: np.ndarray  # int64 context ids
    gamma: np.ndarray  # float32, +1 positive / -1 negative
    graph: np.ndarray  # bool, True where the triple is graph context (else label context)

    def __len__(self) -> int:
        return len(self.i)

    @staticmethod
    def cat(parts: list[ContextBatch]) -> ContextBatch:
        return ContextBatch(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("i", "c", "gamma", "graph")))


@dataclass
class Adjacency:
    """CSR adjacency; ``weights`` None means every list entry is equally likely (duplicates count twice)."""

    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray | None = None

    @property
    def num_nodes(self) -> int:
        return len(self.indptr) - 1

    @property
    def degree(self) -> np.ndarray:
        return np.diff(self.indptr)

    @staticmethod
    def build(
        indptr: np.ndarray,
        indices: np.ndarray,
        weights: np.ndarray | None = None,
        dedup: bool = False,
        drop_nodes: np.ndarray | None = None,
    ) -> Adjacency:
        """Optionally remove duplicate entries (summing weights) and every edge touching ``drop_nodes``."""
        n = len(indptr) - 1
        rows = np.repeat(np.arange(n), np.diff(indptr))
        cols = np.asarray(indices, np.int64)
        w = np.ones(len(cols)) if weights is None else np.asarray(weights, np.float64)
        if drop_nodes is not None and len(drop_nodes):
            dropped = np.zeros(n, bool)
            dropped[drop_nodes] = True
            keep = ~(dropped[rows] | dropped[cols])
            rows, cols, w = rows[keep], cols[keep], w[keep]
        if dedup:
            key, inv = np.unique(rows * n + cols, return_inverse=True)
            w = np.bincount(inv, weights=w)
            rows, cols = key // n, key % n
        order = np.argsort(rows, kind="stable")
        rows, cols, w = rows[order], cols[order], w[order]
        new_ptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))])
        uniform = weights is None and not dedup
        return Adjacency(new_ptr, cols, None if uniform else w)

    def step(self, cur: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One random-walk step from every node in ``cur``: next node ~ a_{cur,j} / sum_j a_{cur,j}.
        A node without neighbours stays where it is."""
        deg = self.degree[cur]
        start = self.indptr[cur]
        u = rng.random(len(cur))
        if self.weights is None:
            pos = start + np.minimum((u * deg).astype(np.int64), np.maximum(deg - 1, 0))
        else:
            if getattr(self, "_cum", None) is None:
                self._cum = np.concatenate([[0.0], np.cumsum(self.weights)])
            cum = self._cum
            lo, hi = cum[start], cum[start + deg]
            pos = np.searchsorted(cum, lo + u * (hi - lo), side="right") - 1
            pos = np.clip(pos, start, start + np.maximum(deg - 1, 0))
        nxt = self.indices[np.minimum(pos, len(self.indices) - 1)] if len(self.indices) else cur
        return np.where(deg > 0, nxt, cur)

    def walks(self, starts: np.ndarray, n_steps: int, rng: np.random.Generator) -> np.ndarray:
        """[len(starts), n_steps + 1] walks; the loop is over steps, each step vectorised over all walks."""
        out = np.empty((len(starts), n_steps + 1), np.int64)
        out[:, 0] = starts
        for t in range(n_steps):
            out[:, t + 1] = self.step(out[:, t], rng)
        return out


def window_pairs(n: int, window: int, rule: str) -> tuple[np.ndarray, np.ndarray]:
    """Position pairs (j, k) of an ``n``-node walk. ``code``: |j-k| <= window incl. j == k; ``paper``:
    0 < |j-k| < window (the thesis' ``d``)."""
    if rule not in WINDOW_RULES:
        raise ConfigError(f"data.window_rule={rule!r} must be one of {WINDOW_RULES}.")
    j, k = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    dist = np.abs(j - k)
    ok = dist <= window if rule == "code" else (dist > 0) & (dist < window)
    return j[ok], k[ok]


def largest_context_batch(sampler: str, g_batch_size: int, g_sample_size: int, path_size: int, window: int,
                          window_rule: str, neg_samp: int, context_batch_size: int, neg_mode: str) -> int:
    """Rows of the largest context sub-batch a sampler yields (the memory guard steps one of this size). The reference
    sampler's graph batch is every window pair of ``g_batch_size`` walks (200 x 65 = 13,000 pairs at the released
    settings, each a row of logits over every node under ``full_softmax``), far more than ``context_batch_size``."""
    if sampler == "reference":
        pairs = len(window_pairs(path_size + 1, window, window_rule)[0])
        return max(g_batch_size * pairs, g_sample_size) * (1 + neg_samp)
    return context_batch_size * (1 + (neg_samp if neg_mode == "k_negatives" else 0))


def frac_count(v: float, rng: np.random.Generator) -> int:
    """Iteration count of the reference schedule: ``v`` when ``v >= 1`` else 1 with probability ``v``."""
    return int(v) if v >= 1 else int(rng.random() < v)


class _LabelPairs:
    """Uniform same-label / different-label pairs among the labelled nodes."""

    def __init__(self, labeled: np.ndarray, labels: np.ndarray):
        self.labeled = np.asarray(labeled, np.int64)
        self.labels = np.asarray(labels, np.int64)
        order = np.argsort(self.labels, kind="stable")
        self.sorted_nodes, self.sorted_labels = self.labeled[order], self.labels[order]
        classes, self.counts = np.unique(self.labels, return_counts=True)
        self.class_pos = {int(c): i for i, c in enumerate(classes)}
        self.offsets = np.concatenate([[0], np.cumsum(self.counts)])
        self.size_of = self.counts[np.searchsorted(classes, self.labels)]  # class size of each labelled node
        self.classes = classes

    @property
    def usable(self) -> bool:
        return len(self.classes) >= 2

    def same(self, x1_pos: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """A uniform labelled node with the label of ``labeled[x1_pos]`` (may be the node itself)."""
        cls = np.searchsorted(self.classes, self.labels[x1_pos])
        pick = self.offsets[cls] + (rng.random(len(x1_pos)) * self.counts[cls]).astype(np.int64)
        return self.sorted_nodes[pick]

    def different(self, x1_pos: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """A uniform labelled node whose label differs from ``labeled[x1_pos]``."""
        cls = np.searchsorted(self.classes, self.labels[x1_pos])
        other = len(self.labeled) - self.counts[cls]
        r = (rng.random(len(x1_pos)) * other).astype(np.int64)
        r = np.where(r >= self.offsets[cls], r + self.counts[cls], r)  # skip the block of the own class
        return self.sorted_nodes[r]

    def x1_for_pairs(self, n: int, positive: bool, rng: np.random.Generator) -> np.ndarray:
        """Positions of ``x1`` so that (x1, x2) is uniform over ordered same-/different-label pairs."""
        w = self.size_of if positive else len(self.labeled) - self.size_of
        return rng.choice(len(self.labeled), size=n, p=w / w.sum())


def _empty() -> ContextBatch:
    z = np.zeros(0, np.int64)
    return ContextBatch(z, z.copy(), np.zeros(0, np.float32), np.zeros(0, bool))


class ReferenceSampler:
    """The released code's ``gen_graph`` / ``gen_label_graph`` (the reference sampler).

    ``n_context`` restricts instances and contexts to ids below it (inductive: the ``allx`` nodes); walks start
    only there but may pass through other nodes, and pairs touching them are dropped.
    """

    def __init__(
        self,
        adj: Adjacency,
        labeled: np.ndarray,
        labels: np.ndarray,
        g_batch_size: int = 200,
        g_sample_size: int = 100,
        path_size: int = 10,
        window: int = 3,
        neg_samp: int = 0,
        window_rule: str = "code",
        n_context: int | None = None,
        seed: int = 0,
    ):
        self.adj, self.path_size, self.neg_samp = adj, path_size, neg_samp
        self.g_batch_size, self.g_sample_size = g_batch_size, g_sample_size
        self.n_context = adj.num_nodes if n_context is None else n_context
        self.pos_j, self.pos_k = window_pairs(path_size + 1, window, window_rule)
        self.label_pairs = _LabelPairs(labeled, labels)
        cand = np.arange(self.n_context)
        self.starts = cand[adj.degree[cand] > 0]  # the code skips nodes with an empty neighbour list
        self.rng = np.random.default_rng(seed)
        self._perm, self._ptr = np.zeros(0, np.int64), 0

    def _next_starts(self) -> np.ndarray:
        out = []
        need = min(self.g_batch_size, len(self.starts))
        while need > 0:
            if self._ptr >= len(self._perm):
                self._perm, self._ptr = self.rng.permutation(self.starts), 0
            take = self._perm[self._ptr : self._ptr + need]
            self._ptr += len(take)
            need -= len(take)
            out.append(take)
        return np.concatenate(out) if out else np.zeros(0, np.int64)

    def _with_negatives(self, i: np.ndarray, c: np.ndarray, graph: bool, neg: np.ndarray | None) -> ContextBatch:
        g = np.full(len(i), graph)
        pos = ContextBatch(i, c, np.ones(len(i), np.float32), g)
        if neg is None:
            return pos
        ii = np.repeat(i, self.neg_samp)
        return ContextBatch.cat([pos, ContextBatch(ii, neg, -np.ones(len(ii), np.float32), np.full(len(ii), graph))])

    def graph_batch(self) -> ContextBatch:
        walks = self.adj.walks(self._next_starts(), self.path_size, self.rng)
        i, c = walks[:, self.pos_j].ravel(), walks[:, self.pos_k].ravel()
        keep = (i < self.n_context) & (c < self.n_context)
        i, c = i[keep], c[keep]
        neg = self.rng.integers(0, self.n_context, len(i) * self.neg_samp) if self.neg_samp else None
        return self._with_negatives(i, c, True, neg)

    def label_batch(self) -> ContextBatch:
        lp = self.label_pairs
        if not lp.usable:  # one class: no negative exists, and the code's pairs would be degenerate
            return _empty()
        x1 = self.rng.integers(0, len(lp.labeled), self.g_sample_size)
        i, c = lp.labeled[x1], lp.same(x1, self.rng)
        neg = lp.different(np.repeat(x1, self.neg_samp), self.rng) if self.neg_samp else None
        return self._with_negatives(i, c, False, neg)


class PaperSampler:
    """Algorithm 2 of the thesis, ``batch_size`` triples at a time.

    ``neg_mode``: ``r1_coin`` (gamma = +1 with probability r1, negatives corrupt c uniformly), ``full_softmax``
    (positives only), ``k_negatives`` (every positive plus ``neg_samp`` uniform corruptions).
    """

    def __init__(
        self,
        adj: Adjacency,
        labeled: np.ndarray,
        labels: np.ndarray,
        r1: float = 5 / 6,
        r2: float = 0.5,
        q: int = 10,
        d: int = 3,
        batch_size: int = 200,
        neg_mode: str = "r1_coin",
        neg_samp: int = 5,
        window_rule: str = "paper",
        n_context: int | None = None,
        seed: int = 0,
    ):
        if neg_mode not in NEG_MODES:
            raise ConfigError(f"data.neg_mode={neg_mode!r} must be one of {NEG_MODES}.")
        if q < 2:
            raise ConfigError(f"data.q={q} must be >= 2 (a walk needs two nodes to give a pair).")
        self.adj, self.r1, self.r2, self.q = adj, r1, r2, q
        self.batch_size, self.neg_mode, self.neg_samp = batch_size, neg_mode, neg_samp
        self.n_context = adj.num_nodes if n_context is None else n_context
        self.pos_j, self.pos_k = window_pairs(q, d, window_rule)
        if len(self.pos_j) == 0:
            raise ConfigError(f"data.d={d} with window_rule={window_rule} gives no pairs in a {q}-node walk.")
        self.label_pairs = _LabelPairs(labeled, labels)
        self.rng = np.random.default_rng(seed)

    def _graph(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        starts = self.rng.integers(0, self.n_context, n)
        walks = self.adj.walks(starts, self.q - 1, self.rng)
        which = self.rng.integers(0, len(self.pos_j), n)
        rows = np.arange(n)
        i, c = walks[rows, self.pos_j[which]], walks[rows, self.pos_k[which]]
        keep = (i < self.n_context) & (c < self.n_context)  # inductive: drop pairs touching test nodes
        return i[keep], c[keep]

    def batch(self) -> ContextBatch:
        rng, n = self.rng, self.batch_size
        is_graph = rng.random(n) < self.r2
        if not self.label_pairs.usable:
            is_graph[:] = True  # label context needs two classes
        positive = rng.random(n) < self.r1 if self.neg_mode == "r1_coin" else np.ones(n, bool)
        parts = []
        ng = int(is_graph.sum())
        gi, gc = self._graph(ng)
        gpos = positive[is_graph][: len(gi)]
        gc = np.where(gpos, gc, rng.integers(0, self.n_context, len(gc)))  # gamma = -1: corrupt the context
        parts.append(ContextBatch(gi, gc, np.where(gpos, 1.0, -1.0).astype(np.float32), np.ones(len(gi), bool)))
        lp = self.label_pairs
        for sign in (True, False):
            m = int((~is_graph & (positive == sign)).sum())
            if m == 0:
                continue
            x1 = lp.x1_for_pairs(m, sign, rng)
            c = lp.same(x1, rng) if sign else lp.different(x1, rng)
            gamma = np.full(m, 1.0 if sign else -1.0, np.float32)
            parts.append(ContextBatch(lp.labeled[x1], c, gamma, np.zeros(m, bool)))
        out = ContextBatch.cat(parts)
        if self.neg_mode == "k_negatives" and self.neg_samp:
            ii = np.repeat(out.i, self.neg_samp)
            neg = ContextBatch(
                ii,
                rng.integers(0, self.n_context, len(ii)),
                -np.ones(len(ii), np.float32),
                np.repeat(out.graph, self.neg_samp),
            )
            out = ContextBatch.cat([out, neg])
        return out
