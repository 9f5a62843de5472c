"""Adaptive softmax (Grave et al., 2017) normalisation and gathering, and adaptive input (Baevski and Auli, 2019), as
Transformer-XL's released code builds them."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from genlab.models.transformer_xl import TransformerXL
from genlab.nn.adaptive_embedding import AdaptiveEmbedding
from genlab.nn.adaptive_softmax import ProjectedAdaptiveLogSoftmax

V, D = 60, 32
CUTOFFS = [12, 25, 40]


def _randomise(module: torch.nn.Module, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=g, dtype=p.dtype))


@pytest.mark.parametrize("div_val,d_embed", [(1, 32), (1, 16), (2, 32), (4, 32)])
def test_c9_normalised_and_gather_matches(div_val, d_embed):
    crit = ProjectedAdaptiveLogSoftmax(V, d_embed, D, CUTOFFS, div_val).double()
    _randomise(crit)
    h = torch.randn(50, D, dtype=torch.float64)
    table = crit.log_prob(h)
    assert table.shape == (50, V)
    assert torch.allclose(table.logsumexp(-1), torch.zeros(50, dtype=torch.float64), atol=1e-5)
    target = torch.randint(0, V, (50,))
    target[:4] = torch.tensor([0, 12, 39, 59])  # bin edges
    assert torch.allclose(crit(h, target), -table.gather(1, target[:, None]).squeeze(1), atol=1e-10)


def test_c9_natural_cluster_order():
    """Tail bin i uses head column c1 + i - 1 (cluster_weight row i - 1)."""
    crit = ProjectedAdaptiveLogSoftmax(V, D, D, CUTOFFS, 1).double()
    _randomise(crit)
    h = torch.randn(3, D, dtype=torch.float64)
    head_w = torch.cat([crit.weights[0][:12], crit.cluster_weight])
    head_b = torch.cat([crit.biases[0][:12], crit.cluster_bias])
    head = F.log_softmax(h @ head_w.T + head_b, -1)
    lo, hi = CUTOFFS[1], CUTOFFS[2]  # bin 2
    tail = F.log_softmax(h @ crit.weights[0][lo:hi].T + crit.biases[0][lo:hi], -1)
    expect = head[:, 12 + 1, None] + tail
    assert torch.allclose(crit.log_prob(h)[:, lo:hi], expect)


def test_c9_no_cutoffs_is_plain_softmax():
    crit = ProjectedAdaptiveLogSoftmax(V, D, D, [], 1).double()
    _randomise(crit)
    h = torch.randn(7, D, dtype=torch.float64)
    expect = F.log_softmax(h @ crit.weights[0].T + crit.biases[0], -1)
    assert torch.allclose(crit.log_prob(h), expect)
    target = torch.randint(0, V, (7,))
    assert torch.allclose(crit(h, target), F.cross_entropy(h @ crit.weights[0].T + crit.biases[0], target,
                                                           reduction="none"))


def test_c9_fp32_under_autocast():
    crit = ProjectedAdaptiveLogSoftmax(V, D, D, CUTOFFS, 2)
    _randomise(crit)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = crit(torch.randn(5, D), torch.randint(0, V, (5,)))
    assert out.dtype == torch.float32


@pytest.mark.parametrize("div_val", [2, 4])
def test_c10_adaptive_input_per_bin(div_val):
    emb = AdaptiveEmbedding(V, D, D, CUTOFFS, div_val).double()
    _randomise(emb)
    ids = torch.tensor([[0, 11, 12, 30], [40, 59, 5, 26]])
    out = emb(ids)
    bounds = [0, *CUTOFFS, V]
    for b in range(2):
        for t in range(4):
            tok = int(ids[b, t])
            i = max(k for k in range(4) if bounds[k] <= tok)
            e = emb.tables[i].weight[tok - bounds[i]]
            assert emb.tables[i].weight.shape[1] == D // div_val**i
            assert torch.allclose(out[b, t], emb.proj(i) @ e * D**0.5)


def test_c10_no_projection_when_dims_match():
    emb = AdaptiveEmbedding(V, D, D, CUTOFFS, 1)
    assert len(emb.projs) == 0
    _randomise(emb)
    ids = torch.randint(0, V, (2, 3))
    assert torch.allclose(emb(ids), emb.tables[0].weight[ids] * D**0.5)
    emb16 = AdaptiveEmbedding(V, 16, D, CUTOFFS, 1)
    assert list(emb16.projs) == ["0"]
    # proj_same_dim=False drops the projection of a bin whose width already equals d_model (bin 0).
    assert "0" not in AdaptiveEmbedding(V, D, D, CUTOFFS, 2, proj_same_dim=False).projs


@pytest.mark.parametrize("div_val,d_embed,tie_projs", [(2, 32, [False, True, True, True]),
                                                       (2, 32, [False, False, False, False]),
                                                       (1, 16, [False, True, False, True])])
def test_c10_tying_shares_storage(div_val, d_embed, tie_projs):
    m = TransformerXL(V, n_layer=1, d_model=D, n_head=4, d_head=8, d_inner=64, d_embed=d_embed, cutoffs=CUTOFFS,
                      div_val=div_val, tie_projs=tie_projs, mem_len=0)
    for i, table in enumerate(m.word_emb.tables):
        assert m.crit.weights[i].data_ptr() == table.weight.data_ptr()
    for i, tie in enumerate(tie_projs):
        src = m.word_emb.proj(0 if div_val == 1 else i)
        assert (m.crit.proj(i).data_ptr() == src.data_ptr()) == tie
    untied = TransformerXL(V, n_layer=1, d_model=D, n_head=4, d_head=8, d_inner=64, d_embed=d_embed,
                           cutoffs=CUTOFFS, div_val=div_val, tie_weight=False, mem_len=0)
    assert untied.crit.weights[0].data_ptr() != untied.word_emb.tables[0].weight.data_ptr()
    assert untied.num_parameters() > m.num_parameters()
