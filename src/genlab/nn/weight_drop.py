"""An LSTM layer with DropConnect on its hidden-to-hidden matrix (AWD-LSTM "weight drop", Merity et al. 2018).

The dropped matrix is computed from the raw parameter on every training call and passed to the fused kernel
(``torch.lstm``, the same op ``nn.LSTM`` dispatches to, cuDNN on GPU), so no parameter is deleted or swapped
behind PyTorch's back: it works across ``train()``/``eval()`` switches, under DDP, and keeps the fused kernel.
Gradients reach the raw ``weight_hh_l0`` only through its kept entries (scaled by ``1 / (1 - p)``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class WeightDropLSTM(nn.Module):
    """Single-layer unidirectional LSTM, batch-major; parameter names and init match ``nn.LSTM`` (layer 0).

    ``forward(x [B, T, in], state=(h [B, H], c [B, H]) or None) -> (out [B, T, H], (h, c))``.
    """

    def __init__(self, input_size: int, hidden_size: int, weight_dropout: float = 0.0):
        super().__init__()
        if not 0.0 <= weight_dropout < 1.0:
            raise ValueError(f"weight_dropout must be in [0, 1), got {weight_dropout}")
        self.input_size, self.hidden_size, self.weight_dropout = input_size, hidden_size, weight_dropout
        self.weight_ih_l0 = nn.Parameter(torch.empty(4 * hidden_size, input_size))
        self.weight_hh_l0 = nn.Parameter(torch.empty(4 * hidden_size, hidden_size))
        self.bias_ih_l0 = nn.Parameter(torch.empty(4 * hidden_size))
        self.bias_hh_l0 = nn.Parameter(torch.empty(4 * hidden_size))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size)  # nn.LSTM's default U(-1/sqrt(H), 1/sqrt(H))
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def recurrent_weight(self) -> Tensor:
        """``W_hh`` as used by this call: a fresh DropConnect sample in training, the raw matrix in eval."""
        if self.training and self.weight_dropout > 0.0:
            return F.dropout(self.weight_hh_l0, p=self.weight_dropout, training=True)
        return self.weight_hh_l0

    def forward(self, x: Tensor, state: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        if state is None:
            zeros = x.new_zeros(1, x.shape[0], self.hidden_size)
            hx = (zeros, zeros)
        else:
            hx = (state[0].unsqueeze(0), state[1].unsqueeze(0))
        weights = [self.weight_ih_l0, self.recurrent_weight(), self.bias_ih_l0, self.bias_hh_l0]
        out, h, c = torch.lstm(x, hx, weights, True, 1, 0.0, self.training, False, True)
        return out, (h.squeeze(0), c.squeeze(0))

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, weight_dropout={self.weight_dropout}"
