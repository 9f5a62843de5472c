"""Multi-head attention over [memory; segment] for Transformer-XL-style models (Dai thesis §3.2.2;
Yang thesis §2.1.3 for the efficient shift; the ablation variants of Yang thesis Table 2.6).

Layout is batch-major: hidden states [B, T, d], scores [B, H, L, K] with L new queries and K = M_cur + L keys.
Key j runs over the concatenation (j = 0 is the oldest memory slot); the distance of (i, j) is i + M_cur - j.
Three interchangeable implementations (``attn_impl``): ``sdpa`` (default) builds one additive bias that
already holds the position terms and the mask; without gradients ``F.scaled_dot_product_attention`` fuses the
content term and the softmax, and in training (where SDPA would fall back to its unfused math path for a bias
that needs a gradient) the content term is accumulated into that bias in place by one ``baddbmm``; ``flex`` (rel
attention) uses FlexAttention with a ``score_mod`` that reads the un-shifted position scores at the right
distance (no rel_shift copy, no dense mask) and a block mask; ``naive`` writes every step out (the reference).
Softmax arithmetic is fp32 in every path. Under autocast the score chain is stored in the autocast dtype, as a
fused kernel would hold it: SDPA's kernel keeps its scores in fp32 inside, and the training path's baddbmm adds
the position terms to q·k in fp32 registers and rounds the sum once, which the softmax kernel reads into fp32.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

from genlab.errors import ConfigError

SAME_LENGTH_VARIANTS = ("tf", "pytorch")
ATTN_IMPLS = ("sdpa", "flex", "naive")


def rel_shift(x: Tensor) -> Tensor:
    """Turn ``x[..., i, c]`` (column c = distance K-1-c) into ``out[..., i, j]`` = distance i + (K-L) - j.

    Pad one zero column on the left, reinterpret [L, K+1] as [K+1, L], drop the first row, reinterpret as
    [L, K]. Entries with j > i + K - L (future keys) hold garbage and must be masked by the caller.
    """
    *lead, q, k = x.shape
    padded = F.pad(x, (1, 0))
    return padded.view(*lead, k + 1, q)[..., 1:, :].reshape(*lead, q, k)


class _ShiftMask(torch.autograd.Function):
    """``rel_shift(raw).masked_fill(mask, -inf)`` in one pass each way: no padded copy forward, and a contiguous
    gradient backward (no full-size zeros of the pad/slice/view chain, nothing for the matmul to copy).

    For contiguous raw [..., L, K], ``rel_shift(raw)[i, j] = raw[i, L-1-i+j]`` sits at flat offset
    ``i (K-1) + L-1 + j``: a strided view (row stride K-1). Where ``L-1-i+j > K-1`` (future keys, always
    masked) the view runs into the next row's columns beyond the window, which the mask overwrites. The backward
    writes the masked gradient through the same view: its columns j < K-1 tile the block from offset L-1 on
    without overlap (column K-1 of row i < L-1, a future key, is column 0 of row i+1), and the zeros of row i's
    future keys land exactly on row i+1's columns beyond the window (``grad_raw[i+1, c] = 0`` for c < L-2-i);
    what is left is row 0's first L-1 columns (zeros) and the block's last entry (distance 0 of the last row).

    ``raw`` may have permuted leading dimensions (the batch-folded position GEMM's output); its gradient comes
    back in the same layout. The mask enters as an additive 0 / -inf table forward and a 1 / 0 factor backward:
    both exact for finite scores and gradients (softmax's backward gives 0 at a blocked key), and binary ops
    vectorize on CPU where ``where`` runs element by element (2-3x faster at [2, 8, 512, 1024] in bf16).
    """

    @staticmethod
    def forward(ctx, raw: Tensor, mask: Tensor) -> Tensor:
        q, k = raw.shape[-2:]
        if raw.stride()[-2:] != (k, 1):  # each [L, K] block must be contiguous; the leading dims may be permuted
            raw = raw.contiguous()
        shifted = raw.as_strided(raw.shape, (*raw.stride()[:-2], k - 1, 1), raw.storage_offset() + q - 1)
        ctx.save_for_backward(mask)
        ctx.layout = raw.stride()
        out = torch.empty(raw.shape, dtype=raw.dtype, device=raw.device)  # contiguous: what the baddbmm_ fills
        return torch.add(shifted, torch.zeros(mask.shape, dtype=raw.dtype, device=raw.device).masked_fill_(
            mask, -math.inf), out=out)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        (mask,) = ctx.saved_tensors
        *lead, q, k = grad.shape
        out = grad.new_empty_strided(grad.shape, ctx.layout)  # raw's layout, which its matmul's backward reads
        lead_strides, base = out.stride()[:-2], out.storage_offset()
        out.as_strided((*lead, q - 1), (*lead_strides, 1), base).zero_()
        tiles = out.as_strided((*lead, q, k - 1), (*lead_strides, k - 1, 1), base + q - 1)
        torch.mul(grad[..., :k - 1], mask[..., :k - 1].logical_not().to(grad.dtype), out=tiles)
        out[..., -1, -1] = grad[..., -1, -1]
        return out, None


def shift_and_mask(raw: Tensor, mask: Tensor) -> Tensor:
    """Additive bias [..., L, K]: ``rel_shift(raw)`` with -inf where ``mask`` (bool [L, K]) blocks, in ``raw``'s
    dtype (bf16 under autocast, see ``attend_with_bias_grad``). ``raw`` column c holds distance K-1-c, as for
    ``rel_shift``."""
    return _ShiftMask.apply(raw, mask)


def attention_mask(
    qlen: int,
    mlen: int,
    *,
    same_length: bool = False,
    mem_len: int = 0,
    variant: str = "tf",
    device: torch.device | None = None,
) -> Tensor:
    """Boolean [L, K] mask, True = blocked, for L queries after ``mlen`` cached positions.

    Default: causal, every memory slot visible. ``same_length`` bounds the distance so every query sees the
    same number of keys: ``tf`` keeps distances 0..mem_len (M+1 keys), ``pytorch`` (also HF 4.35)
    keeps 0..mem_len-1 (M keys). The diagonal stays visible so no row is ever fully masked. Without memory
    (``mem_len`` 0) there is nothing to equalise: the bound would leave each query only itself (the reference
    codes' masks degenerate so, or block every key), so the mask stays causal.
    """
    if variant not in SAME_LENGTH_VARIANTS:
        raise ValueError(f"same_length_variant must be one of {SAME_LENGTH_VARIANTS}, got {variant!r}")
    klen = qlen + mlen
    i = torch.arange(qlen, device=device)[:, None]
    j = torch.arange(klen, device=device)[None, :]
    dist = i + mlen - j
    blocked = dist < 0
    if same_length and mem_len > 0:
        widest = mem_len if variant == "tf" else mem_len - 1
        blocked = blocked | (dist > widest)
    return blocked


def _heads(x: Tensor, n_head: int) -> Tensor:
    """[B, T, H*dh] -> [B, H, T, dh]."""
    b, t, _ = x.shape
    return x.view(b, t, n_head, -1).transpose(1, 2)


def _attend(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, dropatt: float, training: bool) -> Tensor:
    """Softmax(q k^T / sqrt(dh) + bias) v; under autocast in the autocast dtype, with fp32 softmax arithmetic.

    ``bias`` is either float (position terms already scaled, -inf on blocked keys) or a boolean
    "may attend" mask. Returns [B, L, H*dh]. A float bias that needs a gradient is consumed (written in
    place): it is an intermediate the caller built for this call.
    """
    if bias.dtype != torch.bool and bias.requires_grad and torch.is_grad_enabled():
        return attend_with_bias_grad(q, k, v, bias, dropatt, training)
    dev = q.device.type
    work = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else q.dtype
    with torch.autocast(dev, enabled=False):  # the fused kernel keeps scores and softmax in fp32 inside
        mask = bias if bias.dtype == torch.bool else bias.to(work)
        out = F.scaled_dot_product_attention(q.to(work), k.to(work), v.to(work), attn_mask=mask,
                                             dropout_p=dropatt if training else 0.0).to(v.dtype)
    b, h, l, dh = out.shape
    return out.transpose(1, 2).reshape(b, l, h * dh)


def attend_with_bias_grad(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, dropatt: float, training: bool,
                          scale: float | None = None) -> Tensor:
    """softmax(scale·q k^T + bias) v for a float bias [B, H, L, K] that needs a gradient (SDPA would run its unfused
    math path there), as one ``baddbmm`` into the bias, softmax, dropout, the values; returns [B, L, H*dh]. Shared by
    the Transformer-XL and XLNet attentions, and by BERT's and GPT-1's in low precision with dropout on the CPU (a
    mask bias, ``genlab.nn.attention.attend_heads``). ``scale`` defaults to 1/sqrt(dh).

    The bias is built for this call and consumed: q·k is accumulated into it in place (no second [B, H, L, K]
    buffer) unless it is not contiguous. Under autocast the whole chain
    runs in the autocast dtype, as a fused kernel would: the baddbmm accumulates q·k and adds the bias in fp32
    registers and rounds the sum once, and CPU/CUDA softmax kernels compute a bf16 row in fp32 and round each
    probability once (``tests/test_precision_families.py``), which the values GEMM would round to anyway. Storing
    the buffers in bf16 halves the memory traffic that dominates attention outside its GEMMs; the position terms and
    masks are already bf16 GEMM outputs or exact (-inf, -1e30).
    """
    out_dtype = v.dtype
    b, h, l, dh = q.shape
    alpha = 1.0 / math.sqrt(dh) if scale is None else scale
    dev = q.device.type
    work = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else bias.dtype
    with torch.autocast(dev, enabled=False):
        low = bias.to(work)
        q_flat, k_flat = q.to(work).reshape(b * h, l, dh), k.to(work).reshape(b * h, -1, dh).transpose(1, 2)
        if not low.is_contiguous():
            scores = torch.baddbmm(low.reshape(b * h, l, -1), q_flat, k_flat, alpha=alpha)
        else:
            # in place through an unsafe view, as torch.matmul uses: an in-place write through a tracked view
            # would copy the whole buffer in backward
            flat = torch.ops.aten._unsafe_view(low, (b * h, l, bias.shape[-1]))
            scores = flat.baddbmm_(q_flat, k_flat, alpha=alpha)
        prob = F.dropout(scores.softmax(-1), dropatt, training)
        out = torch.bmm(prob, v.to(work).reshape(b * h, -1, dh)).to(out_dtype)
    return out.view(b, h, l, dh).transpose(1, 2).reshape(b, l, h * dh)


def _attend_naive(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, dropatt: float, training: bool) -> Tensor:
    """The reference: explicit fp32 scores, softmax and dropout, then the weighted sum of values."""
    out_dtype = v.dtype
    with torch.autocast(q.device.type, enabled=False):
        work = torch.promote_types(q.dtype, torch.float32)
        q, k, v = q.to(work), k.to(work), v.to(work)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.size(-1))
        scores = scores.masked_fill(~bias, float("-inf")) if bias.dtype == torch.bool else scores + bias.to(work)
        prob = F.dropout(scores.softmax(-1), dropatt, training)
        out = torch.matmul(prob, v).to(out_dtype)
    b, h, l, dh = out.shape
    return out.transpose(1, 2).reshape(b, l, h * dh)


def attend(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, dropatt: float, training: bool, impl: str) -> Tensor:
    return (_attend_naive if impl == "naive" else _attend)(q, k, v, bias, dropatt, training)


def flex_block_mask(blocked: Tensor) -> BlockMask:
    """FlexAttention block mask from a boolean [L, K] ``attention_mask`` (True = blocked), built once per
    forward: it covers causal, memory and same_length masks alike, and lets fully masked tiles be skipped."""
    allowed = ~blocked
    qlen, klen = blocked.shape

    def mask_mod(b, h, q_idx, kv_idx):
        return allowed[q_idx, kv_idx]

    return create_block_mask(mask_mod, None, None, qlen, klen, device=blocked.device)


def _flex_attend(q: Tensor, k: Tensor, v: Tensor, pos: Tensor, block_mask: BlockMask) -> Tensor:
    """softmax((q·k)/sqrt(dh) + pos[b, h, i, L-1-i+j]) v over the unmasked keys, in fp32.

    ``pos`` holds the scaled position scores before the shift: column c is distance K-1-c, and query i meets
    key j at distance i + (K-L) - j, i.e. column L-1-i+j (beyond K-1 only for masked future keys: clamped).
    """
    out_dtype = v.dtype
    qlen, klen = q.size(2), k.size(2)
    with torch.autocast(q.device.type, enabled=False):
        work = torch.promote_types(q.dtype, torch.float32)
        q, k, v, pos = q.to(work), k.to(work), v.to(work), pos.to(work)

        def score_mod(score, b, h, q_idx, kv_idx):
            col = torch.clamp(qlen - 1 - q_idx + kv_idx, max=klen - 1)
            return score + pos[b, h, q_idx, col]

        out = _flex()(q, k, v, score_mod=score_mod, block_mask=block_mask).to(out_dtype)
    b, h, l, dh = out.shape
    return out.transpose(1, 2).reshape(b, l, h * dh)


def _flex():
    """Compiled FlexAttention on accelerators (the fused kernel); the eager, unfused version on CPU and inside an
    enclosing ``torch.compile`` (e.g. ``compile_blocks``), which fuses it there."""
    if torch.cuda.is_available() and not torch.compiler.is_compiling():
        return _compiled_flex()
    return flex_attention


@functools.cache
def _compiled_flex():
    return torch.compile(flex_attention, dynamic=False)


def _masked_bias(pos_scores: Tensor, mask: Tensor) -> Tensor:
    """Additive bias in at least fp32 (fp64 stays fp64): the position scores with -inf where ``mask`` blocks."""
    dtype = torch.promote_types(pos_scores.dtype, torch.float32)
    return pos_scores.to(dtype).masked_fill(mask, float("-inf"))


class _AttentionBlock(nn.Module):
    """Shared parts: fused q|k|v projection (no bias), output projection, residual + LayerNorm (post or pre)."""

    def __init__(self, d_model: int, n_head: int, d_head: int, dropout: float, dropatt: float,
                 pre_lnorm: bool, ln_eps: float, attn_impl: str = "sdpa") -> None:
        super().__init__()
        if attn_impl not in ATTN_IMPLS:
            raise ValueError(f"attn_impl must be one of {ATTN_IMPLS}, got {attn_impl!r}")
        self.attn_impl = attn_impl
        self.n_head, self.d_head = n_head, d_head
        self.scale = 1.0 / math.sqrt(d_head)
        self.dropatt = dropatt
        self.pre_lnorm = pre_lnorm
        # Output features: blocks q, k, v; inside each block head-major (feature = head * d_head + c).
        self.qkv = nn.Linear(d_model, 3 * n_head * d_head, bias=False)
        self.out = nn.Linear(n_head * d_head, d_model, bias=False)
        self.norm = nn.LayerNorm(d_model, eps=ln_eps)
        self.drop = nn.Dropout(dropout)

    def _project(self, h: Tensor, mem: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """q [B, H, L, dh] for the new rows; k, v [B, H, M+L, dh] over [mem; h] (contiguous when there is memory).

        Memory rows are projected on their own, to keys and values only: mem is detached, so their backward
        is the weight gradient alone (no input gradient for a third of the k|v GEMM's rows), and k, v come out
        of one copy into the head layout the attention GEMMs read, instead of a concatenated input and a
        reshape copy. The pre-LN code normalises [mem; h] before the projection: row-wise, so per block."""
        x = self.norm(h) if self.pre_lnorm else h
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = _heads(q, self.n_head), _heads(k, self.n_head), _heads(v, self.n_head)
        if mem is None or mem.size(1) == 0:
            return q, k, v
        m = self.norm(mem) if self.pre_lnorm else mem
        k_mem, v_mem = F.linear(m, self.qkv.weight[self.n_head * self.d_head:]).chunk(2, dim=-1)
        return q, torch.cat([_heads(k_mem, self.n_head), k], 2), torch.cat([_heads(v_mem, self.n_head), v], 2)

    def _finish(self, h: Tensor, attn_vec: Tensor) -> Tensor:
        out = self.drop(self.out(attn_vec))
        return h + out if self.pre_lnorm else self.norm(h + out)


class RelPartialLearnableAttention(_AttentionBlock):
    """Transformer-XL attention (attn_type ``rel``): (q+u)·k + rel_shift((q+v)·W_{k,R} R), scaled together.

    u, v are either this layer's own parameters (``untie_r``) or passed in by the model (shared).
    """

    def __init__(self, d_model: int, n_head: int, d_head: int, dropout: float = 0.0, dropatt: float = 0.0,
                 pre_lnorm: bool = False, ln_eps: float = 1e-5, own_biases: bool = False,
                 attn_impl: str = "sdpa") -> None:
        super().__init__(d_model, n_head, d_head, dropout, dropatt, pre_lnorm, ln_eps, attn_impl)
        self.r_net = nn.Linear(d_model, n_head * d_head, bias=False)
        if own_biases:
            self.u = nn.Parameter(torch.zeros(n_head, d_head))
            self.v = nn.Parameter(torch.zeros(n_head, d_head))
        else:
            self.u = self.v = None

    def _unshifted_position_scores(self, q: Tensor, r: Tensor, v: Tensor) -> Tensor:
        """Scaled (b)+(d) terms per (query, distance): (q+v)·W_{k,R} R^T, [B, H, L, K] with each [L, K] block
        contiguous (a view of [H, B, L, K]). The batch folds into the GEMM's rows: one [B·L, dh] x [dh, K] product
        per head against the shared table, with no batch-expanded copy of it and no batch sum of its gradient
        (scaled on the small side, before the matmul, to save a pass over the scores)."""
        b, h, l, dh = q.shape
        # both operands in head-major layout: CPU bf16 batched GEMMs copy operands whose batch stride is smaller
        # than a row (and the copy is small here: B·L or K rows, not the [B, H, L, K] scores)
        rk = self.r_net(r).view(-1, h, dh).transpose(0, 1).contiguous()  # [H, K, dh]
        rows = ((q + v[:, None, :]) * self.scale).transpose(0, 1).to(q.dtype, memory_format=torch.contiguous_format)
        return (rows.view(h, b * l, dh) @ rk.transpose(-1, -2)).view(h, b, l, -1).transpose(0, 1)

    def _position_scores(self, q: Tensor, r: Tensor, v: Tensor) -> Tensor:
        """The same, shifted to (query, key) columns: rel_shift((q+v)·W_{k,R} R^T)."""
        return rel_shift(self._unshifted_position_scores(q, r, v))

    def forward(self, h: Tensor, r: Tensor, mask: Tensor | BlockMask, mem: Tensor | None = None,
                u: Tensor | None = None, v: Tensor | None = None) -> Tensor:
        """h [B, L, d]; r [K, d] position embeddings (distances K-1..0); mask [L, K] bool (or, for
        ``attn_impl="flex"``, its ``flex_block_mask``); mem [B, M_cur, d]."""
        u = self.u if self.u is not None else u
        v = self.v if self.v is not None else v
        q, k, val = self._project(h, mem)  # [B, H, L|K, dh]
        if self.attn_impl == "flex":
            if self.training and self.dropatt > 0:
                raise ValueError("attn_impl='flex' has no attention dropout; set dropatt=0 or use attn_impl='sdpa'")
            if h.device.type == "cpu" and torch.is_grad_enabled() and h.requires_grad:
                raise ConfigError("model.attn_impl=flex: PyTorch's FlexAttention has no backward on CPU; train "
                                  "on CPU with model.attn_impl=sdpa (flex still runs for evaluation)")
            block_mask = mask if isinstance(mask, BlockMask) else flex_block_mask(mask)
            pos = self._unshifted_position_scores(q, r, v)
            return self._finish(h, _flex_attend(q + u[:, None, :], k, val, pos, block_mask))
        pos = self._unshifted_position_scores(q, r, v)
        # the naive reference keeps the textbook pad/reshape shift; the other paths use the one-pass view
        bias = _masked_bias(rel_shift(pos), mask) if self.attn_impl == "naive" else shift_and_mask(pos, mask)
        # SDPA scales (q+u)·k by 1/sqrt(dh); bd was scaled above, so the sum is scaled once.
        return self._finish(h, attend(q + u[:, None, :], k, val, bias, self.dropatt, self.training,
                                      self.attn_impl))

    def scores(self, h: Tensor, r: Tensor, mask: Tensor, mem: Tensor | None = None,
               u: Tensor | None = None, v: Tensor | None = None) -> Tensor:
        """Pre-softmax scores [B, H, L, K] of ``forward`` (fp32, fp64 for an fp64 module; -inf where masked).

        For tests and analysis; ``forward`` itself keeps the content term inside the fused SDPA call."""
        u = self.u if self.u is not None else u
        v = self.v if self.v is not None else v
        q, k, _ = self._project(h, mem)
        ac = torch.matmul(q + u[:, None, :], k.transpose(-1, -2)) * self.scale
        return _masked_bias(ac.float() + self._position_scores(q, r, v).float() if ac.dtype != torch.float64
                            else ac + self._position_scores(q, r, v), mask)


class ShawRelativeAttention(_AttentionBlock):
    """attn_type ``shaw``: learnable relative embeddings per layer (Shaw et al. 2018; a row of Yang
    thesis Table 2.6).

    Score = (q+u)·k + rel_shift(q·r_emb + r_bias); with ``bias_terms=False`` u and r_bias are absent
    (terms (a)+(b) only, as the thesis describes Shaw et al.). Rows of r_emb are ordered by descending
    distance: the last row is distance 0; distances past the table (or past clamp_len) reuse the farthest row.
    """

    def __init__(self, d_model: int, n_head: int, d_head: int, max_len: int, dropout: float = 0.0,
                 dropatt: float = 0.0, pre_lnorm: bool = False, ln_eps: float = 1e-5,
                 bias_terms: bool = True, attn_impl: str = "sdpa") -> None:
        if attn_impl == "flex":
            raise ValueError("attn_impl='flex' is implemented for attn_type='rel' only; use 'sdpa' or 'naive'")
        super().__init__(d_model, n_head, d_head, dropout, dropatt, pre_lnorm, ln_eps, attn_impl)
        self.max_len = max_len
        self.r_emb = nn.Parameter(torch.zeros(max_len, n_head, d_head))
        if bias_terms:
            self.r_bias = nn.Parameter(torch.zeros(max_len, n_head))
            self.u = nn.Parameter(torch.zeros(n_head, d_head))
        else:
            self.r_bias = self.u = None

    def forward(self, h: Tensor, mask: Tensor, mem: Tensor | None = None, clamp_len: int = -1) -> Tensor:
        q, k, val = self._project(h, mem)
        klen = k.size(2)
        dist = torch.arange(klen - 1, -1, -1, device=h.device)
        cap = self.max_len if clamp_len <= 0 else min(self.max_len, clamp_len)
        rows = self.max_len - 1 - dist.clamp(max=cap - 1)
        r_emb = self.r_emb[rows].transpose(0, 1)  # [H, K, dh]
        bd = torch.matmul(q, r_emb.transpose(-1, -2))
        if self.r_bias is not None:
            bd = bd + self.r_bias[rows].t()[None, :, None, :]
        bd = rel_shift(bd) * self.scale
        bias = _masked_bias(bd, mask)
        q_c = q if self.u is None else q + self.u[:, None, :]
        return self._finish(h, attend(q_c, k, val, bias, self.dropatt, self.training, self.attn_impl))


class AbsoluteAttention(_AttentionBlock):
    """Plain dot-product attention over [mem; h] (attn_types ``abs_sinusoid`` and ``abs_learned``)."""

    def __init__(self, d_model: int, n_head: int, d_head: int, dropout: float = 0.0, dropatt: float = 0.0,
                 pre_lnorm: bool = False, ln_eps: float = 1e-5, attn_impl: str = "sdpa") -> None:
        if attn_impl == "flex":
            raise ValueError("attn_impl='flex' is implemented for attn_type='rel' only; use 'sdpa' or 'naive'")
        super().__init__(d_model, n_head, d_head, dropout, dropatt, pre_lnorm, ln_eps, attn_impl)

    def forward(self, h: Tensor, mask: Tensor, mem: Tensor | None = None) -> Tensor:
        q, k, val = self._project(h, mem)
        return self._finish(h, attend(q, k, val, ~mask, self.dropatt, self.training, self.attn_impl))
