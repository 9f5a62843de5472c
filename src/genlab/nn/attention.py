"""Standard (absolute-position) multi-head attention on ``F.scaled_dot_product_attention``.

Two levels, so a model can keep its own parameter names and still share the attention math:

* :func:`multi_head_attention` — ``q, k, v [B, T, d]`` already projected -> heads of ``d / n_head`` contiguous
  features -> SDPA (scale ``1/sqrt(d_head)``, optional causal mask and key-padding mask, attention dropout) ->
  merged ``[B, T, d]``. A model with separate ``query/key/value`` layers (BERT) calls this.
* :class:`MultiHeadSelfAttention` — a fused ``qkv`` projection (output columns ``q | k | v``) + the function above +
  the output projection ``proj`` (GPT).

Masks: without a padding mask a causal call uses SDPA's ``is_causal`` (the fused kernels' fast path). With one,
the boolean mask is ``causal & key_is_real``; in the causal case every query may also see itself, so that no row
is empty (an empty row makes SDPA return NaN; it only happens at left-padding positions, whose outputs are padding
anyway). Real positions are unaffected by that choice.

Kernel: :func:`attend_heads` is SDPA, except in low precision on the CPU with attention dropout: SDPA has no fused
CPU kernel with dropout, and its math path there upcasts the whole [B, H, L, K] chain to fp32. The bf16 score chain
of the relative attentions runs instead (``relative_attention.attend_with_bias_grad``: one ``baddbmm`` into a mask
bias, fp32 accumulation and softmax arithmetic, bf16 storage): a 4-layer BERT step 1.46x, GPT-1 1.08x faster
(``experiments/perf/vs_hf.py --sdpa-reference``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from genlab.nn.relative_attention import attend_with_bias_grad

LOW_PRECISION = (torch.bfloat16, torch.float16)


def split_heads(x: Tensor, n_head: int) -> Tensor:
    """``[B, T, d]`` -> ``[B, H, T, d/H]``: head h owns features ``h·d/H ... (h+1)·d/H − 1``."""
    b, t, d = x.shape
    return x.view(b, t, n_head, d // n_head).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """``[B, H, T, d_head]`` -> ``[B, T, H·d_head]`` (inverse of :func:`split_heads`)."""
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def attention_mask(key_padding_mask: Tensor, causal: bool, q_len: int) -> Tensor:
    """Boolean SDPA mask (True = may attend) from ``key_padding_mask [B, K]`` (1/True = real token).

    Non-causal: ``[B, 1, 1, K]`` (broadcast over queries). Causal (queries are the last ``q_len`` keys):
    ``[B, 1, q_len, K]`` = lower triangle & real keys, with the diagonal always open."""
    real = key_padding_mask.bool()[:, None, None, :]
    if not causal:
        return real
    k_len = key_padding_mask.shape[-1]
    rows = torch.arange(k_len - q_len, k_len, device=real.device)[:, None]
    cols = torch.arange(k_len, device=real.device)[None, :]
    return (real & (cols <= rows)) | (cols == rows)


def attend_heads(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None, dropout_p: float = 0.0,
           is_causal: bool = False) -> Tensor:
    """``F.scaled_dot_product_attention`` over heads ``[B, H, L, dh]`` (same arguments; ``attn_mask`` boolean, True =
    may attend), heads merged: ``[B, L, H·dh]``. Low precision + dropout on the CPU: the bf16 score chain (above)."""
    if dropout_p > 0 and q.device.type == "cpu" and q.dtype in LOW_PRECISION:
        l, n_keys = q.shape[-2], k.shape[-2]
        bias = q.new_zeros(l, n_keys)
        if is_causal:  # SDPA's causal mask: query i sees keys 0..i
            bias.masked_fill_(torch.ones(l, n_keys, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        bias = bias.expand(q.shape[0], q.shape[1], l, n_keys)
        # one pass writes the [B, H, L, K] buffer that q·k is then accumulated into in place
        bias = bias.contiguous() if attn_mask is None else bias.masked_fill(~attn_mask, float("-inf"))
        return attend_with_bias_grad(q, k, v, bias, dropout_p, training=True)
    return merge_heads(F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p,
                                                      is_causal=is_causal))


def multi_head_attention(q: Tensor, k: Tensor, v: Tensor, n_head: int, *, causal: bool = False,
                         key_padding_mask: Tensor | None = None, dropout_p: float = 0.0) -> Tensor:
    """Scaled dot-product attention over ``n_head`` heads; ``q, k, v [B, T, d]`` -> ``[B, T, d]``.

    ``dropout_p`` is applied to the attention probabilities (pass 0 in eval mode)."""
    q, k, v = (split_heads(x, n_head) for x in (q, k, v))
    if key_padding_mask is None:
        return attend_heads(q, k, v, dropout_p=dropout_p, is_causal=causal)
    return attend_heads(q, k, v, attention_mask(key_padding_mask, causal, q.shape[-2]), dropout_p)


class MultiHeadSelfAttention(nn.Module):
    """``proj(attention(split(qkv(x))))`` with a fused input projection: ``qkv.weight`` rows ``0..d−1`` make q,
    ``d..2d−1`` k, ``2d..3d−1`` v (``nn.Linear`` stores ``[out, in]``). No dropout after ``proj``: the caller owns
    its residual dropout."""

    def __init__(self, d_model: int, n_head: int, dropatt: float = 0.0, causal: bool = False, bias: bool = True):
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"d_model={d_model} is not divisible by n_head={n_head}")
        self.n_head, self.dropatt, self.causal = n_head, dropatt, causal
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        a = multi_head_attention(q, k, v, self.n_head, causal=self.causal, key_padding_mask=key_padding_mask,
                                 dropout_p=self.dropatt if self.training else 0.0)
        return self.proj(a)
