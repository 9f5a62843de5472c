"""A GRU/LSTM over right-padded batches that runs each row over its valid prefix only.

Rows are packed by length, so the backward direction of a bidirectional layer starts at the row's last *valid*
token, outputs at padded positions are exactly zero, and appending padding never changes a valid position.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

Cell = Literal["gru", "lstm"]


def row_lengths(mask: Tensor) -> Tensor:
    """Valid lengths of a ``[B, T]`` prefix mask, on the CPU as packing needs; empty rows count 1 (their
    position 0 is computed but stays masked everywhere else) because packing refuses length 0."""
    return mask.sum(1).clamp(min=1).cpu()


class PackedRNN(nn.Module):
    """``forward(x [B, T, in], mask [B, T]) -> (outputs [B, T, D·h], final [B, D·h])``, D = 2 if bidirectional.

    ``final`` is the last layer's final state: the forward direction's state at the last valid token,
    concatenated with the backward direction's state at the first token."""

    def __init__(self, input_size: int, hidden_size: int, cell: Cell = "gru", bidirectional: bool = True,
                 num_layers: int = 1) -> None:
        super().__init__()
        rnn = {"gru": nn.GRU, "lstm": nn.LSTM}[cell]
        self.rnn = rnn(input_size, hidden_size, num_layers=num_layers, batch_first=True, bidirectional=bidirectional)
        self.directions = 2 if bidirectional else 1
        self.output_size = self.directions * hidden_size

    def forward(self, x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        packed = pack_padded_sequence(x, row_lengths(mask), batch_first=True, enforce_sorted=False)
        out, state = self.rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        h_n = state[0] if isinstance(state, tuple) else state  # LSTM: (h, c)
        final = torch.cat(list(h_n[-self.directions:]), dim=-1)  # [B, D·h], rows back in input order
        return out, final
