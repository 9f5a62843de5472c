"""Relative attention: rel-shift vs naive (the efficient computation of Yang's thesis §2.1.3), masks, fp32 masking
under autocast."""

from __future__ import annotations

import itertools

import pytest
import torch

from genlab.nn.positional import relative_positions, sinusoid_table
from genlab.nn.relative_attention import (
    AbsoluteAttention,
    RelPartialLearnableAttention,
    ShawRelativeAttention,
    attention_mask,
    rel_shift,
)

D, H, DH = 32, 4, 8


def test_c1_rel_shift_2d_toy():
    """rel_shift(raw)[i, j] == q_i · R_{i+M-j} for j <= i+M, where raw column c holds distance K-1-c."""
    g = torch.Generator().manual_seed(0)
    L, M, dim = 4, 3, 5
    K = L + M
    q = torch.randn(L, dim, generator=g, dtype=torch.float64)
    R = torch.randn(K, dim, generator=g, dtype=torch.float64)  # R[d] = embedding of distance d
    raw = q @ R.flip(0).T  # column c <-> distance K-1-c
    shifted = rel_shift(raw)
    for i, j in itertools.product(range(L), range(K)):
        if j <= i + M:
            assert torch.isclose(shifted[i, j], q[i] @ R[i + M - j])


def _rel_module(seed: int = 0) -> RelPartialLearnableAttention:
    torch.manual_seed(seed)
    m = RelPartialLearnableAttention(D, H, DH, own_biases=True).double().eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.3)
    return m


@pytest.mark.parametrize("mlen", [0, 3])
@pytest.mark.parametrize("clamp_len", [-1, 2])
def test_c1_shift_equals_naive(mlen, clamp_len):
    m = _rel_module()
    B, L = 2, 4
    K = L + mlen
    h = torch.randn(B, L, D, dtype=torch.float64)
    mem = torch.randn(B, mlen, D, dtype=torch.float64) if mlen else None
    r = sinusoid_table(relative_positions(K, clamp_len=clamp_len), D).double()
    mask = attention_mask(L, mlen)
    got = m.scores(h, r, mask, mem)

    # Naive: per pair (i, j), the position key W_{k,R} R_{min(i+M-j, clamp)}.
    cat = h if mem is None else torch.cat([mem, h], 1)
    q, k, _ = m.qkv(cat).chunk(3, -1)
    q = q[:, -L:].view(B, L, H, DH)
    k = k.view(B, K, H, DH)
    dist = torch.arange(L)[:, None] + mlen - torch.arange(K)[None, :]
    cap = dist.clamp(min=0) if clamp_len <= 0 else dist.clamp(min=0, max=clamp_len)
    r_pair = m.r_net(sinusoid_table(cap.reshape(-1).double(), D).double()).view(L, K, H, DH)
    ac = torch.einsum("bihd,bjhd->bhij", q + m.u, k)
    bd = torch.einsum("bihd,ijhd->bhij", q + m.v, r_pair)
    naive = (ac + bd) / DH**0.5
    keep = ~mask
    assert got.dtype == torch.float64
    assert torch.allclose(got[..., keep], naive[..., keep], atol=1e-5)
    assert torch.isinf(got[..., mask]).all()


def test_forward_matches_explicit_softmax():
    """The fused SDPA path equals softmax(scores) @ v followed by o_net, residual and LayerNorm."""
    m = _rel_module(1)
    B, L, mlen = 2, 5, 3
    h = torch.randn(B, L, D, dtype=torch.float64)
    mem = torch.randn(B, mlen, D, dtype=torch.float64)
    r = sinusoid_table(relative_positions(L + mlen), D).double()
    mask = attention_mask(L, mlen)
    probs = m.scores(h, r, mask, mem).softmax(-1)
    _, _, v = m.qkv(torch.cat([mem, h], 1)).chunk(3, -1)
    vec = (probs @ v.view(B, L + mlen, H, DH).transpose(1, 2)).transpose(1, 2).reshape(B, L, H * DH)
    expect = m.norm(h + m.out(vec))
    assert torch.allclose(m(h, r, mask, mem), expect, atol=1e-10)


