"""Two-stream relative attention vs a naive transcription of XLNet v1 §2.3-§2.5 and
App. A.2."""

from __future__ import annotations

import pytest
import torch

from genlab.models.xlnet import XLNetModel
from genlab.nn.positional import sinusoid_table
from genlab.nn.two_stream_attention import _ShiftedBias, relative_shift

D, H, DH = 16, 2, 8


def naive_attention(attn, x, positions, cat, seg_q, seg_k, blocked, m, backward, clamp_len):
    """Per-pair distances M+i-j (negated for backward rows), explicit s_+/s_-, -1e30 masking, post-LN.

    x [B, Lq, d] queries at original positions [B, Lq]; cat [B, K, d] keys/values; blocked [B, Lq, K] bool."""
    q = torch.einsum("bid,dnh->bnih", x, attn.q)
    k = torch.einsum("bjd,dnh->bnjh", cat, attn.k)
    v = torch.einsum("bjd,dnh->bnjh", cat, attn.v)
    klen = cat.shape[1]
    delta = (m + positions[:, :, None] - torch.arange(klen)[None, None, :]).to(x.dtype)  # [B, Lq, K]
    delta = torch.where(backward[:, None, None], -delta, delta)
    if clamp_len > 0:
        delta = delta.clamp(-clamp_len, clamp_len)
    rel = sinusoid_table(delta.flatten(), x.shape[-1]).to(x.dtype).view(*delta.shape, -1)
    r = torch.einsum("bijd,dnh->bnijh", rel, attn.r)
    ac = torch.einsum("bnih,bnjh->bnij", q + attn.r_w_bias[:, None], k)
    bd = torch.einsum("bnih,bnijh->bnij", q + attn.r_r_bias[:, None], r)
    different = (seg_q[:, :, None] != seg_k[:, None, :]).long()  # 0 = same -> s_+, 1 = different -> s_-
    s = attn.seg_embed[different]  # [B, Lq, K, H, DH]
    ef = torch.einsum("bnih,bijnh->bnij", q + attn.r_s_bias[:, None], s)
    score = (ac + bd + ef) / DH**0.5 - 1e30 * blocked[:, None].to(x.dtype)
    a = torch.einsum("bnij,bnjh->bnih", score.softmax(-1), v)
    out = torch.einsum("bnih,dnh->bid", a, attn.o)
    return attn.layer_norm(x + out)


@pytest.mark.parametrize("m", [0, 3])
@pytest.mark.parametrize("t", [1, 4, 7])
@pytest.mark.parametrize("clamp_len", [-1, 2])
@pytest.mark.parametrize("bi_data", [False, True])
def test_c2_layer_equals_naive_relative_attention(m, t, clamp_len, bi_data):
    torch.manual_seed(100 * m + 10 * t + clamp_len)
    b, p = 4, min(t, 3)
    model = XLNetModel(30, n_layer=1, d_model=D, n_head=H, d_head=DH, d_inner=32, dropout=0.0, dropatt=0.0,
                       bi_data=bi_data, clamp_len=clamp_len, empty_row_policy="uniform").double().eval()
    with torch.no_grad():
        for prm in model.parameters():
            prm.normal_(0, 0.5)
    attn = model.layer[0].rel_attn
    ids = torch.randint(0, 30, (b, t))
    seg = torch.randint(0, 3, (b, t))
    perm = (torch.rand(b, t, t) > 0.5).double()
    if m == 0:
        perm[:, :, 0] = 0  # keep one visible key per row
    pos = torch.stack([torch.randperm(t)[:p] for _ in range(b)])
    tm = torch.nn.functional.one_hot(pos, t).double()
    h = torch.randn(b, t, D, dtype=torch.float64)
    g = torch.randn(b, p, D, dtype=torch.float64)
    mem = torch.randn(b, m, D, dtype=torch.float64) if m else None
    ctx = model._context(ids, seg, None, perm, tm, m, torch.float64)
    out_h, out_g = attn(h, g, mem, ctx)
    assert (ctx.mask_h[..., :m] == 0).all() and (ctx.mask_g[..., :m] == 0).all()  # memory always visible

    cat = h if mem is None else torch.cat([mem, h], 1)
    seg_k = torch.cat([torch.zeros(b, m, dtype=torch.long), seg], 1)
    blocked_q = torch.cat([torch.zeros(b, t, m, dtype=torch.bool), perm.bool()], 2)
    blocked_c = blocked_q.clone()
    blocked_c[:, torch.arange(t), m + torch.arange(t)] = False
    backward = torch.arange(b) >= b // 2 if bi_data else torch.zeros(b, dtype=torch.bool)
    ref_h = naive_attention(attn, h, torch.arange(t).expand(b, t), cat, seg, seg_k, blocked_c, m, backward,
                            clamp_len)
    ref_g = naive_attention(attn, g, pos, cat, seg.gather(1, pos), seg_k, blocked_q.gather(
        1, pos[:, :, None].expand(-1, -1, m + t)), m, backward, clamp_len)
    assert (out_h - ref_h).abs().max() < 1e-10
    assert (out_g - ref_g).abs().max() < 1e-10


