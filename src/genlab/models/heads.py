"""Heads on top of a backbone (genlab.models.backbones): XLNet's sequence summary, classification/regression,
multiple choice, and the XLNet span-extraction head with start/end beam search and the answer-class head (XLNet
paper §3.2-§3.5; the heads of the authors' code).

Heads are initialised Normal(0, 0.02) with zero biases (the authors' code). Submodule names follow the Hugging Face
XLNet heads (``start_logits.dense``, ``end_logits.dense_0`` ...), so published finetuned heads map 1:1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from genlab.nn.views import output_view

NEG = 1e30  # official additive mask value


def _init(module: nn.Module, std: float) -> None:
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


class SequenceSummary(nn.Module):
    """XLNet's sequence summary (``summary_type=last, use_summ_proj``): ``dropout(tanh(W h_T + b))`` on the
    final content state of ``<cls>`` (the last position); with ``n_out``, projected to ``n_out`` logits
    (``logits_proj``, e.g. the next-sentence head of XLNet pretraining)."""

    def __init__(self, d_model: int, n_out: int | None = None, dropout: float = 0.1, init_std: float = 0.02):
        super().__init__()
        self.summary = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.logits_proj = nn.Linear(d_model, n_out) if n_out else None
        _init(self, init_std)

    def forward(self, hidden: Tensor) -> Tensor:
        pooled = self.dropout(torch.tanh(self.summary(hidden[:, -1])))
        return pooled if self.logits_proj is None else self.logits_proj(pooled)


class ClassificationHead(nn.Module):
    """``logits = W_c · summary + b_c``; ``n_labels=1`` is the STS-B regression head (scalar output)."""

    def __init__(self, d_model: int, n_labels: int, init_std: float = 0.02):
        super().__init__()
        self.n_labels = n_labels
        self.proj = nn.Linear(d_model, n_labels)
        _init(self, init_std)

    def forward(self, pooled: Tensor) -> Tensor:
        out = self.proj(pooled)
        return output_view(out, out.shape[:-1]) if self.n_labels == 1 else out

    def loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        if self.n_labels == 1:
            return F.mse_loss(logits.float(), labels.float())
        return F.cross_entropy(logits.float(), labels)


class MultipleChoiceHead(nn.Module):
    """RACE: summary of each option's sequence -> Linear(d, 1); logits regrouped ``[B, n_choices]`` (XLNet paper
    §3.2)."""

    def __init__(self, d_model: int, init_std: float = 0.02):
        super().__init__()
        self.proj = nn.Linear(d_model, 1)
        _init(self, init_std)

    def forward(self, pooled: Tensor, n_choices: int) -> Tensor:
        return output_view(self.proj(pooled), (-1, n_choices))

    @staticmethod
    def loss(logits: Tensor, labels: Tensor) -> Tensor:
        return F.cross_entropy(logits.float(), labels)


def masked_log_softmax(logits: Tensor, p_mask: Tensor, dim: int = -1) -> Tensor:
    """Official masking ``x·(1−p) − 1e30·p`` then log-softmax (p = 1 marks positions that cannot be answers)."""
    logits = _at_least_fp32(logits)
    p = p_mask.to(logits.dtype)
    return F.log_softmax(logits * (1 - p) - NEG * p, dim=dim)


def _at_least_fp32(x: Tensor) -> Tensor:
    """Masks and (log-)softmax in fp32 under bf16 autocast (CPU autocast keeps softmax in bf16); fp64 stays."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


@dataclass
class SpanBeams:
    start_top_log_probs: Tensor  # [B, start_n_top]
    start_top_index: Tensor      # [B, start_n_top]
    end_top_log_probs: Tensor    # [B, start_n_top * end_n_top], flat index i * end_n_top + j
    end_top_index: Tensor        # [B, start_n_top * end_n_top]
    cls_logits: Tensor           # [B] answer-class logit ("is impossible")


