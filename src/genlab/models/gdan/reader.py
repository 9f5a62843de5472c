"""GDAN's discriminative QA model D: a gated-attention reader with span output and domain tags
(Yang thesis §3.2.4).

Default form (``reencode_per_layer=True``, Dhingra et al.'s GA reader): each of the first K-1 layers runs a fresh
paragraph BiGRU over the current paragraph input and a fresh question BiGRU over the question embeddings, attends
every paragraph position over the question (softmax of dot products, padded question positions excluded) and gates
the paragraph states with the attended question vector; the K-th layer is a plain BiGRU over the gated states and
the ``qe_comm`` feature. ``reencode_per_layer=False`` is the thesis' literal recursion: one paragraph BiGRU (its
input carries ``qe_comm``), one question BiGRU, then K gating steps on the same question states.

Two linear scorers (or bilinear with the final question state) on top give start/end log-probabilities over the
paragraph's valid positions. The domain tags ``d_true``/``d_gen`` are two extra vocabulary rows (ids ``vocab_size``
and ``vocab_size + 1``); ``tag`` appends one to both the question and the paragraph, and the paragraph's tag
position is never a legal answer position. Without ``tag`` nothing is appended.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from genlab.models.gdan.features import (
    TokenEmbedding,
    append_tag,
    masked_log_softmax,
    question_overlap,
)
from genlab.nn.packed_rnn import PackedRNN

Gating = Literal["ga", "matrix_attn"]
GatingFn = Literal["mul", "sum", "concat"]
SpanScorer = Literal["linear", "bilinear"]


@dataclass
class ReaderOutput:
    start_log_probs: Tensor  # [B, T] over the paragraph's valid positions (-inf elsewhere, incl. the tag slot)
    end_log_probs: Tensor    # [B, T]
    hidden: Tensor           # [B, T, 2h] question-aware paragraph states H_p^K (the GAN baseline's features)
    answer_mask: Tensor      # [B, T] positions that may start or end an answer (= the untagged paragraph mask)

    def log_likelihood(self, start: Tensor, end: Tensor) -> Tensor:
        """``log P_D(a | p, q) = log p_start[j] + log p_end[k]`` per example ([B])."""
        s = self.start_log_probs.gather(1, start[:, None]).squeeze(1)
        e = self.end_log_probs.gather(1, end[:, None]).squeeze(1)
        return s + e


def gated_attention(doc: Tensor, qry: Tensor, q_mask: Tensor) -> tuple[Tensor, Tensor]:
    """``alpha_ij = softmax_j(q_j · d_i)`` over valid question positions; returns (``sum_j alpha_ij q_j`` [B, T, d],
    alpha [B, T, T'] with rows summing to 1 and exact zeros on padded question positions)."""
    scores = torch.bmm(doc, qry.transpose(1, 2)).masked_fill(~q_mask[:, None, :], float("-inf"))
    alpha = torch.softmax(scores, dim=-1)
    return torch.bmm(alpha, qry), alpha


class MatrixAttention(nn.Module):
    """fg-gating's active gating layer (the GA reader code, kimiyoung/fg-gating):
    ``att_ij = v1ᵀ tanh(d_i ⊙ q_j) + v2ᵀ q_j + w_m·match_ij``, softmax over valid j, output
    ``sum_j att_ij tanh(d_i ⊙ q_j)``. ``match_ij`` = 1 when the two tokens have the same id (our stand-in for
    fg-gating's precomputed match feature, with one learned weight)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.v1 = nn.Linear(dim, 1, bias=False)
        self.v2 = nn.Linear(dim, 1, bias=False)
        self.w_match = nn.Parameter(torch.zeros(()))

    def forward(self, doc: Tensor, qry: Tensor, q_mask: Tensor, match: Tensor) -> Tensor:
        inter = torch.tanh(doc[:, :, None, :] * qry[:, None, :, :])  # [B, T, T', d]
        scores = self.v1(inter).squeeze(-1) + self.v2(qry).transpose(1, 2) + self.w_match * match
        att = torch.softmax(scores.masked_fill(~q_mask[:, None, :], float("-inf")), dim=-1)
        return (att[..., None] * inter).sum(2)


class GAReader(nn.Module):
    def __init__(self, vocab_size: int, embed_dim: int = 100, hidden: int = 128, num_layers: int = 3,
                 dropout: float = 0.3, gating: Gating = "ga", gating_fn: GatingFn = "mul",
                 reencode_per_layer: bool = True, span_scorer: SpanScorer = "linear", qe_comm: bool = True,
                 freeze_word_emb: bool = False, pad_id: int = 0, unk_id: int = 1) -> None:
        super().__init__()
        if num_layers < (2 if reencode_per_layer else 1):
            raise ValueError(f"num_layers={num_layers}: the GA-reader form needs >= 2 (K-1 gated layers + the "
                             "output BiGRU); the literal recursion needs >= 1.")
        if gating == "matrix_attn" and gating_fn != "mul":
            raise ValueError("gating_fn applies to gating='ga' only; leave it 'mul' with 'matrix_attn'.")
        if not reencode_per_layer and gating_fn == "concat":
            raise ValueError("gating_fn='concat' widens the states at every step; use it with reencode_per_layer.")
        self.vocab_size, self.pad_id, self.unk_id = vocab_size, pad_id, unk_id
        self.num_layers, self.reencode, self.gating, self.gating_fn = num_layers, reencode_per_layer, gating, gating_fn
        self.span_scorer = span_scorer
        self.embed = TokenEmbedding(vocab_size + 2, embed_dim, freeze=freeze_word_emb,
                                    trainable_ids=[unk_id, vocab_size, vocab_size + 1])
        d = 2 * hidden
        gated = 2 * d if gating_fn == "concat" else d  # width of a gated layer's output
        self.qe_embed = nn.Embedding(2, 2) if qe_comm else None  # fg-gating's 2x2 feature lookup
        qe_dim = 2 if qe_comm else 0
        n_gates = num_layers - 1 if reencode_per_layer else num_layers
        if reencode_per_layer:
            ins = [embed_dim] + [gated] * (num_layers - 2) + [gated + qe_dim]
            self.doc_rnns = nn.ModuleList(PackedRNN(i, hidden) for i in ins)
            # the K-th question BiGRU only feeds the bilinear scorer's final question state
            n_q = num_layers if span_scorer == "bilinear" else num_layers - 1
            self.qry_rnns = nn.ModuleList(PackedRNN(embed_dim, hidden) for _ in range(n_q))
        else:
            self.doc_rnns = nn.ModuleList([PackedRNN(embed_dim + qe_dim, hidden)])
            self.qry_rnns = nn.ModuleList([PackedRNN(embed_dim, hidden)])
        self.matrix_attn = None
        if gating == "matrix_attn":
            self.matrix_attn = nn.ModuleList(MatrixAttention(d) for _ in range(n_gates))
        self.dropout = nn.Dropout(dropout)
        if span_scorer == "linear":
            self.start_scorer, self.end_scorer = nn.Linear(d, 1), nn.Linear(d, 1)
        else:
            self.start_scorer, self.end_scorer = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.hidden_size = d

    def tag_id(self, code: int) -> int:
        """Vocabulary id of a domain code (features.TAG_TRUE / TAG_GEN)."""
        return self.vocab_size + code

    def tagged(self, ids: Tensor, mask: Tensor, tag: Tensor | None) -> tuple[Tensor, Tensor]:
        """The sequence D reads: ``ids`` with the tag of ``tag`` (domain codes [B]) appended, or unchanged."""
        if tag is None:
            return ids, mask
        return append_tag(ids, mask, tag + self.vocab_size)

    def _gate(self, i: int, doc: Tensor, qry: Tensor, q_mask: Tensor, match: Tensor | None) -> Tensor:
        if self.matrix_attn is not None:
            return self.matrix_attn[i](doc, qry, q_mask, match)
        attended, _ = gated_attention(doc, qry, q_mask)
        if self.gating_fn == "mul":
            out = doc * attended
        elif self.gating_fn == "sum":
            out = doc + attended
        else:
            out = torch.cat([doc, attended], dim=-1)
        return self.dropout(out)

    def forward(self, p_ids: Tensor, p_mask: Tensor, q_ids: Tensor, q_mask: Tensor,
                tag: Tensor | None = None) -> ReaderOutput:
        """p_ids/p_mask [B, T], q_ids/q_mask [B, T'] (D's vocabulary, right-padded); tag: domain codes [B] or None."""
        n = p_ids.shape[1]
        qe = question_overlap(p_ids, p_mask, q_ids, q_mask, self.unk_id)  # before tagging: the shared tag is no overlap
        p_ids_t, p_mask_t = self.tagged(p_ids, p_mask, tag)
        q_ids_t, q_mask_t = self.tagged(q_ids, q_mask, tag)
        if tag is not None:
            qe = nn.functional.pad(qe, (0, 1))
        e_p, e_q = self.embed(p_ids_t), self.embed(q_ids_t)
        match = None
        if self.matrix_attn is not None:
            match = ((p_ids_t[:, :, None] == q_ids_t[:, None, :]) & q_mask_t[:, None, :]).to(e_p.dtype)
        feats = [self.qe_embed(qe)] if self.qe_embed is not None else []
        q_final = None
        if self.reencode:
            x = e_p
            for k in range(self.num_layers - 1):
                doc, _ = self.doc_rnns[k](x, p_mask_t)
                qry, _ = self.qry_rnns[k](e_q, q_mask_t)
                x = self._gate(k, doc, qry, q_mask_t, match)
            h, _ = self.doc_rnns[-1](torch.cat([x, *feats], dim=-1), p_mask_t)
            if self.span_scorer == "bilinear":
                _, q_final = self.qry_rnns[-1](e_q, q_mask_t)
        else:
            h, _ = self.doc_rnns[0](torch.cat([e_p, *feats], dim=-1), p_mask_t)
            qry, q_final = self.qry_rnns[0](e_q, q_mask_t)
            for k in range(self.num_layers):
                h = self._gate(k, h, qry, q_mask_t, match)
        h = h[:, :n]  # paragraph positions only: the appended tag slot (if any) is dropped here ...
        if self.span_scorer == "linear":
            s, e = self.start_scorer(h).squeeze(-1), self.end_scorer(h).squeeze(-1)
        else:
            s = torch.einsum("btd,bd->bt", h, self.start_scorer(q_final))
            e = torch.einsum("btd,bd->bt", h, self.end_scorer(q_final))
        # ... or masked here when it sits inside the padded width: only the untagged paragraph can be an answer
        return ReaderOutput(masked_log_softmax(s, p_mask), masked_log_softmax(e, p_mask), h, p_mask)
