"""Adaptive input embedding (Baevski & Auli), as used by Transformer-XL (the authors' ``AdaptiveEmbedding``).

The frequency-sorted vocabulary is split at ``cutoffs`` into bins; bin i has a table of width
``d_embed // div_val**i`` and a projection P_i [d_model, d_i] back to d_model. The output is scaled by
sqrt(d_model) (not sqrt(d_i)). With ``div_val == 1`` there is one [V, d_embed] table and at most one
projection (only when d_embed != d_model).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def bin_bounds(vocab_size: int, cutoffs: list[int]) -> list[int]:
    """[0, c1, ..., cn, V]; raises on unsorted or out-of-range cutoffs."""
    bounds = [0, *cutoffs, vocab_size]
    if any(a >= b for a, b in zip(bounds, bounds[1:])):
        raise ValueError(f"cutoffs must be strictly increasing and below vocab_size={vocab_size}, got {cutoffs}")
    return bounds


def bin_dims(d_embed: int, n_bins: int, div_val: int) -> list[int]:
    """Embedding width of each bin: d_embed // div_val**i (all d_embed when div_val == 1)."""
    return [d_embed // (div_val**i) for i in range(n_bins)]


class AdaptiveEmbedding(nn.Module):
    """Token ids [..] -> embeddings [.., d_model] scaled by sqrt(d_model).

    ``proj_same_dim=False`` drops the projection of any bin whose width already equals d_model (TF LM1B).
    Projections live in ``projs`` keyed by bin index (a missing key means identity).
    """

    def __init__(self, vocab_size: int, d_embed: int, d_model: int, cutoffs: list[int] | None = None,
                 div_val: int = 1, proj_same_dim: bool = True) -> None:
        super().__init__()
        cutoffs = list(cutoffs or [])
        self.vocab_size, self.d_embed, self.d_model, self.div_val = vocab_size, d_embed, d_model, div_val
        self.bounds = bin_bounds(vocab_size, cutoffs)
        self.scale = d_model**0.5
        self.tables = nn.ModuleList()
        self.projs = nn.ParameterDict()
        if div_val == 1:
            self.tables.append(nn.Embedding(vocab_size, d_embed))
            if d_embed != d_model:
                self.projs["0"] = nn.Parameter(torch.zeros(d_model, d_embed))
        else:
            for i, d_i in enumerate(bin_dims(d_embed, len(self.bounds) - 1, div_val)):
                self.tables.append(nn.Embedding(self.bounds[i + 1] - self.bounds[i], d_i))
                if proj_same_dim or d_i != d_model:
                    self.projs[str(i)] = nn.Parameter(torch.zeros(d_model, d_i))

    def proj(self, i: int) -> Tensor | None:
        return self.projs[str(i)] if str(i) in self.projs else None

    def forward(self, ids: Tensor) -> Tensor:
        if self.div_val == 1:
            out = self.tables[0](ids)
            p = self.proj(0)
            out = out if p is None else F.linear(out, p)
            return out * self.scale
        flat = ids.reshape(-1)
        p0 = self.proj(0)
        dtype = p0.dtype if p0 is not None else self.tables[0].weight.dtype
        out = torch.zeros(flat.numel(), self.d_model, dtype=dtype, device=ids.device)
        for i, table in enumerate(self.tables):
            lo, hi = self.bounds[i], self.bounds[i + 1]
            idx = ((flat >= lo) & (flat < hi)).nonzero(as_tuple=True)[0]
            if idx.numel() == 0:
                continue
            e = table(flat[idx] - lo)
            p = self.proj(i)
            out.index_copy_(0, idx, (e if p is None else F.linear(e, p)).to(out.dtype))
        return out.view(*ids.shape, self.d_model) * self.scale
