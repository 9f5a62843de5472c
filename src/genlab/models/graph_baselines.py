"""Cheap standard baselines of Yang thesis Table 3.6: Feat (logistic regression on features of the labelled
nodes), LP (label propagation, harmonic function of Zhu et al.), GraphEmb (skip-gram node embeddings trained on
context pairs, then logistic regression). Arrays in, predictions out; model selection is the caller's (on
validation nodes only)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch
import torch.nn.functional as F


def logistic_regression(
    x: np.ndarray, y: np.ndarray, n_classes: int, l2: float = 1e-3, iters: int = 200, seed: int = 0
) -> torch.nn.Linear:
    """Multinomial logistic regression, full-batch L-BFGS on mean CE + ``l2 * ||W||^2``."""
    torch.manual_seed(seed)
    xt, yt = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.long)
    lin = torch.nn.Linear(xt.shape[1], n_classes)
    opt = torch.optim.LBFGS(lin.parameters(), max_iter=iters, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(lin(xt), yt) + l2 * lin.weight.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return lin


def predict(lin: torch.nn.Linear, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return lin(torch.as_tensor(x, dtype=torch.float32)).argmax(-1).numpy()


def label_propagation(
    indptr: np.ndarray, indices: np.ndarray, labeled: np.ndarray, labels: np.ndarray, n_classes: int,
    iters: int = 2000, tol: float = 1e-8,
) -> np.ndarray:
    """Harmonic-function label propagation: iterate ``F <- D^-1 A F`` with labelled rows clamped to their one-hot
    labels, on the symmetric, de-duplicated graph without self-loops. Returns [N, C] class scores."""
    import scipy.sparse as sp

    n = len(indptr) - 1
    rows = np.repeat(np.arange(n), np.diff(indptr))
    keep = rows != indices
    a = sp.coo_matrix((np.ones(keep.sum()), (rows[keep], indices[keep])), shape=(n, n)).tocsr()
    a = ((a + a.T) > 0).astype(np.float64)
    deg = np.asarray(a.sum(1)).ravel()
    p = sp.diags(1.0 / np.maximum(deg, 1)) @ a
    clamp = np.zeros((len(labeled), n_classes))
    clamp[np.arange(len(labeled)), labels] = 1.0
    f = np.full((n, n_classes), 1.0 / n_classes)
    f[labeled] = clamp
    for _ in range(iters):
        nxt = p @ f
        nxt[deg == 0] = f[deg == 0]
        nxt[labeled] = clamp
        done = np.abs(nxt - f).max() < tol
        f = nxt
        if done:
            break
    return f


def skipgram_embeddings(
    batches: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]], num_nodes: int, dim: int = 50, lr: float = 0.01,
    seed: int = 0,
) -> np.ndarray:
    """DeepWalk-style embeddings: SGD on ``-log sigmoid(gamma * w_c^T e_i)`` (summed) over the given
    ``(i, c, gamma)`` context batches, with separate input and output tables."""
    g = torch.Generator().manual_seed(seed)
    emb = (torch.randn(num_nodes, dim, generator=g) * 0.01).requires_grad_()
    out = (torch.randn(num_nodes, dim, generator=g) * 0.01).requires_grad_()
    opt = torch.optim.SGD([emb, out], lr=lr)
    for i, c, gamma in batches:
        i, c, gamma = torch.as_tensor(i), torch.as_tensor(c), torch.as_tensor(gamma)
        loss = -F.logsigmoid(gamma * (emb[i] * out[c]).sum(-1)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return emb.detach().numpy()
