"""Output of the recurrent language models (Transformer-XL, vanilla Transformer, AWD-LSTM); see CONTRIBUTING."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor


@dataclass
class LMOutput:
    """``nll``: [B, T'] fp32 per-token negative log-likelihood of the last T' = T - ext_len positions, or None
    without targets. ``memory``: detached state for the next segment of the same B streams (opaque to the task).
    ``logits``: optional [B, T', V] scores (None when the model uses an adaptive softmax)."""

    nll: Tensor | None
    memory: Any
    logits: Tensor | None = None
