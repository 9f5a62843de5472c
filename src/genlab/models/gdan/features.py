"""Embedding and input-feature code shared by GDAN's reader D and generator G (Yang thesis §3.2.4).

Sequences are right-padded ``[B, T]`` id tensors with a boolean validity mask whose valid positions form a prefix.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

TAG_TRUE, TAG_GEN = 0, 1  # domain codes: d_true (human data, and every evaluation), d_gen (generated data)


class TokenEmbedding(nn.Module):
    """Word embeddings that may be frozen (e.g. GloVe, ``freeze=True``) while the rows in ``trainable_ids``
    (domain tags, ``<unk>``) stay trainable: those rows live in a separate small table that overrides the lookup
    (a frozen table must not freeze the tags)."""

    def __init__(self, vocab_size: int, dim: int, freeze: bool = False, trainable_ids: Sequence[int] = (),
                 init_std: float = 0.1) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(vocab_size, dim) * init_std, requires_grad=not freeze)
        self.frozen = freeze
        self.special = None
        if freeze and trainable_ids:
            ids = torch.tensor(sorted(set(trainable_ids)))
            index = torch.full((vocab_size,), -1, dtype=torch.long)
            index[ids] = torch.arange(len(ids))
            self.register_buffer("special_index", index)
            self.special = nn.Parameter(self.weight.detach()[ids].clone())

    @torch.no_grad()
    def load_pretrained(self, vectors: Tensor, rows: Tensor | None = None) -> None:
        """Copy ``vectors`` into ``rows`` (default: the first ``len(vectors)`` rows); the trainable special rows keep
        their own values."""
        rows = torch.arange(len(vectors)) if rows is None else rows
        self.weight[rows] = vectors.to(self.weight.dtype)

    def forward(self, ids: Tensor) -> Tensor:
        out = F.embedding(ids, self.weight)
        if self.special is None:
            return out
        slot = self.special_index[ids]
        return torch.where((slot >= 0)[..., None], F.embedding(slot.clamp(min=0), self.special), out)


def append_tag(ids: Tensor, mask: Tensor, tag_ids: Tensor) -> tuple[Tensor, Tensor]:
    """Put ``tag_ids[b]`` at the first padding slot of row b (one column is added so a full row has room) and
    extend the mask over it (Yang thesis §3.2.4: the tag is appended to the end of the question and the paragraph)."""
    ids = F.pad(ids, (0, 1))
    mask = F.pad(mask, (0, 1))
    pos = mask.sum(1, keepdim=True)
    ids = ids.scatter(1, pos, tag_ids[:, None].to(ids.dtype))
    mask = mask.scatter(1, pos, torch.ones_like(pos, dtype=torch.bool))
    return ids, mask


def question_overlap(p_ids: Tensor, p_mask: Tensor, q_ids: Tensor, q_mask: Tensor, unk_id: int = 1) -> Tensor:
    """``qe_comm``: 1 where the paragraph token's id occurs among the question's valid ids, else 0 (long [B, T]).
    ``<unk>`` (``unk_id``) matches nothing: two out-of-vocabulary words are not the same word."""
    hit = (p_ids[:, :, None] == q_ids[:, None, :]) & q_mask[:, None, :]
    return (hit.any(-1) & p_mask & (p_ids != unk_id)).long()


def answer_indicator(start: Tensor, end: Tensor, length: int) -> Tensor:
    """G's answer channel: 1.0 exactly on positions ``start..end`` (inclusive), else 0 (float [B, length])."""
    pos = torch.arange(length, device=start.device)[None, :]
    return ((pos >= start[:, None]) & (pos <= end[:, None])).float()


def answer_type_indicator(ids: Tensor, mask: Tensor, start: Tensor, end: Tensor) -> Tensor:
    """The ``type_match`` reading of "if a word token appears in the answer": 1.0 at every valid position whose id
    occurs inside the answer span (our reading; the thesis does not define it)."""
    inside = answer_indicator(start, end, ids.shape[1]).bool() & mask
    hit = (ids[:, :, None] == ids[:, None, :]) & inside[:, None, :]
    return (hit.any(-1) & mask).float()


def masked_log_softmax(logits: Tensor, mask: Tensor, dim: int = -1) -> Tensor:
    """log-softmax over the positions where ``mask`` is true; exactly -inf (probability 0) elsewhere."""
    return torch.log_softmax(logits.masked_fill(~mask, float("-inf")), dim=dim)
