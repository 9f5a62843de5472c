"""Planetoid datasets (Citeseer, Cora, Pubmed in the ``ind.*`` format), offline minis, and the DataModule.

Tiers (``data.source``): ``path`` reads ``ind.<name>.*`` from ``data.path``; ``download`` fetches them from the
kimiyoung/planetoid repository with sha256 checks; ``mini`` writes ``karate`` (Zachary's karate club, networkx)
or ``synth`` (a stochastic-block-model citation graph) in the same file format.

A training batch is one step of the reference schedule (Algorithm 3 of Yang thesis §3.3.3): a list of sub-batches, each
either ``{"kind": "sup", "nodes"}`` (a supervised SGD step) or ``{"kind": "ctx", "i", "c", "gamma"}`` (a context step),
plus the shared node features ``x`` [N, F] and labels ``y`` [N] (-1 = unknown). The first batch holds the whole
unsupervised warm-up. Evaluation batches are ``{"x", "y", "nodes"}``.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, IterableDataset

from genlab.data.graphs.context import (
    Adjacency,
    ContextBatch,
    PaperSampler,
    ReferenceSampler,
    frac_count,
)
from genlab.data.graphs.planetoid_format import (
    KNOWN_SHA256,
    PlanetoidGraph,
    file_names,
    load,
    write_ind,
)
from genlab.data.sources.tiers import DatasetSpec, RemoteFile, locate
from genlab.errors import ConfigError

REPO_DATA = "https://raw.githubusercontent.com/kimiyoung/planetoid/master/data"
REAL = ("citeseer", "cora", "pubmed")
MINIS = ("karate", "synth")
# nodes, edges, classes (Yang thesis Table 3.5) and bag-of-words features of the
# released files: the sizes of a real graph before it is read (the memory check, synthetic full-size data)
PUBLISHED_SIZES = {"citeseer": (3_327, 4_732, 6, 3_703), "cora": (2_708, 5_429, 7, 1_433),
                   "pubmed": (19_717, 44_338, 3, 500)}


# --------------------------------------------------------------------------------------------------- minis
def build_karate(root: Path) -> None:
    """Zachary's karate club: 2 classes (club), one constant feature (so only the graph informs), nodes 0 and 33
    labelled. ind ids: 0 <- member 0, 1 <- member 33, 2..11 <- members 1..10 (unlabelled), 12..33 the test set."""
    import networkx as nx

    g = nx.karate_club_graph()
    order = [0, 33] + list(range(1, 11)) + list(range(11, 33))
    new_id = {old: new for new, old in enumerate(order)}
    labels = np.array([int(g.nodes[old]["club"] != "Mr. Hi") for old in order])
    graph = {new_id[u]: sorted(new_id[v] for v in g.neighbors(u)) for u in g.nodes}
    test_ids = np.random.default_rng(0).permutation(np.arange(12, 34))  # test.index is not sorted
    write_ind(root, "karate", np.ones((34, 1), np.float32), labels, 2, 2, 12, test_ids, graph)


def synthetic_planetoid(
    n_classes: int = 3,
    per_class: int = 100,
    p_in: float = 0.06,
    p_out: float = 0.004,
    vocab: int = 300,
    words: int = 12,
    signal: float = 0.25,
    labeled_per_class: int = 5,
    n_test: int = 100,
    n_featureless: int = 3,
    seed: int = 0,
) -> dict:
    """A stochastic block model with class-topic bag-of-words features (an offline stand-in), laid out like the real
    files, including the Citeseer corner cases: duplicate adjacency entries, self-loops, feature-less test-range ids."""
    rng = np.random.default_rng(seed)
    n = n_classes * per_class
    cls = np.repeat(np.arange(n_classes), per_class)
    prob = np.where(cls[:, None] == cls[None, :], p_in, p_out)
    upper = np.triu(rng.random((n, n)) < prob, 1)
    topics = rng.dirichlet(np.full(vocab, 0.1), n_classes)
    mix = signal * topics[cls] + (1 - signal) / vocab
    feats = np.zeros((n, vocab), np.float32)
    for k in range(n):  # one multinomial draw per document
        feats[k, rng.choice(vocab, size=words, p=mix[k] / mix[k].sum())] = 1.0
    # ids: labelled first (labeled_per_class of each class), then unlabelled, then the test range
    lab = np.concatenate([rng.choice(np.flatnonzero(cls == c), labeled_per_class, replace=False) for c in range(n_classes)])
    rest = rng.permutation(np.setdiff1d(np.arange(n), lab))
    test_old, unl_old = rest[:n_test], rest[n_test:]
    n_train = len(lab) + len(unl_old)
    total = n + n_featureless
    gaps = np.sort(rng.choice(np.arange(n_train, total), n_featureless, replace=False))
    test_new = np.setdiff1d(np.arange(n_train, total), gaps)
    old_to_new = np.empty(n, np.int64)
    old_to_new[np.concatenate([lab, unl_old, test_old])] = np.concatenate([np.arange(n_train), test_new])
    features = np.zeros((total, vocab), np.float32)
    labels = np.full(total, -1)
    features[old_to_new], labels[old_to_new] = feats, cls
    graph: dict[int, list[int]] = {k: [] for k in range(total)}
    for a, b in zip(*np.nonzero(upper)):
        graph[int(old_to_new[a])].append(int(old_to_new[b]))
        graph[int(old_to_new[b])].append(int(old_to_new[a]))
    for k in rng.choice(n_train, 5, replace=False):  # duplicate entries and self-loops, as in the real lists
        if graph[int(k)]:
            graph[int(k)].append(graph[int(k)][0])
        graph[int(k)].append(int(k))
    for j, k in enumerate(gaps):  # Citeseer-style: no features, no label; a self-loop or one citation
        graph[int(k)].append(int(k) if j % 2 == 0 else int(rng.integers(n_train)))
        if j % 2:
            graph[graph[int(k)][0]].append(int(k))
    test_ids = rng.permutation(test_new)
    return dict(
        features=features, labels=labels, n_classes=n_classes, n_labeled=len(lab), n_train=n_train,
        test_ids=test_ids, graph=graph,
    )


def build_synth(root: Path) -> None:
    write_ind(root, "synth", **synthetic_planetoid())


def dataset_spec(name: str) -> DatasetSpec:
    if name in REAL:
        downloads = tuple(RemoteFile(f"{REPO_DATA}/{f}", KNOWN_SHA256.get(f), f) for f in file_names(name))
        return DatasetSpec(name=f"planetoid-{name}", files=file_names(name), downloads=downloads,
                           homepage="https://github.com/kimiyoung/planetoid")
    if name == "karate":
        return DatasetSpec(name="planetoid-karate", files=file_names(name), build_mini=build_karate)
    if name == "synth":
        return DatasetSpec(name="planetoid-synth", files=file_names(name), build_mini=build_synth)
    raise ConfigError(f"data.name={name!r} is not a Planetoid dataset; use one of {REAL + MINIS}.")


# ------------------------------------------------------------------------------------------------ sampling
class PlanetoidSteps(IterableDataset):
    """Yields the warm-up batch, then ``steps`` schedule steps (Algorithm 3) as lists of sub-batches."""

    def __init__(self, dm: PlanetoidDataModule):
        self.dm = dm

    def __len__(self) -> int:
        return self.dm.steps + int(self.dm.has_warmup)

    def __iter__(self):
        # A resumed run draws the batches it already trained on again (the samplers' state is their history) and
        # skips them, so neither the warm-up nor any schedule step is trained twice.
        dm = self.dm
        dm.reset_samplers()
        skip, dm.resume_skip = dm.resume_skip, 0
        if dm.has_warmup:
            subs = [dm.label_sub() for _ in range(dm.warmup_label_iters)]
            subs += [dm.graph_sub() for _ in range(dm.warmup_graph_iters)]
            if skip:
                skip -= 1
            else:
                yield dm.bundle([s for s in subs if s is not None], warmup=True)
        for _ in range(dm.steps):
            subs = [dm.graph_sub() for _ in range(frac_count(dm.iter_graph, dm.rng))]
            subs += [dm.sup_sub() for _ in range(frac_count(dm.iter_inst, dm.rng))]
            subs += [dm.label_sub() for _ in range(frac_count(dm.iter_label, dm.rng))]
            if skip:
                skip -= 1
                continue
            yield dm.bundle([s for s in subs if s is not None], warmup=False)


class PlanetoidDataModule(pl.LightningDataModule):
    """Planetoid data and context sampling. ``sampler=reference`` uses ``path_size``/``window``/``neg_samp``/
    ``g_batch_size``/``g_sample_size``; ``sampler=paper`` uses ``r1``/``r2``/``q``/``d``/``context_batch_size``
    and counts its mixed Algorithm-2 batches with ``iter_graph`` / ``warmup_graph_iters`` (T2)."""

    data_parallel = False  # one stream of sampled steps (manual optimisation): the CLI refuses several processes

    def __init__(
        self,
        name: str = "cora",
        source: str = "path",
        path: str | None = None,
        cache_dir: str | None = None,
        inductive: bool = False,
        sampler: str = "reference",
        window_rule: str = "code",
        neg_mode: str = "full_softmax",
        neg_samp: int = 0,
        r1: float = 5 / 6,
        r2: float = 0.5,
        q: int = 10,
        d: int = 3,
        path_size: int = 10,
        window: int = 3,
        g_batch_size: int = 200,
        g_sample_size: int = 100,
        context_batch_size: int = 200,
        batch_size: int = 200,
        warmup_label_iters: int = 0,
        warmup_graph_iters: int = 0,
        iter_graph: float = 0.0,
        iter_inst: float = 1.0,
        iter_label: float = 0.0,
        steps: int = 2000,
        val_size: int = 500,
        dedup_adjacency: bool = False,
        inductive_walk_through_test: bool = True,
        seed: int = 0,
    ):
        super().__init__()
        if sampler not in ("reference", "paper"):
            raise ConfigError(f"data.sampler={sampler!r} must be 'reference' or 'paper'.")
        if sampler == "reference" and neg_mode == "r1_coin":
            raise ConfigError("data.neg_mode=r1_coin needs data.sampler=paper (the reference code has no r1 coin).")
        if sampler == "reference" and (neg_mode == "full_softmax") != (neg_samp == 0):
            raise ConfigError("data.sampler=reference: use neg_mode=full_softmax with neg_samp=0, or k_negatives "
                              "with neg_samp>0.")
        if sampler == "paper" and (warmup_label_iters or iter_label):
            raise ConfigError("data.sampler=paper mixes label context into every batch (r2); set "
                              "data.warmup_label_iters=0 and data.iter_label=0.")
        self.name, self.source, self.path, self.cache_dir = name, source, path, cache_dir
        self.inductive, self.sampler, self.window_rule, self.neg_mode = inductive, sampler, window_rule, neg_mode
        self.neg_samp, self.r1, self.r2, self.q, self.d = neg_samp, r1, r2, q, d
        self.path_size, self.window = path_size, window
        self.g_batch_size, self.g_sample_size, self.context_batch_size = g_batch_size, g_sample_size, context_batch_size
        self.batch_size = batch_size
        self.warmup_label_iters, self.warmup_graph_iters = warmup_label_iters, warmup_graph_iters
        self.iter_graph, self.iter_inst, self.iter_label = iter_graph, iter_inst, iter_label
        self.steps, self.val_size = steps, val_size
        self.dedup_adjacency, self.inductive_walk_through_test = dedup_adjacency, inductive_walk_through_test
        self.seed = seed
        self.graph: PlanetoidGraph | None = None

    # ---- setup
    def prepare_data(self) -> None:
        locate(dataset_spec(self.name), self.source, self.path, self.cache_dir)

    def setup(self, stage: str | None = None) -> None:
        if self.graph is not None:
            return
        root = locate(dataset_spec(self.name), self.source, self.path, self.cache_dir)
        g = self.graph = load(root, self.name)
        self.x = torch.from_numpy(g.features)
        self.y = torch.from_numpy(g.labels)
        drop = None
        if self.inductive and not self.inductive_walk_through_test:
            drop = np.arange(g.n_train, g.num_nodes)
        self.adj = Adjacency.build(g.indptr, g.indices, dedup=self.dedup_adjacency, drop_nodes=drop)
        self.n_context = g.n_train if self.inductive else g.num_nodes
        self.val_idx = g.val_idx(self.val_size)

    def model_overrides(self) -> dict:
        """Sizes only the data knows: features, classes, and the nodes that get context vectors."""
        assert self.graph is not None, "call setup() first"
        return {"n_features": self.graph.features.shape[1], "n_classes": self.graph.n_classes,
                "num_nodes": self.n_context}

    @property
    def has_warmup(self) -> bool:
        return self.warmup_label_iters + self.warmup_graph_iters > 0

    def reset_samplers(self) -> None:
        g = self.graph
        assert g is not None
        self.rng = np.random.default_rng(self.seed)
        labeled, labels = g.train_idx, g.labels[: g.n_labeled]
        sub_seed = int(self.rng.integers(2**31))
        if self.sampler == "reference":
            self.ctx = ReferenceSampler(
                self.adj, labeled, labels, self.g_batch_size, self.g_sample_size, self.path_size, self.window,
                self.neg_samp, self.window_rule, self.n_context, sub_seed,
            )
        else:
            self.ctx = PaperSampler(
                self.adj, labeled, labels, self.r1, self.r2, self.q, self.d, self.context_batch_size,
                self.neg_mode, self.neg_samp, self.window_rule, self.n_context, sub_seed,
            )
        self._sup_perm, self._sup_ptr = np.zeros(0, np.int64), 0

    # ---- sub-batches
    def sup_sub(self) -> dict:
        """The next ``batch_size`` labelled nodes of a shuffled cycle over the labelled set."""
        n = min(self.batch_size, self.graph.n_labeled)
        if self._sup_ptr + n > len(self._sup_perm):
            self._sup_perm, self._sup_ptr = self.rng.permutation(self.graph.n_labeled), 0
        nodes = self._sup_perm[self._sup_ptr : self._sup_ptr + n]
        self._sup_ptr += n
        return {"kind": "sup", "nodes": torch.from_numpy(nodes.copy())}

    @staticmethod
    def _ctx(b: ContextBatch) -> dict | None:
        if len(b) == 0:
            return None
        return {"kind": "ctx", "i": torch.from_numpy(b.i), "c": torch.from_numpy(b.c),
                "gamma": torch.from_numpy(b.gamma)}

    def graph_sub(self) -> dict | None:
        return self._ctx(self.ctx.graph_batch() if self.sampler == "reference" else self.ctx.batch())

    def label_sub(self) -> dict | None:
        return self._ctx(self.ctx.label_batch()) if self.sampler == "reference" else None

    def bundle(self, subs: list[dict], warmup: bool) -> dict:
        return {"x": self.x, "y": self.y, "subs": subs, "warmup": warmup}

    # ---- resumable position: batches consumed by training (counted after Lightning's prefetch)
    resume_skip = 0
    consumed = 0

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        if self.trainer is not None and self.trainer.training:
            self.consumed += 1
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"consumed": self.consumed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.consumed = self.resume_skip = int(state.get("consumed", 0))

    # ---- loaders
    def train_dataloader(self) -> DataLoader:
        return DataLoader(PlanetoidSteps(self), batch_size=None, num_workers=0)

    def _eval(self, nodes: np.ndarray) -> DataLoader:
        batch = {"x": self.x, "y": self.y, "nodes": torch.from_numpy(np.asarray(nodes, np.int64))}
        return DataLoader([batch], batch_size=None, collate_fn=partial(_identity))

    def val_dataloader(self) -> DataLoader:
        return self._eval(self.val_idx)

    def test_dataloader(self) -> DataLoader:
        return self._eval(self.graph.test_idx)


def _identity(b):
    return b
