"""Projected adaptive log-softmax (Grave et al., 2017), in the Transformer-XL authors' variant
(``proj_adaptive_softmax.py`` of kimiyoung/transformer-xl).

Head = bin-0 words followed by one column per tail cluster, in natural order: tail bin i (1-based) uses
head column c1 + i - 1, i.e. ``cluster_weight`` row i - 1 (TF and HF order; the official PyTorch code
reverses the rows). log p(w in bin i) = log_softmax(head)[cluster_i] + log_softmax(tail_i)[w - start_i].
Output projections act as h -> h @ P_i (P_i is [d_model, d_i]). Log-probabilities are fp32 (fp64 for fp64
models), also under bf16/fp16 autocast.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from genlab.nn.adaptive_embedding import bin_bounds, bin_dims


class ProjectedAdaptiveLogSoftmax(nn.Module):
    """Hidden states [N, d_model] -> per-token NLL [N] or the full log-prob table [N, V].

    ``weights``/``biases`` hold one [V, d_embed] table (div_val == 1, sliced per bin) or one table per bin.
    ``projs`` is keyed by bin; with div_val == 1 every bin has its own projection when d_embed != d_model.
    The caller ties ``weights[i]`` and ``projs`` to an AdaptiveEmbedding by assigning the same Parameters.
    """

    def __init__(self, vocab_size: int, d_embed: int, d_model: int, cutoffs: list[int] | None = None,
                 div_val: int = 1, proj_same_dim: bool = True) -> None:
        super().__init__()
        cutoffs = list(cutoffs or [])
        self.vocab_size, self.div_val = vocab_size, div_val
        self.bounds = bin_bounds(vocab_size, cutoffs)
        self.n_bins = len(self.bounds) - 1
        self.n_clusters = self.n_bins - 1
        self.shortlist = self.bounds[1]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        self.projs = nn.ParameterDict()
        if div_val == 1:
            self.weights.append(nn.Parameter(torch.zeros(vocab_size, d_embed)))
            self.biases.append(nn.Parameter(torch.zeros(vocab_size)))
            if d_embed != d_model:
                for i in range(self.n_bins):
                    self.projs[str(i)] = nn.Parameter(torch.zeros(d_model, d_embed))
        else:
            for i, d_i in enumerate(bin_dims(d_embed, self.n_bins, div_val)):
                size = self.bounds[i + 1] - self.bounds[i]
                self.weights.append(nn.Parameter(torch.zeros(size, d_i)))
                self.biases.append(nn.Parameter(torch.zeros(size)))
                if proj_same_dim or d_i != d_model:
                    self.projs[str(i)] = nn.Parameter(torch.zeros(d_model, d_i))
        if self.n_clusters > 0:
            self.cluster_weight = nn.Parameter(torch.zeros(self.n_clusters, d_embed))
            self.cluster_bias = nn.Parameter(torch.zeros(self.n_clusters))

    def proj(self, i: int) -> Tensor | None:
        return self.projs[str(i)] if str(i) in self.projs else None

    def _bin_tables(self) -> list[tuple[Tensor, Tensor]]:
        """(weight, bias) of every bin, bin 0 with the cluster rows appended. A shared [V, d] table is cut with
        one ``split`` per forward: its backward writes one [V, d] gradient, where a slice per bin would
        materialise a zero-filled [V, d] gradient for each bin and add them up."""
        if self.div_val == 1:
            sizes = [hi - lo for lo, hi in zip(self.bounds[:-1], self.bounds[1:])]
            tables = list(zip(self.weights[0].split(sizes), self.biases[0].split(sizes)))
        else:
            tables = list(zip(self.weights, self.biases))
        if self.n_clusters > 0:
            w, b = tables[0]
            tables[0] = (torch.cat([w, self.cluster_weight], dim=0), torch.cat([b, self.cluster_bias], dim=0))
        return tables

    def _log_softmax(self, h: Tensor, i: int, tables: list[tuple[Tensor, Tensor]]) -> Tensor:
        """Log-softmax of bin i's logits in at least fp32 (bin 0 includes the cluster columns)."""
        w, b = tables[i]
        p = self.proj(i)
        x = h if p is None else h @ p
        logits = F.linear(x, w, b)
        return logits.to(torch.promote_types(logits.dtype, torch.float32)).log_softmax(dim=-1)

    def log_prob(self, h: Tensor) -> Tensor:
        """Full table [N, V] of fp32 log-probabilities."""
        tables = self._bin_tables()
        head = self._log_softmax(h, 0, tables)
        parts = [head[:, : self.shortlist]]
        for i in range(1, self.n_bins):
            parts.append(head[:, self.shortlist + i - 1, None] + self._log_softmax(h, i, tables))
        return torch.cat(parts, dim=-1)

    def forward(self, h: Tensor, target: Tensor) -> Tensor:
        """Per-token NLL [N] (fp32) of ``target`` [N]; tails are evaluated only on the tokens that need them."""
        tables = self._bin_tables()
        head = self._log_softmax(h, 0, tables)
        if self.n_clusters == 0:
            return -head.gather(1, target[:, None]).squeeze(1)
        nll = torch.empty(target.shape, dtype=head.dtype, device=h.device)
        in_head = target < self.shortlist
        idx = in_head.nonzero(as_tuple=True)[0]
        nll[idx] = -head[idx].gather(1, target[idx, None]).squeeze(1)
        for i in range(1, self.n_bins):
            lo, hi = self.bounds[i], self.bounds[i + 1]
            idx = ((target >= lo) & (target < hi)).nonzero(as_tuple=True)[0]
            if idx.numel() == 0:
                continue
            tail = self._log_softmax(h[idx], i, tables)
            lp = head[idx, self.shortlist + i - 1] + tail.gather(1, (target[idx] - lo)[:, None]).squeeze(1)
            nll[idx] = -lp
        return nll
