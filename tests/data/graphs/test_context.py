"""Planetoid context samplers (Algorithm 2 of Yang's thesis §3.3.3, and the sampler of the authors'
released code)."""

from __future__ import annotations

import numpy as np
import pytest

from genlab.data.graphs.context import (
    Adjacency,
    PaperSampler,
    ReferenceSampler,
    frac_count,
    largest_context_batch,
    window_pairs,
)


def _adj_from(lists: dict[int, list[int]], n: int, weights: dict[int, list[float]] | None = None) -> Adjacency:
    deg = [len(lists.get(k, [])) for k in range(n)]
    indptr = np.concatenate([[0], np.cumsum(deg)])
    indices = np.array([v for k in range(n) for v in lists.get(k, [])], np.int64)
    w = None if weights is None else np.array([x for k in range(n) for x in weights.get(k, [])])
    return Adjacency.build(indptr, indices, w)


# Figure 3.9-like 6-node graph, with a duplicate entry and a self-loop as in the real lists
FIG = {0: [1, 2], 1: [0, 3, 3], 2: [0, 4], 3: [1, 1, 5], 4: [2, 4, 4], 5: [3]}


def _edge_set(lists):
    return {(k, v) for k, vs in lists.items() for v in vs}


def test_walk_steps_follow_edges_and_have_the_right_length():
    adj, rng = _adj_from(FIG, 6), np.random.default_rng(0)
    walks = adj.walks(rng.integers(0, 6, 500), 10, rng)
    assert walks.shape == (500, 11)  # reference: path_size + 1 nodes
    edges = _edge_set(FIG)
    assert all((int(a), int(b)) in edges for a, b in zip(walks[:, :-1].ravel(), walks[:, 1:].ravel()))
    ps = PaperSampler(adj, np.array([0, 5]), np.array([0, 1]), q=7, d=3, r2=1.0, batch_size=10)
    assert ps.adj.walks(np.array([0]), ps.q - 1, rng).shape[1] == 7  # paper: q nodes


def test_duplicate_entries_weigh_the_walk():
    adj, rng = _adj_from(FIG, 6), np.random.default_rng(1)
    nxt = adj.step(np.full(30000, 1), rng)
    assert abs(np.mean(nxt == 3) - 2 / 3) < 0.02
    dedup = Adjacency.build(adj.indptr, adj.indices, dedup=True)
    assert abs(np.mean(dedup.step(np.full(30000, 1), rng) == 3) - 2 / 3) < 0.02  # weights keep multiplicity


def test_window_pair_counts_code_rule():
    for n, w in [(11, 3), (5, 1), (4, 10)]:
        j, k = window_pairs(n, w, "code")
        expect = sum(min(n - 1, l + w) - max(0, l - w) + 1 for l in range(n))
        assert len(j) == expect
    assert len(window_pairs(11, 3, "code")[0]) == 65
    adj = _adj_from(FIG, 6)
    s = ReferenceSampler(adj, np.array([0, 5]), np.array([0, 1]), g_batch_size=6, path_size=10, window=3)
    assert len(s.graph_batch()) == 6 * 65  # every node has neighbours, one walk each, no negatives


def test_window_pairs_paper_rule():
    j, k = window_pairs(10, 3, "paper")
    assert np.all((np.abs(j - k) > 0) & (np.abs(j - k) < 3))
    adj = _adj_from(FIG, 6)
    s = PaperSampler(adj, np.array([0, 5]), np.array([0, 1]), r1=1.0, r2=1.0, q=10, d=3, batch_size=2000)
    s.adj.walks = _recording(s.adj.walks)
    b = s.batch()
    walks = s.adj.walks.last
    # each triple's (i, c) must be two nodes at window distance 1..2 in its own walk
    for row, (i, c) in enumerate(zip(b.i[:200], b.c[:200])):
        pos_i, pos_c = np.flatnonzero(walks[row] == i), np.flatnonzero(walks[row] == c)
        assert any(0 < abs(a - bb) < 3 for a in pos_i for bb in pos_c)


def _recording(fn):
    def wrapped(*a, **k):
        wrapped.last = fn(*a, **k)
        return wrapped.last

    return wrapped


def test_label_context_pairs():
    labeled, labels = np.arange(10), np.array([0, 0, 0, 1, 1, 2, 2, 2, 2, 1])
    adj = _adj_from(FIG, 12 - 2)
    s = ReferenceSampler(adj, labeled, labels, g_sample_size=500, neg_samp=3)
    b = s.label_batch()
    lab = dict(zip(labeled, labels))
    pos, neg = b.gamma > 0, b.gamma < 0
    assert pos.sum() == 500 and neg.sum() == 1500 and not b.graph.any()
    assert all(lab[i] == lab[c] for i, c in zip(b.i[pos], b.c[pos]))
    assert all(lab[i] != lab[c] for i, c in zip(b.i[neg], b.c[neg]))
    assert set(b.i) | set(b.c) <= set(labeled)
    p = PaperSampler(adj, labeled, labels, r1=0.5, r2=0.0, batch_size=2000)
    pb = p.batch()
    assert all((lab[i] == lab[c]) == (g > 0) for i, c, g in zip(pb.i, pb.c, pb.gamma))
    one = ReferenceSampler(adj, labeled[:3], labels[:3], g_sample_size=50, neg_samp=2)
    assert len(one.label_batch()) == 0  # one labelled class: no label pairs
    one_p = PaperSampler(adj, labeled[:3], labels[:3], r2=0.0, batch_size=100).batch()
    assert one_p.graph.all()