def test_relative_shift_is_a_view_with_the_right_distances():
    t, klen = 5, 8  # M = 3
    dist = torch.arange(klen, -t, -1).double()  # [K..-T+1]
    table = dist.expand(2, t, klen + t).contiguous()
    shifted = relative_shift(table, t)
    assert shifted.data_ptr() == table.data_ptr() + t * table.element_size()
    want = 3 + torch.arange(t)[:, None] - torch.arange(klen)[None, :]
    assert torch.equal(shifted[1], want.double())


@pytest.mark.parametrize("t, klen, with_mask, head_major", [(5, 8, True, False), (4, 4, False, False),
                                                          (1, 3, True, False), (5, 8, True, True)])
def test_shifted_bias_matches_autograd_of_the_view(t, klen, with_mask, head_major):
    """The written-out shift + mask, and its hand-written backward (gradient in place, zeros only off the rows'
    windows, in the table's own layout), against autograd through the strided view; the output is contiguous (an
    in-place baddbmm target). ``head_major``: the [B, H] blocks of the table laid out head by head, as the
    batch-folded positional matmul leaves them."""
    table = torch.randn(2, 3, t, klen + t, dtype=torch.float64)
    if head_major:
        table = table.transpose(0, 1).contiguous().transpose(0, 1)
    table.requires_grad_(True)
    mask = torch.randn(2, 1, t, klen, dtype=torch.float64) if with_mask else None
    out = _ShiftedBias.apply(table, t, mask, (2, 3, t, klen))
    ref = relative_shift(table, t) + (0 if mask is None else mask)
    assert out.is_contiguous() and torch.equal(out, ref)
    g = torch.randn_like(out)
    (got,) = torch.autograd.grad(out, table, g)
    (want,) = torch.autograd.grad(ref, table, g)
    assert torch.equal(got, want) and got.stride() == table.stride()
    torch.autograd.gradcheck(lambda x: _ShiftedBias.apply(x, t, mask, (2, 3, t, klen)), (table,))


def test_c3_positional_table_layout():
    model = XLNetModel(10, n_layer=1, d_model=D, n_head=H, d_head=DH, d_inner=8, dropout=0.0, bi_data=True)
    emb = model._positional(qlen=3, klen=5, bsz=2, device=torch.device("cpu"))
    dist = torch.arange(5, -3, -1).float()
    inv_freq = 1.0 / 10000 ** (torch.arange(0, D, 2).float() / D)  # over d_model, not d_head
    assert torch.allclose(emb[0, :, : D // 2], torch.sin(dist[:, None] * inv_freq))
    assert torch.allclose(emb[0, :, D // 2:], torch.cos(dist[:, None] * inv_freq))
    assert torch.allclose(emb[1, :, : D // 2], torch.sin(-dist[:, None] * inv_freq))  # backward half: -δ
