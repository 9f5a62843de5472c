"""Table 3.6 comparison rows that are cheap and standard: Feat, LP, GraphEmb (Yang's thesis §3.3.4).

Model selection (L2 strength) on the validation nodes only; test accuracy at the selected setting.
    python experiments/planetoid/baselines.py --path /path/to/planetoid --datasets cora citeseer --seeds 1 2 3
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from genlab.data.graphs.context import Adjacency, ReferenceSampler
from genlab.data.graphs.planetoid_format import load
from genlab.models.graph_baselines import (
    label_propagation,
    logistic_regression,
    predict,
    skipgram_embeddings,
)

L2_GRID = (1e-4, 1e-3, 1e-2, 1e-1)


def _select(train_x, train_y, val_x, val_y, test_x, test_y, n_classes) -> float:
    fits = [logistic_regression(train_x, train_y, n_classes, l2=l2) for l2 in L2_GRID]
    best = max(fits, key=lambda lin: (predict(lin, val_x) == val_y).mean())
    return float((predict(best, test_x) == test_y).mean())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--path", required=True)
    ap.add_argument("--datasets", nargs="+", default=["cora", "citeseer"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--graphemb-batches", type=int, default=300)
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name in args.datasets:
        g = load(args.path, name)
        L, val, te = g.n_labeled, g.val_idx(), g.test_idx
        y = g.labels
        t = time.time()
        feat = _select(g.features[:L], y[:L], g.features[val], y[val], g.features[te], y[te], g.n_classes)
        lp = label_propagation(g.indptr, g.indices, np.arange(L), y[:L], g.n_classes)
        lp_acc = float((lp[te].argmax(1) == y[te]).mean())
        ge = []
        for seed in args.seeds:
            adj = Adjacency.build(g.indptr, g.indices)
            s = ReferenceSampler(adj, np.arange(L), y[:L], g_batch_size=200, neg_samp=5, seed=seed)
            draws = (s.graph_batch() for _ in range(args.graphemb_batches))
            batches = ((b.i, b.c, torch.as_tensor(b.gamma)) for b in draws)
            emb = skipgram_embeddings(batches, g.num_nodes, 50, lr=0.01, seed=seed)
            ge.append(_select(emb[:L], y[:L], emb[val], y[val], emb[te], y[te], g.n_classes))
        print(f"{name}: Feat {feat:.3f} | LP {lp_acc:.3f} | GraphEmb {np.mean(ge):.3f} +- {np.std(ge):.3f} "
              f"({len(ge)} seeds) | {time.time() - t:.0f}s", flush=True)


if __name__ == "__main__":
    main()
