"""Reshaping a module's output without making it an autograd view."""

from __future__ import annotations

import torch
from torch import Tensor


def output_view(x: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``x.view(shape)`` for a module's output, not recorded by autograd as a view of ``x``.

    FSDP2 warns about every view a sharded module returns from forward (an in-place op on one would skip the module's
    pre-backward hook). A module's last reshape (``[B·K] -> [B, K]``, a squeezed score, ``nn.Linear`` on 3-D input)
    leaves the reshaped tensor as the only holder of ``x``'s storage, so nothing aliases it: ``_unsafe_view`` is the
    op ``torch.matmul`` uses for its own output reshapes.
    """
    return torch.ops.aten._unsafe_view(x, shape)
