"""XLNet two-stream relative attention (XLNet paper, Yang et al. 2019, §2.3-§2.5, App. A.2).

Score of query i (original position) on key j of ``[mem; h]`` (length K = M + T), per head::

    A_ij = [(q_i + u)·k_j + (q_i + v)·r_{M+i-j} + (q_i + b)·s_ij] / sqrt(d_h)

The positional and segment terms are folded into one additive bias per layer and the content term runs inside
``F.scaled_dot_product_attention``. The positional scores are computed once against the whole distance table
``[K, ..., -T+1]`` and re-indexed as a strided view (``relative_shift``: entry (i, j) is table index ``T - i + j``),
written out once together with the mask. Only the difference ``s_- - s_+`` of the segment term matters: ``(q_i+b)·s_+`` is one
constant per query row, which softmax ignores, so the segment bias is ``diff_ij · (q_i+b)·(s_- - s_+)``.

With a bias that needs a gradient, SDPA can only use its unfused math path; training therefore runs the same
math as Transformer-XL's (``relative_attention.attend_with_bias_grad``: one ``baddbmm`` accumulating the scaled q·k
into the bias, then a plain softmax); without gradients SDPA's fused kernel is used.

The query stream works on its P prediction slots only (never on all T positions): slot p sits at position
``pos_p`` and reads positional scores at ``T - pos_p + j`` via one gather. Keys and values always come from
the content stream; padding slots (all-zero target_mapping row) get a zero attention vector.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from genlab.nn.relative_attention import attend_with_bias_grad

# Additive value of blocked keys (official/HF fp32 masking). A row with no visible key then attends uniformly
# to every key; under ``empty_row_policy="zero"`` the model zeroes such query-stream rows (``slot_valid``).
MASK_FILL = -1e30


def relative_shift(scores: Tensor, qlen: int) -> Tensor:
    """View ``[..., T, K+T]`` scores against distances ``[K..-T+1]`` as ``[..., T, K]`` with entry (i, j) at
    distance ``M + i - j`` (column ``T - i + j``). No copy: each [T, K+T] block of the input must be contiguous."""
    *lead, t, width = scores.shape
    klen = width - qlen
    stride = list(scores.stride())
    return scores.as_strided(
        (*lead, t, klen), (*stride[:-2], width - 1, 1), scores.storage_offset() + qlen
    )


class _ShiftedBias(torch.autograd.Function):
    """``relative_shift(scores, qlen) + add`` written out once, contiguous (``add``: a mask or None; no gradient).

    Autograd's backward for the strided view zero-fills the whole [..., T, K+T] table and scatters into it; of each
    table row only K entries are read, so this backward writes the gradient into its strided place and zeroes the
    T other entries of the row alone (one pass over the table instead of two).
    """

    @staticmethod
    def forward(ctx, scores: Tensor, qlen: int, add: Tensor | None, shape: tuple[int, ...]) -> Tensor:
        """``shape``: the output's, a contiguous regrouping of the view's (e.g. [n_dir, B', H] -> [B, H])."""
        view = relative_shift(scores, qlen)
        ctx.qlen, ctx.layout = qlen, (scores.shape, scores.stride())
        out = torch.empty(shape, dtype=view.dtype, device=view.device)
        if add is None:
            out.view(view.shape).copy_(view)
        else:
            torch.add(view, add, out=out.view(view.shape))
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None, None]:
        grad = grad.view(*ctx.layout[0][:-1], -1)
        *lead, t, klen = grad.shape
        width = klen + ctx.qlen
        out = grad.new_empty_strided(*ctx.layout)  # the table's layout, which its matmul's backward reads
        stride = out.stride()
        # row i holds the gradient at columns T-i .. T-i+K-1 (flat i(W-1) + T + j); the T-1 columns after each
        # row's block (through the next row's start) and the first T columns of the table get zeros
        out.as_strided((*lead, t), (*stride[:-2], 1), out.storage_offset()).zero_()
        out.as_strided((*lead, t, ctx.qlen - 1), (*stride[:-2], width - 1, 1), out.storage_offset() + width).zero_()
        out.as_strided(grad.shape, (*stride[:-2], width - 1, 1), out.storage_offset() + ctx.qlen).copy_(grad)
        return out, None, None, None


@dataclass
class StreamContext:
    """Per-forward tensors shared by every layer (computed once): relative positions, segments and masks.

    pos_emb: [n_dir, K+T, d] sinusoids for distances K..-T+1 (n_dir=2 with bi_data: forward, backward half).
    mask_h / mask_g: additive masks [B, 1, T, K] / [B, 1, P, K] (0 or fill), or None.
    seg_h / seg_g: "different segment" indicators [B, 1, T, K] / [B, 1, P, K], or None (no segment term).
    slot_index: [B, 1, P, K] column of each slot's positional score in the distance table; slot_valid:
    [B, 1, P, 1] 1 for real slots, 0 for padding slots (and, under the "zero" empty-row policy, for slots that
    see no key). None when there is no query stream.
    """

    pos_emb: Tensor
    mask_h: Tensor | None
    mask_g: Tensor | None
    seg_h: Tensor | None
    seg_g: Tensor | None
    slot_index: Tensor | None
    slot_valid: Tensor | None


class TwoStreamRelAttention(nn.Module):
    """Relative multi-head attention with content and (optional) query stream; post-LN with residual.

    Parameter names and shapes follow the HF/official layout: q/k/v/o/r are ``[d, H, d_h]`` without
    bias; r_w_bias (u), r_r_bias (v), r_s_bias (b) ``[H, d_h]``; seg_embed ``[2, H, d_h]`` (0 = same segment).
    Pass shared bias parameters to tie them across layers (``untie_r=False``).
    """

    def __init__(
        self,
        d_model: int,
        n_head: int,
        d_head: int,
        dropout: float = 0.0,
        dropatt: float = 0.0,
        layer_norm_eps: float = 1e-12,
        shared_biases: tuple[nn.Parameter, nn.Parameter, nn.Parameter] | None = None,
    ) -> None:
        super().__init__()
        self.n_head, self.d_head, self.scale = n_head, d_head, d_head**-0.5
        self.dropatt = dropatt
        shape = (d_model, n_head, d_head)
        self.q, self.k, self.v, self.o, self.r = (nn.Parameter(torch.empty(shape)) for _ in range(5))
        if shared_biases is None:
            shared_biases = tuple(nn.Parameter(torch.empty(n_head, d_head)) for _ in range(3))
        self.r_w_bias, self.r_r_bias, self.r_s_bias = shared_biases
        self.seg_embed = nn.Parameter(torch.empty(2, n_head, d_head))
        self.layer_norm = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)

    def _heads(self, x: Tensor, weight: Tensor) -> Tensor:
        """[B, L, d] @ [d, H, d_h] -> [B, H, L, d_h]."""
        b, n, _ = x.shape
        return (x @ weight.flatten(1)).view(b, n, self.n_head, self.d_head).transpose(1, 2)

    def _positional_keys(self, pos_emb: Tensor) -> Tensor:
        """[n_dir, K+T, d] -> [n_dir, H, d_h, K+T] (pre-transposed for the score matmul)."""
        return self._heads(pos_emb, self.r).transpose(-1, -2)

    def _score_bias(self, q: Tensor, kr: Tensor, seg: Tensor | None, mask: Tensor | None,
                    slot_index: Tensor | None, qlen: int) -> Tensor:
        """Positional + segment + mask terms as one additive bias [B, H, Lq, K] (already scaled)."""
        b, h, lq, dh = q.shape
        n_dir = kr.shape[0]
        nb = b // n_dir
        # the batch folds into the matmul's rows: one GEMM per (direction, head) against the shared table, no
        # batch-expanded copy of kr and no batch sum of its gradient; [n_dir, B', H, Lq, K+T] rows stay contiguous
        qr = ((q + self.r_r_bias[:, None]) * self.scale).view(n_dir, nb, h, lq, dh).transpose(1, 2)
        full = (qr.reshape(n_dir, h, nb * lq, dh) @ kr).view(n_dir, h, nb, lq, -1).transpose(1, 2)
        # the terms join in the positional scores' dtype (the autocast dtype under autocast: the 0 / fill mask
        # and 0 / 1 segment indicator are exact there, and the [B, H, Lq, K] sum takes half the traffic)
        work = full.dtype
        mask = None if mask is None else mask.to(work).view(n_dir, nb, *mask.shape[1:])
        if slot_index is None:
            bias = _ShiftedBias.apply(full, qlen, mask, (b, h, lq, full.shape[-1] - qlen))
        else:
            index = slot_index.view(n_dir, nb, *slot_index.shape[1:])
            bias = full.gather(4, index.expand(n_dir, nb, h, lq, index.shape[-1]))
            if mask is not None:
                bias = bias.add_(mask)
            bias = bias.view(b, h, lq, -1)
        if seg is not None:
            seg_w = (self.seg_embed[1] - self.seg_embed[0]) * self.scale  # [H, d_h]
            e = ((q + self.r_s_bias[:, None]) * seg_w[:, None]).sum(-1, keepdim=True).to(work)  # [B, H, Lq, 1]
            bias = bias.addcmul_(seg.to(work), e)
        return bias

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
        """Softmax attention with additive bias over heads; returns [B, Lq, H*d_h]."""
        qu = q + self.r_w_bias[:, None]
        p = self.dropatt if self.training else 0.0
        if torch.is_grad_enabled() and (bias.requires_grad or qu.requires_grad):
            return attend_with_bias_grad(qu, k, v, bias, p, self.training, scale=self.scale)
        out = F.scaled_dot_product_attention(qu, k, v, attn_mask=bias, dropout_p=p, scale=self.scale)
        return out.transpose(1, 2).flatten(2)

    def _post(self, x: Tensor, attn: Tensor) -> Tensor:
        out = attn @ self.o.flatten(1).t()
        return self.layer_norm(x + self.dropout(out))

    def forward(self, h: Tensor, g: Tensor | None, mem: Tensor | None, ctx: StreamContext
                ) -> tuple[Tensor, Tensor | None]:
        """h [B, T, d] content stream, g [B, P, d] query slots or None, mem [B, M, d] or None."""
        qlen = h.shape[1]
        k, v = self._heads(h, self.k), self._heads(h, self.v)
        if mem is not None:  # memory rows on their own: no input gradient for them, one copy into [B, H, K, d_h]
            mem = mem.to(h.dtype)
            k, v = torch.cat([self._heads(mem, self.k), k], 2), torch.cat([self._heads(mem, self.v), v], 2)
        kr = self._positional_keys(ctx.pos_emb)

        q_h = self._heads(h, self.q)
        bias_h = self._score_bias(q_h, kr, ctx.seg_h, ctx.mask_h, None, qlen)
        out_h = self._post(h, self._attend(q_h, k, v, bias_h))
        if g is None:
            return out_h, None

        q_g = self._heads(g, self.q)
        bias_g = self._score_bias(q_g, kr, ctx.seg_g, ctx.mask_g, ctx.slot_index, qlen)
        attn_g = self._attend(q_g, k, v, bias_g) * ctx.slot_valid.squeeze(1)
        return out_h, self._post(g, attn_g)
