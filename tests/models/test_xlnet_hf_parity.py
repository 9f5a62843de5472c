"""Our XLNet equals Hugging Face XLNetLMHeadModel on random weights (the weight layout of HF's port)."""

from __future__ import annotations

import pytest
import torch

from genlab.models.xlnet import XLNetLMHeadModel

transformers = pytest.importorskip("transformers", reason="transformers (test dependency) is not installed")

V, L, D, H, DH, DI = 50, 2, 32, 2, 16, 64
B, T = 2, 7
TOL = 1e-4


def make_pair(**kw):
    """Ours (random N(0, 0.3) weights, uniform empty rows like HF) and HF loaded with the same state dict."""
    torch.manual_seed(0)
    ours = XLNetLMHeadModel(V, n_layer=L, d_model=D, n_head=H, d_head=DH, d_inner=DI, dropout=0.0, dropatt=0.0,
                            empty_row_policy="uniform", **kw).eval()
    with torch.no_grad():
        for p in ours.parameters():
            p.normal_(0, 0.3)
    cfg = transformers.XLNetConfig(
        vocab_size=V, d_model=D, n_layer=L, n_head=H, d_inner=DI, ff_activation="gelu_new", dropout=0.0,
        attn_type=kw.get("attn_type", "bi"), bi_data=kw.get("bi_data", False), clamp_len=kw.get("clamp_len", -1),
        same_length=kw.get("same_length", False), mem_len=kw.get("mem_len") or None,
    )
    hf = transformers.XLNetLMHeadModel(cfg).eval()
    hf.load_state_dict(ours.state_dict(), strict=True)
    return ours, hf


def inputs(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (B, T), generator=g)
    seg = torch.randint(0, 3, (B, T), generator=g)
    perm = (torch.rand(B, T, T, generator=g) > 0.5).float()
    perm[:, :, 0] = 0  # position 0 is always visible: no empty query rows
    tm = torch.zeros(B, 3, T)
    for p, pos in enumerate([1, 3, 5]):
        tm[:, p, pos] = 1
    tm[1, 2] = 0  # a padding slot
    return ids, seg, perm, tm


def real_slots(x):
    return torch.cat([x[0], x[1, :2]])


def test_plain_forward_with_token_types_and_left_padding():
    ours, hf = make_pair()
    ids, seg, _, _ = inputs()
    pad = torch.zeros(B, T)
    pad[0, :3] = 1
    a = ours(ids, seg, input_mask=pad)
    b = hf(ids, token_type_ids=seg, input_mask=pad, output_hidden_states=True)
    assert (a.logits - b.logits).abs().max() < TOL
    assert (a.hidden - b.hidden_states[-1]).abs().max() < 1e-5


def test_two_stream_perm_mask_target_mapping():
    ours, hf = make_pair()
    ids, seg, perm, tm = inputs()
    a = ours(ids, seg, perm_mask=perm, target_mapping=tm)
    b = hf(ids, token_type_ids=seg, perm_mask=perm, target_mapping=tm, output_hidden_states=True)
    assert a.logits.shape == (B, 3, V)
    assert (real_slots(a.logits) - real_slots(b.logits)).abs().max() < TOL
    # HF hidden_states interleave (h, g) per layer; the last pair is the final layer
    assert (a.hidden - b.hidden_states[-2]).abs().max() < 1e-5
    assert (real_slots(a.query_hidden) - real_slots(b.hidden_states[-1])).abs().max() < 1e-5


@pytest.mark.parametrize(
    "kw",
    [
        dict(mem_len=5),
        dict(mem_len=5, bi_data=True),
        dict(mem_len=5, attn_type="uni"),
        dict(mem_len=5, attn_type="uni", same_length=True),
        dict(mem_len=5, clamp_len=2),
    ],
    ids=["mems", "bi_data", "uni", "uni_same_length", "clamp_len"],
)
def test_two_segments_with_memory(kw):
    ours, hf = make_pair(**kw)
    hf.transformer.reuse_len = 4
    ids, seg, perm, tm = inputs()
    ids2, seg2, perm2, _ = inputs(seed=2)
    if kw.get("attn_type") == "uni":  # HF cannot combine "uni" with a perm_mask (broadcast error)
        perm = perm2 = None
    a1 = ours(ids, seg, perm_mask=perm, target_mapping=tm, reuse_len=4)
    b1 = hf(ids, token_type_ids=seg, perm_mask=perm, target_mapping=tm, use_mems=True)
    a2 = ours(ids2, seg2, perm_mask=perm2, target_mapping=tm, memory=a1.memory, reuse_len=4)
    b2 = hf(ids2, token_type_ids=seg2, perm_mask=perm2, target_mapping=tm, mems=b1.mems, use_mems=True)
    assert (real_slots(a1.logits) - real_slots(b1.logits)).abs().max() < TOL
    assert (real_slots(a2.logits) - real_slots(b2.logits)).abs().max() < TOL
    assert [m.shape for m in a1.memory] == [(B, 4, D)] * L  # first step: min(mem_len, reuse_len)
    assert [m.shape for m in a2.memory] == [(B, 5, D)] * L
    for ours_mem, hf_mem in zip(a2.memory, b2.mems):  # HF mems are time-first [M, B, d]
        assert (ours_mem - hf_mem.transpose(0, 1)).abs().max() < 1e-5


def test_full_length_logits_without_target_mapping():
    ours, hf = make_pair()
    ids, seg, perm, _ = inputs()
    a = ours(ids, seg, perm_mask=perm)
    b = hf(ids, token_type_ids=seg, perm_mask=perm)
    assert a.logits.shape == (B, T, V)
    assert (a.logits - b.logits).abs().max() < TOL
