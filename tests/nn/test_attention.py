"""genlab.nn.attention: SDPA multi-head attention against an explicit reference (scale, q|k|v layout, masks)."""

from __future__ import annotations

import math

import pytest
import torch

from genlab.nn.attention import (
    MultiHeadSelfAttention,
    attention_mask,
    multi_head_attention,
)


@pytest.fixture(autouse=True)
def fp64():
    torch.set_default_dtype(torch.float64)  # tests/conftest.py restores float32 after each test


def reference(attn: MultiHeadSelfAttention, x: torch.Tensor, scale: float, key_real: torch.Tensor | None = None):
    """Written from the released GPT code's attention: q|k|v column blocks of the fused projection, contiguous
    heads, softmax of ``q kᵀ · scale`` with a −1e9 causal fill."""
    b, t, d = x.shape
    h = attn.n_head
    w, bias = attn.qkv.weight, attn.qkv.bias
    q, k, v = (x @ w[i * d:(i + 1) * d].T + bias[i * d:(i + 1) * d] for i in range(3))
    heads = lambda y: y.view(b, t, h, d // h).permute(0, 2, 1, 3)
    s = heads(q) @ heads(k).transpose(-1, -2) * scale
    allowed = torch.ones(t, t).tril().bool() if attn.causal else torch.ones(t, t).bool()
    allowed = allowed.expand(b, 1, t, t)
    if key_real is not None:
        allowed = allowed & key_real.bool()[:, None, None, :]
    s = s.masked_fill(~allowed, -1e9)
    a = (s.softmax(-1) @ heads(v)).permute(0, 2, 1, 3).reshape(b, t, d)
    return a @ attn.proj.weight.T + attn.proj.bias


def test_attention_scale_is_one_over_sqrt_head_dim_and_qkv_are_column_blocks():
    """Scale 1/sqrt(64) for 64-wide heads (not 1/sqrt(d_model)); q | k | v order; contiguous heads."""
    torch.manual_seed(0)
    attn = MultiHeadSelfAttention(128, 2, causal=True).eval()
    x = torch.randn(2, 7, 128)
    out = attn(x)
    assert torch.allclose(out, reference(attn, x, 1 / math.sqrt(64)), atol=1e-12)
    assert not torch.allclose(out, reference(attn, x, 1 / math.sqrt(128)), atol=1e-4)
    # swapping the q and k blocks changes the output: the layout is not symmetric by accident
    swapped = MultiHeadSelfAttention(128, 2, causal=True).eval()
    swapped.load_state_dict(attn.state_dict())
    with torch.no_grad():
        w = swapped.qkv.weight
        w[:128], w[128:256] = w[128:256].clone(), w[:128].clone()
    assert not torch.allclose(swapped(x), out, atol=1e-4)


@pytest.mark.parametrize("causal", [True, False])
def test_key_padding_matches_reference_on_real_positions(causal):
    torch.manual_seed(1)
    attn = MultiHeadSelfAttention(32, 4, causal=causal).eval()
    x = torch.randn(3, 6, 32)
    real = torch.tensor([[1] * 6, [1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0]])
    out = attn(x, real)
    ref = reference(attn, x, 1 / math.sqrt(8), real)
    assert torch.allclose(out[real.bool()], ref[real.bool()], atol=1e-12)


def test_causal_right_padding_needs_no_mask_and_left_padding_has_no_nan():
    torch.manual_seed(2)
    attn = MultiHeadSelfAttention(32, 4, causal=True).eval()
    x = torch.randn(2, 6, 32)
    right = torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0]])
    assert torch.allclose(attn(x, right)[right.bool()], attn(x)[right.bool()], atol=1e-12)
    left = right.flip(-1)  # rows starting with padding: their queries see no real key
    out = attn(x, left)
    assert torch.isfinite(out).all()
    # a left-padded sequence gives the real tokens the same states as the same tokens unpadded
    alone = attn(x[1:, 3:])
    assert torch.allclose(out[1, 3:], alone[0], atol=1e-12)


def test_mask_shapes():
    real = torch.tensor([[1, 1, 0]])
    assert attention_mask(real, causal=False, q_len=3).shape == (1, 1, 1, 3)
    m = attention_mask(real, causal=True, q_len=3)[0, 0]
    assert m.tolist() == [[True, False, False], [True, True, False], [True, True, True]]


def test_functional_form_serves_separate_projections():
    """What a model with its own query/key/value layers (BERT) calls: same numbers as the fused module."""
    torch.manual_seed(3)
    attn = MultiHeadSelfAttention(32, 4).eval()
    x = torch.randn(2, 5, 32)
    q, k, v = attn.qkv(x).chunk(3, -1)
    assert torch.allclose(attn.proj(multi_head_attention(q, k, v, 4)), attn(x), atol=1e-12)
