"""Attention structures of the Funnel-Transformer under pooling (Dai thesis §5.2.2; the
bookkeeping follows the authors' code).

A *level* is one sequence length of the encoder: level 0 is the input, level b the output of b poolings. A level
holds per-position structures: positions, token types, which keys are hidden (padding, and [MASK] for the
original MLM), and which position is the [CLS] that the CLS mask exempts from the positional and segment terms.
The pairwise structures of the relative attention (distances, segment-equality matrix S, CLS mask C, key mask) are built
from a (query level, key level) pair once per forward and shared by every layer attending between those levels.
Stride-pooling the rows or columns of a pairwise structure (as HF and the original code do) equals building it from the
stride-pooled per-position structures, which is what happens here.

Positions: level 0 is ``0..T-1``; a pooled token sits at the position of the first token of its window;
with a separate [CLS], the [CLS] of level b sits one stride before position 1, at ``1 - 2^b``, so every
mean/max-pooled level is an arithmetic progression ("regular") and the relative-shift trick applies.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from genlab.nn.positional import sinusoid_table

CLS_SEGMENT = 2  # token type of [CLS]: "same segment" as every token
MASK_VALUE = 1e6  # subtracted from the scores of hidden keys, in fp32 (finite: a fully hidden row stays finite)
POSITIONAL_MODES = ("rel_shift", "gather", "factorized", "absolute")
MASK_POOLS = ("any_real", "all_real")


@dataclass
class Level:
    """Per-position structures of one sequence length."""

    pos: Tensor  # [1 or B, T] long positions in input coordinates
    stride: int  # distance between consecutive non-[CLS] positions of a regular level
    first: int | None  # regular level: pos == first + stride * arange(T) (mean/max pooling keeps this); else None
    seg: Tensor | None  # [B, T] long token types, or None (no segment term)
    hidden: Tensor | None  # [B, T] bool, True = never attended to as a key; None = every key visible
    cls: Tensor | None  # [1, T] bool, True at the [CLS] whose positional/segment terms are zeroed; None = no C

    @property
    def length(self) -> int:
        return self.pos.shape[1]


def input_level(seq_len: int, token_type_ids: Tensor | None, hidden: Tensor | None, cls_mask: bool,
                device: torch.device) -> Level:
    """Level 0: positions 0..T-1, and the CLS mask (row/column 0) when ``cls_mask``."""
    pos = torch.arange(seq_len, device=device)[None]
    cls = (pos == 0) if cls_mask else None
    return Level(pos, 1, 0, token_type_ids, hidden, cls)


def pool_windows(x: Tensor, reduce: str, separate_cls: bool, truncate_seq: bool) -> Tensor:
    """Window-2, stride-2 pooling along dim 1 of ``x`` [B, T, ...] (Dai thesis Eq. (5.3)).

    With ``separate_cls`` row 0 passes through untouched and the windows cover rows 1.. (rows 1..T-2 with
    ``truncate_seq``: the last row is dropped); otherwise the windows cover every row, [CLS] included. An odd
    number of rows leaves a last window holding one row, whose result is that row (TF "SAME" padding and HF
    ``ceil_mode`` both reduce over the real elements only). ``reduce``: ``mean`` | ``max`` | ``first`` (stride
    slicing: the first row of each window) | ``all`` | ``any`` (boolean masks).
    """
    head = x[:, :1] if separate_cls else x[:, :0]
    body = (x[:, 1:-1] if truncate_seq else x[:, 1:]) if separate_cls else x
    n = body.shape[1]
    pairs = body[:, : n - n % 2].unflatten(1, (n // 2, 2))
    a, b = pairs[:, :, 0], pairs[:, :, 1]
    if reduce == "mean":
        pooled = (a + b) * 0.5
    elif reduce == "max":
        pooled = torch.maximum(a, b)
    elif reduce == "first":
        pooled = a
    elif reduce == "all":
        pooled = a & b
    elif reduce == "any":
        pooled = a | b
    else:
        raise ValueError(f"unknown window reduction {reduce!r}")
    return torch.cat([head, pooled, body[:, n - n % 2:]], dim=1)


def pooled_length(length: int, separate_cls: bool, truncate_seq: bool) -> int:
    """Length after one pooling: ``1 + ceil((T-2)/2)`` (separate [CLS] + truncation), ``1 + ceil((T-1)/2)``
    (no truncation) or ``ceil(T/2)`` (no separate [CLS])."""
    if not separate_cls:
        return (length + 1) // 2
    body = max(length - 2, 0) if truncate_seq else length - 1
    return 1 + (body + 1) // 2


def can_pool(length: int, separate_cls: bool) -> bool:
    """HF and the authors' PyTorch port skip pooling a sequence that is already this short (the TF code never
    does; it only matters for inputs of 1-2 tokens)."""
    return length > (2 if separate_cls else 1)


def pool_level(level: Level, separate_cls: bool, truncate_seq: bool, mask_pool: str) -> Level:
    """The structures after mean/max pooling: stride slicing, and the key mask pooled so that a window is hidden
    only if all its tokens are (``any_real``, original) or if any is (``all_real``, HF)."""
    def pool(x: Tensor | None, reduce: str) -> Tensor | None:
        return None if x is None else pool_windows(x, reduce, separate_cls, truncate_seq)

    stride = 2 * level.stride
    pos, first = pool(level.pos, "first"), level.first
    if separate_cls and pos.shape[1] > 1:
        pos = torch.cat([pos[:, 1:2] - stride, pos[:, 1:]], dim=1)
        first = None if first is None else first + level.stride - stride  # one stride before position 1
    hidden = pool(level.hidden, "all" if mask_pool == "any_real" else "any")
    return Level(pos, stride, first, pool(level.seg, "first"), hidden, pool(level.cls, "first"))


def select_level(level: Level, index: Tensor, separate_cls: bool) -> Level:
    """The structures of the tokens kept by top-attention pooling (``index`` [B, T'], ascending, [CLS] first when
    separate): gathered with the same indices; the positions are no longer a progression."""
    def take(x: Tensor | None) -> Tensor | None:
        if x is None:
            return None
        return x.expand(index.shape[0], -1).gather(1, index)

    stride = 2 * level.stride
    pos = take(level.pos)
    if separate_cls:
        pos = torch.cat([torch.full_like(pos[:, :1], 1 - stride), pos[:, 1:]], dim=1)
    return Level(pos, stride, None, take(level.seg), take(level.hidden), take(level.cls))


def upsample(h: Tensor, stride: int, target_len: int, separate_cls: bool) -> Tensor:
    """Decoder up-sampling (Dai thesis Eq. (5.5)): ``[CLS]`` row, then each pooled row repeated ``stride`` times in
    order (repeat_interleave, not tiling), zero rows where the repetition falls short of ``target_len`` (the last
    ``stride - 1`` rows with truncation), cut to ``target_len``. The thesis' ``h_{i // 2^(M-1)}`` plus the code's
    [CLS]/truncation handling."""
    body = h[:, 1:] if separate_cls else h
    up = torch.repeat_interleave(body, stride, dim=1)
    if separate_cls:
        up = torch.cat([h[:, :1], up], dim=1)
    short = target_len - up.shape[1]
    if short > 0:
        up = torch.cat([up, up.new_zeros(up.shape[0], short, *up.shape[2:])], dim=1)
    return up[:, :target_len]


@dataclass
class PairInputs:
    """What every layer attending from a query level to a key level shares (computed once per forward).

    Positional term, by ``mode``: ``rel_shift`` -> ``table`` [W, D] sinusoids of W descending distances and
    ``shift`` (query stride / key stride); ``gather`` -> ``table`` [W, D] of distances ``dmin..`` and ``index``
    [1 or B, Tq, Tk] (distance - dmin); ``factorized`` -> ``factors`` (phi, pi, psi, omega) of the factorized form;
    ``absolute`` -> none.
    """

    mode: str
    q_len: int
    k_len: int
    table: Tensor | None = None
    shift: int = 1
    index: Tensor | None = None
    factors: tuple[Tensor, Tensor, Tensor, Tensor] | None = None
    same_segment: Tensor | None = None  # [B, Tq, Tk] bool (the segment matrix S)
    keep: Tensor | None = None  # [1, Tq, Tk] float, 0 on the [CLS] row and column (the CLS mask C)
    key_bias: Tensor | None = None  # [B, 1, 1, Tk] float32, -1e6 on hidden keys


def pair_inputs(q: Level, k: Level, mode: str, d_model: int, pos_dropout: nn.Dropout) -> PairInputs:
    """Positional tables, S, C and the key mask for queries at level ``q`` and keys at level ``k``.

    ``rel_shift`` and ``factorized`` need regular positions; for top-attention levels (irregular) the gather form
    of the same term is used. Dropout (the hidden rate) is applied to the sinusoid tables; in the
    factorized form only to the query-side tables, as the original code.
    """
    out = PairInputs(mode, q.length, k.length)
    if mode != "absolute":
        if (q.first is None or k.first is None) and mode in ("rel_shift", "factorized"):
            mode = out.mode = "gather"
        if mode == "rel_shift":
            out.shift = q.stride // k.stride
            span = out.shift * (q.length - 1)  # table column c <-> distance base + (span - c) * key stride
            base = q.first - k.first  # Python ints: no device sync
            cols = torch.arange(span + k.length, device=q.pos.device)
            out.table = pos_dropout(sinusoid_table(base + (span - cols) * k.stride, d_model))
        elif mode == "gather":
            dist = q.pos[:, :, None] - k.pos[:, None, :]
            low = int(dist.min())
            values = torch.arange(low, int(dist.max()) + 1, device=dist.device)
            out.table, out.index = pos_dropout(sinusoid_table(values, d_model)), dist - low
        elif mode == "factorized":
            out.factors = _factors(q.pos[0], k.pos[0], d_model, pos_dropout)
        else:
            raise ValueError(f"unknown positional mode {mode!r}")
        if q.seg is not None and k.seg is not None:
            sq, sk = q.seg[:, :, None], k.seg[:, None, :]
            out.same_segment = (sq == sk) | (sq == CLS_SEGMENT) | (sk == CLS_SEGMENT)
        if q.cls is not None and k.cls is not None:
            out.keep = (~(q.cls[:, :, None] | k.cls[:, None, :])).float()
    if k.hidden is not None:
        out.key_bias = (k.hidden.float() * -MASK_VALUE)[:, None, None, :]
    return out


def _factors(pq: Tensor, pk: Tensor, d_model: int, pos_dropout: nn.Dropout) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """phi(pq - pk) = phi1(pq) psi1(pk) + phi2(pq) psi2(pk) elementwise, from sin(a-b) and cos(a-b)."""
    sq, cq = sinusoid_table(pq, d_model).chunk(2, dim=-1)
    sk, ck = sinusoid_table(pk, d_model).chunk(2, dim=-1)
    sq, cq = pos_dropout(sq), pos_dropout(cq)
    return (torch.cat([sq, sq], -1), torch.cat([cq, cq], -1), torch.cat([ck, sk], -1), torch.cat([-sk, ck], -1))


def shifted_view(raw: Tensor, q_len: int, k_len: int, shift: int) -> Tensor:
    """Entry (i, j) of ``raw`` [..., Tq, W] at column ``shift*(Tq-1) - shift*i + j``, as a strided view [..., Tq,
    Tk] (no copy). Transformer-XL's relative shift generalised to a query ``shift`` times sparser than the keys:
    ``genlab.nn.relative_attention.rel_shift`` covers causal distances only and XLNet's ``relative_shift`` shift 1
    only, while the pooling layer of each Funnel block needs shift 2."""
    raw = raw.contiguous()
    width = raw.shape[-1]
    strides = (*raw.stride()[:-2], width - shift, 1)
    return raw.as_strided((*raw.shape[:-2], q_len, k_len), strides, raw.storage_offset() + shift * (q_len - 1))
