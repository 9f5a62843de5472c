"""Sinusoid position tables shared by the relative-attention models (Transformer-XL, XLNet).

Positions and tables are always built in fp32: in bf16, integers above 256 collapse, so long
evaluation windows would get duplicate positions.
"""

from __future__ import annotations

import torch
from torch import Tensor


def inverse_frequencies(d_model: int, device: torch.device | None = None) -> Tensor:
    """``1 / 10000^(2k/d)`` for k = 0..d/2-1, in fp32."""
    return 1.0 / (10000 ** (torch.arange(0, d_model, 2, device=device, dtype=torch.float32) / d_model))


def sinusoid_table(positions: Tensor, d_model: int) -> Tensor:
    """``[sin(p * f), cos(p * f)]`` concatenated (not interleaved) for each position; shape [len(positions), d]."""
    inv_freq = inverse_frequencies(d_model, positions.device)
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def relative_positions(
    klen: int,
    qlen: int | None = None,
    *,
    bidirectional: bool = False,
    clamp_len: int = -1,
    device: torch.device | None = None,
) -> Tensor:
    """Relative distances in descending order, fp32.

    Causal (Transformer-XL): ``[klen-1, ..., 0]``. Bidirectional (XLNet ``attn_type=bi``):
    ``[klen, ..., -qlen+1]``. ``clamp_len > 0`` clips distances to ``[-clamp_len, clamp_len]``.
    """
    end = -qlen if bidirectional else -1
    if bidirectional and qlen is None:
        raise ValueError("bidirectional relative positions need qlen")
    start = klen if bidirectional else klen - 1
    pos = torch.arange(start, end, -1.0, device=device, dtype=torch.float32)
    if clamp_len > 0:
        pos = pos.clamp(-clamp_len, clamp_len)
    return pos
