"""Compute cost of Funnel-Transformer layouts (Dai thesis §5.2.3, §5.3.4, Tables 5.1, 5.7,
5.10).

* ``table_flops_ratio``: the thesis' estimator, "linear complexity w.r.t. the sequence length": a layer in block b
  costs ``1/2^b`` of a full-length layer, decoder layers are full length, relative to a baseline's layer count.
* ``forward_flops``: the exact matrix-multiply FLOPs (2 per multiply-add) of one forward of
  ``genlab.models.funnel.FunnelModel`` with the ``rel_shift`` positional term, layer by layer, including the
  ``T^2`` attention terms and the positional/segment projections: what ``torch.utils.flop_counter.FlopCounterMode``
  counts (tests/analysis/test_funnel_cost.py checks equality). Embedding lookups, LayerNorm, softmax and pooling
  are not matrix multiplies and are not counted; heads are excluded (the thesis' "finetuning setting").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.utils import flop_counter

from genlab.models.funnel_structure import can_pool, pooled_length


def table_flops_ratio(block_sizes: Sequence[int], block_repeats: Sequence[int] | None = None,
                      num_decoder_layers: int = 0, baseline_layers: int = 12) -> float:
    """``(sum_b L_b r_b / 2^b + n_dec) / baseline_layers`` (thesis Table 5.1 caption)."""
    repeats = block_repeats or [1] * len(block_sizes)
    cost = sum(size * rep / 2**b for b, (size, rep) in enumerate(zip(block_sizes, repeats)))
    return (cost + num_decoder_layers) / baseline_layers


def layer_flops(batch: int, q_len: int, k_len: int, shift: int, d_model: int, n_head: int, d_head: int,
                d_inner: int) -> int:
    """One relative-attention layer application (rel_shift form) with ``q_len`` queries on ``k_len`` keys."""
    inner = n_head * d_head
    width = shift * (q_len - 1) + k_len  # distances in the positional table
    proj = batch * (q_len + 2 * k_len) * d_model * inner + batch * q_len * inner * d_model  # q, k, v, post_proj
    positional = width * d_model * inner + batch * q_len * width * inner  # table @ W_r, then (q+v) . R
    segment = batch * q_len * 2 * inner  # (q+b_s) . seg_embed[0/1]
    attention = 2 * batch * q_len * k_len * inner  # q.k and probs @ v
    ffn = 2 * batch * q_len * d_model * d_inner
    return 2 * (proj + positional + segment + attention + ffn)


def forward_flops(arch: Mapping[str, Any], batch: int, seq_len: int, use_decoder: bool | None = None) -> int:
    """Matmul FLOPs of one ``FunnelModel`` forward, from its ``arch`` dict (or the same keys)."""
    dims = dict(d_model=arch["d_model"], n_head=arch["n_head"], d_head=arch["d_head"], d_inner=arch["d_inner"])
    sep, trunc, q_only = arch.get("separate_cls", True), arch.get("truncate_seq", True), arch.get("pool_q_only", True)
    repeats = arch.get("block_repeats") or [1] * len(arch["block_sizes"])
    decoder = arch.get("use_decoder", True) if use_decoder is None else use_decoder
    total, length = 0, seq_len
    embed, d_model = arch.get("d_embed") or arch["d_model"], arch["d_model"]
    if embed != d_model:
        total += 2 * batch * seq_len * embed * d_model  # input projection
    for b, (size, rep) in enumerate(zip(arch["block_sizes"], repeats)):
        applications = size * rep
        if b > 0 and can_pool(length, sep):
            new = pooled_length(length, sep, trunc)
            if q_only:
                total += layer_flops(batch, new, length, 2, **dims)
            else:
                total += layer_flops(batch, new, new, 1, **dims)
            length, applications = new, applications - 1
        total += applications * layer_flops(batch, length, length, 1, **dims)
    if decoder:
        total += arch.get("num_decoder_layers", 2) * layer_flops(batch, seq_len, seq_len, 1, **dims)
    return total


def _baddbmm(bias, a, b, *args, out_shape=None, **kwargs) -> int:
    batch, n, m = a
    return 2 * batch * n * m * b[-1]


def _sdpa_cpu(query, key, value, *args, out_shape=None, **kwargs) -> int:
    return flop_counter.sdpa_flop_count(query, key, value)


def _sdpa_cpu_backward(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    return flop_counter.sdpa_backward_flop_count(grad_out, query, key, value)


def counting_mode() -> flop_counter.FlopCounterMode:
    """``FlopCounterMode`` that also counts what torch 2.13's registry misses on our paths: the in-place
    ``baddbmm_`` of the training attention (``genlab.nn.relative_attention``) and the CPU flash-attention kernel of
    ``scaled_dot_product_attention`` (forward and backward; the CUDA kernels are registered)."""
    aten = torch.ops.aten
    extra = {aten.baddbmm_: _baddbmm}
    for name, formula in (("_scaled_dot_product_flash_attention_for_cpu", _sdpa_cpu),
                          ("_scaled_dot_product_flash_attention_for_cpu_backward", _sdpa_cpu_backward)):
        if hasattr(aten, name):
            extra[getattr(aten, name)] = formula
    return flop_counter.FlopCounterMode(display=False, custom_mapping=extra)


__all__ = ["counting_mode", "forward_flops", "layer_flops", "table_flops_ratio"]