def test_paper_sampler_r1_r2_statistics():
    adj = _adj_from(FIG, 6)
    s = PaperSampler(adj, np.arange(6), np.array([0, 0, 1, 1, 2, 2]), r1=5 / 6, r2=0.3, batch_size=100_000, seed=2)
    b = s.batch()
    assert len(b) == 100_000
    assert abs(np.mean(b.gamma > 0) - 5 / 6) < 0.01
    assert abs(np.mean(b.graph) - 0.3) < 0.01


def test_weighted_transitions_from_star_centre():
    adj = _adj_from({0: [1, 2], 1: [0], 2: [0]}, 3, weights={0: [1.0, 3.0], 1: [1.0], 2: [1.0]})
    nxt = adj.step(np.zeros(40000, np.int64), np.random.default_rng(0))
    assert abs(np.mean(nxt == 1) - 0.25) < 0.02 and abs(np.mean(nxt == 2) - 0.75) < 0.02


def test_weighted_transitions_karate():  # with the karate-club weights
    import networkx as nx

    g = nx.karate_club_graph()
    n = g.number_of_nodes()
    lists = {u: sorted(g.neighbors(u)) for u in g}
    weights = {u: [float(g[u][v]["weight"]) for v in lists[u]] for u in g}
    adj = _adj_from(lists, n, weights)
    nxt = adj.step(np.zeros(50000, np.int64), np.random.default_rng(0))
    total = sum(weights[0])
    for v, w in zip(lists[0], weights[0]):
        assert abs(np.mean(nxt == v) - w / total) < 0.02


def test_inductive_sampler_never_emits_test_nodes():
    # 0..3 training nodes, 4..5 test nodes; 1 and 2 are connected only through test node 4
    lists = {0: [1], 1: [0, 4], 2: [3, 4], 3: [2], 4: [1, 2, 5], 5: [4]}
    adj = _adj_from(lists, 6)
    s = ReferenceSampler(adj, np.array([0, 3]), np.array([0, 1]), g_batch_size=4, neg_samp=2, n_context=4, seed=0)
    seen_cross = False
    for _ in range(50):
        b = s.graph_batch()
        assert b.i.max() < 4 and b.c.max() < 4
        seen_cross |= bool(np.any(np.isin(b.i, [0, 1]) & np.isin(b.c, [2, 3]) & (b.gamma > 0)))
    assert seen_cross, "walks should pass through test node 4 and link 1 to 2"
    p = PaperSampler(adj, np.array([0, 3]), np.array([0, 1]), r2=1.0, r1=0.5, batch_size=5000, n_context=4)
    pb = p.batch()
    assert pb.i.max() < 4 and pb.c.max() < 4
    # inductive_walk_through_test=false: test nodes are removed from A
    cut = Adjacency.build(adj.indptr, adj.indices, drop_nodes=np.array([4, 5]))
    s2 = ReferenceSampler(cut, np.array([0, 3]), np.array([0, 1]), g_batch_size=4, n_context=4)
    for _ in range(20):
        b = s2.graph_batch()
        assert not np.any(np.isin(b.i, [0, 1]) & np.isin(b.c, [2, 3]))


def test_reference_start_nodes_cover_every_node_once_per_pass():
    lists = {0: [1], 1: [0], 2: [], 3: [4], 4: [3]}
    s = ReferenceSampler(_adj_from(lists, 5), np.array([0, 3]), np.array([0, 1]), g_batch_size=2)
    starts = np.concatenate([s._next_starts() for _ in range(2)])
    assert sorted(starts.tolist()) == [0, 1, 3, 4]  # node 2 has no neighbours and is skipped


def test_fractional_iteration_counts():
    rng = np.random.default_rng(0)
    draws = [frac_count(0.1, rng) for _ in range(10_000)]
    assert abs(np.mean(draws) - 0.1) < 0.01 and set(draws) == {0, 1}
    assert frac_count(3, rng) == 3 and frac_count(1.0, rng) == 1 and frac_count(0, rng) == 0


@pytest.mark.parametrize("mode", ["full_softmax", "k_negatives"])
def test_paper_sampler_modes(mode):
    adj = _adj_from(FIG, 6)
    s = PaperSampler(adj, np.arange(6), np.array([0, 0, 1, 1, 2, 2]), r2=0.5, batch_size=300, neg_mode=mode,
                     neg_samp=4)
    b = s.batch()
    if mode == "full_softmax":
        assert np.all(b.gamma > 0)
    else:
        assert np.sum(b.gamma < 0) == 4 * np.sum(b.gamma > 0)


@pytest.mark.parametrize("neg_samp", [0, 2])
def test_largest_context_batch_is_what_the_samplers_yield(neg_samp):
    # what the memory guard steps: the reference sampler's graph batch is every window pair of every walk
    adj, labels = _adj_from(FIG, 6), np.array([0, 0, 1, 1, 2, 2])
    ref = ReferenceSampler(adj, np.arange(6), labels, g_batch_size=4, g_sample_size=5, path_size=10, window=3,
                           neg_samp=neg_samp)
    rows = largest_context_batch("reference", 4, 5, 10, 3, "code", neg_samp, 7, "full_softmax")
    assert rows == 4 * 65 * (1 + neg_samp) == max(len(ref.graph_batch()), len(ref.label_batch()))
    for mode in ("full_softmax", "k_negatives"):
        paper = PaperSampler(adj, np.arange(6), labels, batch_size=7, neg_mode=mode, neg_samp=neg_samp)
        assert largest_context_batch("paper", 4, 5, 10, 3, "paper", neg_samp, 7, mode) == len(paper.batch())
