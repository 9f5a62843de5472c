"""The [Linear, activation] stack the small MLPs of the GAN systems share."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import nn


def mlp_layers(in_dim: int, hidden: Sequence[int],
               act: Callable[[], nn.Module] = nn.ReLU) -> tuple[list[nn.Module], int]:
    """``[Linear(in_dim, h0), act(), Linear(h0, h1), act(), ...]`` and the last width (for the output layer)."""
    layers: list[nn.Module] = []
    prev = in_dim
    for width in hidden:
        layers += [nn.Linear(prev, width), act()]
        prev = width
    return layers, prev
