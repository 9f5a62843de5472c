"""Empirical rank of a language model's log-probability matrix (Dai thesis App. A.3.3, Table A.6).

Stack ``log P(.|context)`` over the contexts of a token stream into a [T, M] matrix A and count the singular
values above the Numerical-Recipes round-off threshold ``0.5 * sqrt(T + M + 1) * sigma_max * eps``, where ``eps``
is the machine epsilon of the dtype the log-probs were *computed* in (thresholding fp32 log-probs with the fp64
epsilon counts round-off as rank). The SVD itself always runs in float64. A Softmax head is bounded by d + 2
(bias and log-normaliser), MoC likewise, MoS is not.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def singular_values(matrix: Tensor, block_rows: int = 8192) -> Tensor:
    """Singular values of a tall [T, M] matrix in float64, via a blockwise QR (only an [M, M] factor is kept)."""
    matrix = matrix.to(torch.float64)
    if matrix.shape[0] <= max(block_rows, matrix.shape[1]):
        return torch.linalg.svdvals(matrix)
    r = None
    for start in range(0, matrix.shape[0], block_rows):
        block = matrix[start : start + block_rows]
        stacked = block if r is None else torch.cat([r, block])
        r = torch.linalg.qr(stacked, mode="r").R
    return torch.linalg.svdvals(r)


def rank_tolerance(sv: Tensor, shape: tuple[int, int], eps: float) -> float:
    return 0.5 * math.sqrt(shape[0] + shape[1] + 1) * sv.max().item() * eps


def numerical_rank(matrix: Tensor, eps: float | None = None) -> int:
    """Rank with the NR threshold; ``eps`` defaults to the epsilon of ``matrix``'s own dtype."""
    eps = torch.finfo(matrix.dtype).eps if eps is None else eps
    sv = singular_values(matrix)
    return int((sv > rank_tolerance(sv, tuple(matrix.shape), eps)).sum())


def singular_value_cdf(sv: Tensor, thresholds: Tensor) -> Tensor:
    """Figure A.1: fraction of singular values (normalised by the largest) below each threshold in [0, 1]."""
    normalised = sv / sv.max()
    return (normalised[None, :] <= thresholds[:, None]).double().mean(-1)


def pairwise_kl(log_probs: Tensor, n_pairs: int, generator: torch.Generator | None = None) -> tuple[float, float]:
    """Table A.11: mean and standard error of KL(P(.|c) || P(.|c')) over random context pairs (c != c' not
    enforced; the diagonal has measure ~1/T)."""
    n = log_probs.shape[0]
    i = torch.randint(n, (n_pairs,), generator=generator)
    j = torch.randint(n, (n_pairs,), generator=generator)
    kl = []
    for s in range(0, n_pairs, 4096):
        a, b = log_probs[i[s : s + 4096]].double(), log_probs[j[s : s + 4096]].double()
        kl.append((a.exp() * (a - b)).sum(-1))
    kl = torch.cat(kl)
    return kl.mean().item(), (kl.std() / math.sqrt(n_pairs)).item()


@torch.no_grad()
def collect_log_probs(model: nn.Module, tokens: Tensor, bptt: int = 70, dtype: torch.dtype = torch.float64) -> Tensor:
    """Run ``model`` (with a ``log_prob(input_ids, memory)`` method) over one stream in eval mode, batch 1,
    hidden state carried, and return the [len(tokens) - 1, M] log-probabilities, computed in ``dtype``."""
    if not hasattr(model, "log_prob"):
        raise TypeError(f"{type(model).__name__} has no log_prob(input_ids, memory) method")
    was_training, original_dtype = model.training, next(model.parameters()).dtype
    model.eval().to(dtype)
    try:
        memory, rows = None, []
        last = len(tokens) - 1  # the final token is only a target
        for start in range(0, last, bptt):
            chunk = tokens[start : min(start + bptt, last)].view(1, -1)
            log_p, memory = model.log_prob(chunk, memory)
            rows.append(log_p[0].cpu())
        return torch.cat(rows)
    finally:
        model.to(original_dtype).train(was_training)


def bottleneck_fit(target_log_p: Tensor, d: int, k: int, steps: int = 3000, lr: float = 0.05, seed: int = 1) -> float:
    """The rank argument of Dai thesis App. A.2: fit free context vectors [N, K, d], word vectors [M, d] and
    priors [N, K] to a target distribution matrix by Adam on the mean KL; K = 1 is a Softmax, K > 1 a mixture of
    softmaxes. Returns the final mean KL(target || model): a Softmax with d < rank - 1 cannot reach 0 (Corollary 1)."""
    gen = torch.Generator().manual_seed(seed)
    n, m = target_log_p.shape
    target_log_p = target_log_p.float()
    ctx = nn.Parameter(0.1 * torch.randn(n, k, d, generator=gen))
    words = nn.Parameter(0.1 * torch.randn(m, d, generator=gen))
    prior = nn.Parameter(torch.zeros(n, k))
    opt = torch.optim.Adam([ctx, words, prior], lr=lr)
    p = target_log_p.exp()
    for _ in range(steps):
        log_q = torch.logsumexp(F.log_softmax(prior, -1)[..., None] + F.log_softmax(ctx @ words.T, -1), dim=1)
        kl = (p * (target_log_p - log_q)).sum(-1).mean()
        opt.zero_grad()
        kl.backward()
        opt.step()
    return kl.item()