class SpanHead(nn.Module):
    """XLNet SQuAD head (XLNet paper §3.3): start logits, end logits conditioned on a start, answer-class logit."""

    forward_methods = ("beam",)  # the evaluation entry point besides forward (genlab.parallel)

    def __init__(self, d_model: int, layer_norm_eps: float = 1e-12, dropout: float = 0.1, init_std: float = 0.02):
        super().__init__()
        self.start_logits = nn.Module()
        self.start_logits.dense = nn.Linear(d_model, 1)
        self.end_logits = nn.Module()
        self.end_logits.dense_0 = nn.Linear(2 * d_model, d_model)
        self.end_logits.LayerNorm = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.end_logits.dense_1 = nn.Linear(d_model, 1)
        self.answer_class = nn.Module()
        self.answer_class.dense_0 = nn.Linear(2 * d_model, d_model)
        self.answer_class.dense_1 = nn.Linear(d_model, 1, bias=False)
        self.dropout = nn.Dropout(dropout)
        _init(self, init_std)

    # --- pieces -------------------------------------------------------------------------------------------------
    def start_log_probs(self, hidden: Tensor, p_mask: Tensor) -> tuple[Tensor, Tensor]:
        """Returns (masked start logits, start log-probs), both [B, T]."""
        s = _at_least_fp32(self.start_logits.dense(hidden).squeeze(-1))
        p = p_mask.to(s.dtype)
        masked = s * (1 - p) - NEG * p
        return masked, F.log_softmax(masked, dim=-1)

    def end_logits_given(self, hidden: Tensor, start_states: Tensor) -> Tensor:
        """``w_2ᵀ LN(tanh(W_1 [h_j ; h_start] + b_1)) + b_2``; start_states broadcast against hidden [..., T, d]."""
        shape = torch.broadcast_shapes(hidden.shape, start_states.shape)
        x = torch.cat([hidden.expand(shape), start_states.expand(shape)], dim=-1)
        x = self.end_logits.LayerNorm(torch.tanh(self.end_logits.dense_0(x)))
        return self.end_logits.dense_1(x).squeeze(-1)

    def answer_logit(self, hidden: Tensor, masked_start: Tensor, cls_index: Tensor) -> Tensor:
        """Answer class from the softmax-weighted start feature and h at ``cls_index`` (official, train and test)."""
        weights = torch.softmax(masked_start, dim=-1)  # in fp32 (start_log_probs upcasts masked_start)
        start_feature = torch.einsum("bt,btd->bd", weights.to(hidden.dtype), hidden)
        cls_feature = hidden[torch.arange(hidden.shape[0], device=hidden.device), cls_index]
        x = torch.tanh(self.answer_class.dense_0(torch.cat([start_feature, cls_feature], dim=-1)))
        return self.answer_class.dense_1(self.dropout(x)).squeeze(-1)

    # --- training -----------------------------------------------------------------------------------------------
    def forward(self, hidden: Tensor, p_mask: Tensor, cls_index: Tensor, start_positions: Tensor
                ) -> tuple[Tensor, Tensor, Tensor]:
        """Teacher-forced: (start log-probs [B,T], end log-probs [B,T] given the gold start, cls logits [B])."""
        masked_start, start_lp = self.start_log_probs(hidden, p_mask)
        bidx = torch.arange(hidden.shape[0], device=hidden.device)
        start_states = hidden[bidx, start_positions][:, None, :]
        end_lp = masked_log_softmax(self.end_logits_given(hidden, start_states), p_mask)
        return start_lp, end_lp, self.answer_logit(hidden, masked_start, cls_index)

    @staticmethod
    def loss(start_lp: Tensor, end_lp: Tensor, cls_logits: Tensor, start_positions: Tensor, end_positions: Tensor,
             is_impossible: Tensor | None) -> Tensor:
        """``0.5·(CE_start + CE_end) + 0.5·BCE(c, is_impossible)`` (the BCE term only for SQuAD 2.0)."""
        ce_s = F.nll_loss(start_lp.float(), start_positions)
        ce_e = F.nll_loss(end_lp.float(), end_positions)
        total = 0.5 * (ce_s + ce_e)
        if is_impossible is not None:
            total = total + 0.5 * F.binary_cross_entropy_with_logits(cls_logits.float(), is_impossible.float())
        return total

    # --- inference ----------------------------------------------------------------------------------------------
    @torch.no_grad()
    def beam(self, hidden: Tensor, p_mask: Tensor, cls_index: Tensor, start_n_top: int = 5, end_n_top: int = 5
             ) -> SpanBeams:
        """Top ``start_n_top`` starts; for each, end log-probs conditioned on it, top ``end_n_top`` ends."""
        masked_start, start_lp = self.start_log_probs(hidden, p_mask)
        k = min(start_n_top, hidden.shape[1])
        top_lp, top_idx = start_lp.topk(k, dim=-1)  # [B, k]
        bidx = torch.arange(hidden.shape[0], device=hidden.device)[:, None]
        start_states = hidden[bidx, top_idx][:, :, None, :]  # [B, k, 1, d]
        end_logits = self.end_logits_given(hidden[:, None], start_states)  # [B, k, T]
        end_lp = masked_log_softmax(end_logits, p_mask[:, None, :])
        e = min(end_n_top, hidden.shape[1])
        end_top_lp, end_top_idx = end_lp.topk(e, dim=-1)  # [B, k, e] -> flat i * e + j
        cls_logits = self.answer_logit(hidden, masked_start, cls_index)
        return SpanBeams(top_lp, top_idx, end_top_lp.flatten(1), end_top_idx.flatten(1), cls_logits)
