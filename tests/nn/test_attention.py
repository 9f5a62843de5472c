"""genlab.nn.attention: SDPA multi-head attention against an explicit reference (scale, q|k|v layout, masks)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from genlab.nn.attention import (
    MultiHeadSelfAttention,
    attend_heads,
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


class OpNames(TorchDispatchMode):
    def __enter__(self):
        self.names = set()
        return super().__enter__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func.__name__.split(".")[0])
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("causal", [True, False])
def test_bf16_dropout_on_the_cpu_runs_the_bf16_score_chain_with_sdpas_masks(causal):
    """bf16 with attention dropout on the CPU (where SDPA would upcast its math path to fp32) takes the bf16 score
    chain: with the values an identity the output is the dropped probability matrix, so it shows the scale, the
    causal and key masks, the 1/(1-p) rescaling and that the dropout masks are SDPA's own for the same seed."""
    b, h, t, p = 2, 3, 16, 0.25
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(b, h, t, t, generator=g, dtype=torch.float32).bfloat16() for _ in range(2))
    v = torch.eye(t, dtype=torch.bfloat16).expand(b, h, t, t)  # d_head = t
    keys = None if causal else (torch.arange(t) < torch.tensor([[t], [t - 5]]))[:, None, None, :]
    torch.manual_seed(3)
    with OpNames() as ops:
        got = attend_heads(q, k, v, keys, dropout_p=p, is_causal=causal).view(b, t, h, t).transpose(1, 2).double()
    assert "baddbmm_" in ops.names and not any("scaled_dot_product" in n for n in ops.names), ops.names
    torch.manual_seed(3)
    sdpa = F.scaled_dot_product_attention(q, k, v, keys, dropout_p=p, is_causal=causal)
    prob = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), keys, is_causal=causal)
    kept = got != 0
    assert torch.equal(kept, sdpa != 0) and 0 < (prob != 0).sum() - kept.sum() < (prob != 0).sum() / 2
    assert not kept[prob == 0].any()  # masked keys (causal: above the diagonal) get nothing
    torch.testing.assert_close(got[kept], prob[kept] / (1 - p), rtol=0.03, atol=2e-3)
