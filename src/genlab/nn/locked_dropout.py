"""Variational ("locked") dropout and embedding-row dropout (AWD-LSTM, Merity et al. 2018).

Locked dropout draws one Bernoulli mask per sequence and feature and reuses it at every time step, unlike
``nn.Dropout`` on a [B, T, F] tensor, which would resample per step. Embedding dropout removes whole word types
(rows of the embedding matrix) for one forward call.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn


class LockedDropout(nn.Module):
    """Batch-major ``[B, T, F]`` input; the mask has shape ``[B, 1, F]`` and is scaled by ``1 / (1 - p)``."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"LockedDropout probability must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        mask = x.new_empty(x.shape[0], 1, x.shape[-1]).bernoulli_(1.0 - self.p) / (1.0 - self.p)
        return x * mask

    def extra_repr(self) -> str:
        return f"p={self.p}"


def embedding_dropout(weight: Tensor, input_ids: Tensor, p: float, training: bool) -> Tensor:
    """Look up ``input_ids`` in ``weight`` after zeroing whole rows with probability ``p`` (kept rows scaled).

    Only the lookup sees the dropped matrix: a tied decoder keeps using the undropped ``weight``.
    """
    if training and p > 0.0:
        mask = weight.new_empty(weight.shape[0], 1).bernoulli_(1.0 - p) / (1.0 - p)
        weight = weight * mask
    return F.embedding(input_ids, weight)