def test_c8_mask_counts():
    L, M = 5, 4
    for mlen in range(0, M + 1):
        visible = (~attention_mask(L, mlen)).sum(1)
        assert visible.tolist() == [mlen + i + 1 for i in range(L)]
    # Full memory: TF same_length sees M+1 keys per query, the PyTorch/HF variant M.
    assert (~attention_mask(L, M, same_length=True, mem_len=M, variant="tf")).sum(1).tolist() == [M + 1] * L
    assert (~attention_mask(L, M, same_length=True, mem_len=M, variant="pytorch")).sum(1).tolist() == [M] * L


def test_c8_pytorch_variant_equals_reference_formula():
    """The distance form (0 <= delta <= M-1) equals triu(1+M_cur) + tril(-shift) for every M_cur <= M, L <= 8."""
    for M, L in itertools.product(range(1, 9), range(1, 9)):
        for mlen in range(0, M + 1):
            klen = L + mlen
            ones = torch.ones(L, klen)
            mask_len = klen - M
            shift = L - mask_len if mask_len > 0 else L
            ref = (torch.triu(ones, 1 + mlen) + torch.tril(ones, -shift)) > 0
            assert torch.equal(attention_mask(L, mlen, same_length=True, mem_len=M, variant="pytorch"), ref)


def test_mask_rejects_unknown_variant():
    with pytest.raises(ValueError, match="same_length_variant"):
        attention_mask(3, 2, same_length=True, mem_len=2, variant="bogus")


@pytest.mark.parametrize("mlen", [0, 6])
def test_c16_bf16_autocast_no_nan(mlen):
    torch.manual_seed(0)
    m = RelPartialLearnableAttention(D, H, DH, own_biases=True)
    h = torch.randn(2, 4, D)
    mem = torch.randn(2, mlen, D) if mlen else None
    r = sinusoid_table(relative_positions(4 + mlen), D)
    mask = attention_mask(4, mlen, same_length=True, mem_len=6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        scores = m.scores(h, r, mask, mem)
        out = m(h, r, mask, mem)
    assert scores.dtype == torch.float32
    probs = scores.softmax(-1)
    assert not probs.isnan().any()
    assert torch.isfinite(out).all()
    m_bf16 = m.to(torch.bfloat16)
    out16 = m_bf16(h.bfloat16(), r.bfloat16(), mask, None if mem is None else mem.bfloat16())
    assert torch.isfinite(out16).all()


def test_shaw_and_absolute_are_causal():
    """Future keys never influence earlier queries in the Shaw and plain attention variants."""
    torch.manual_seed(0)
    for m in (ShawRelativeAttention(D, H, DH, max_len=16).eval(),
              ShawRelativeAttention(D, H, DH, max_len=16, bias_terms=False).eval(),
              AbsoluteAttention(D, H, DH, 0.0, 0.0, False, 1e-5).eval()):
        with torch.no_grad():
            for p in m.parameters():
                p.normal_(0, 0.3)
        h = torch.randn(1, 6, D)
        mem = torch.randn(1, 3, D)
        mask = attention_mask(6, 3)
        base = m(h, mask, mem)
        h2 = h.clone()
        h2[:, 4] += 1.0
        moved = m(h2, mask, mem)
        assert torch.allclose(base[:, :4], moved[:, :4], atol=1e-6)
        assert not torch.allclose(base[:, 4:], moved[:, 4:])


def test_shaw_bias_terms_switch():
    with_terms = ShawRelativeAttention(D, H, DH, max_len=8)
    without = ShawRelativeAttention(D, H, DH, max_len=8, bias_terms=False)
    names = {n for n, _ in with_terms.named_parameters()} - {n for n, _ in without.named_parameters()}
    assert names == {"u", "r_bias"}
