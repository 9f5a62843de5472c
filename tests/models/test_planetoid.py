"""Planetoid-T / -G / -I architectures (Yang's thesis §3.3.3-§3.3.4)."""

from __future__ import annotations

import pytest
import torch

from genlab.models.planetoid import PlanetoidI, PlanetoidT

N, F, C, D = 12, 9, 3, 5


def _x(n=N):
    g = torch.Generator().manual_seed(0)
    return torch.rand(n, F, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("cls", [PlanetoidT, PlanetoidI])
def test_reference_arch_shapes(cls):
    m = cls(num_nodes=N, n_features=F, n_classes=C, embedding_size=D).double()
    nodes = torch.arange(N)
    out = m(nodes, _x())
    assert out.logits.shape == (N, C) and len(out.branch_logits) == 2
    for z in out.branch_logits:
        assert z.shape == (N, C)
        torch.testing.assert_close(z.softmax(-1).sum(-1), torch.ones(N, dtype=torch.float64))
    assert m.out.in_features == 2 * C
    # the final layer sees exactly the two branch probability vectors
    h = torch.cat([z.softmax(-1) for z in out.branch_logits], -1)
    torch.testing.assert_close(out.logits, m.out(h))


@pytest.mark.parametrize("cls", [PlanetoidT, PlanetoidI])
def test_paper_arch_is_relu_hidden_layers(cls):
    m = cls(num_nodes=N, n_features=F, n_classes=C, embedding_size=D, arch="paper", hidden_x=7, hidden_e=4)
    out = m(torch.arange(N), _x().float())
    assert out.branch_logits == () and m.out.in_features == 11
    assert m.branch_x.arch == "paper"


def test_planetoid_g_ignores_features():
    m = PlanetoidT(num_nodes=N, n_features=F, n_classes=C, embedding_size=D, use_feature=False)
    nodes = torch.arange(N)
    a, b = m(nodes, _x().float()).logits, m(nodes, torch.zeros(N, F)).logits
    torch.testing.assert_close(a, b)
    assert m.out.in_features == D  # reference Planetoid-G: softmax(e W + b)


def test_transductive_prediction_uses_the_node_embedding():
    m = PlanetoidT(num_nodes=N, n_features=F, n_classes=C, embedding_size=D)
    x = _x().float()
    before = m(torch.arange(N), x).logits
    with torch.no_grad():
        m.embedding.weight[3] += 5.0
    after = m(torch.arange(N), x).logits
    assert not torch.allclose(before[3], after[3]) and torch.allclose(before[:3], after[:3])
    torch.testing.assert_close(m.context_embed(torch.tensor([3]), None), m.embedding.weight[3:4])


def test_inductive_prediction_depends_on_features_only():
    m = PlanetoidI(num_nodes=N, n_features=F, n_classes=C, embedding_size=D).double()
    x = _x()
    nodes = torch.arange(N)
    ref = m(nodes, x).logits
    # the model has no graph or node input: node ids (a permutation/rewiring) do not matter
    torch.testing.assert_close(m(nodes.flip(0), x).logits, ref)
    torch.testing.assert_close(m(None, x).logits, ref)
    new = torch.rand(2, F, dtype=torch.float64)  # brand-new instances
    assert m(None, new).logits.shape == (2, C)


def test_inductive_context_branch_shares_weight_not_bias():
    m = PlanetoidI(num_nodes=N, n_features=F, n_classes=C, embedding_size=D).double()
    with torch.no_grad():
        m.context_bias.fill_(0.3)
        m.embed.bias.fill_(-0.2)
    x = _x()
    torch.testing.assert_close(m.context_embed(None, x), torch.relu(x @ m.embed.weight.T + 0.3))
    ctx_ids = {id(p) for p in m.context_parameters()}
    sup_ids = {id(p) for p in m.supervised_parameters()}
    assert id(m.embed.weight) in ctx_ids and id(m.embed.weight) in sup_ids
    assert id(m.context_bias) in ctx_ids and id(m.context_bias) not in sup_ids
    assert id(m.embed.bias) in sup_ids and id(m.embed.bias) not in ctx_ids
    shared = PlanetoidI(num_nodes=N, n_features=F, n_classes=C, embedding_size=D, share_embedding_bias=True)
    assert shared.context_bias is None and id(shared.embed.bias) in {id(p) for p in shared.context_parameters()}


@pytest.mark.parametrize("mode", ["softmax", "sigmoid"])
def test_context_heads_are_separate_from_instance_embeddings(mode):
    m = PlanetoidT(num_nodes=N, n_features=F, n_classes=C, embedding_size=D, context_mode=mode)
    e = m.context_embed(torch.arange(4), None)
    if mode == "softmax":
        assert m.context_logits(e).shape == (4, N)
    else:
        assert m.context_score(e, torch.arange(4)).shape == (4,)
        assert m.context.vectors.weight is not m.embedding.weight


def test_update_emb_controls_supervised_parameters():
    on = PlanetoidT(num_nodes=N, n_features=F, n_classes=C, embedding_size=D, update_emb=True)
    off = PlanetoidT(num_nodes=N, n_features=F, n_classes=C, embedding_size=D, update_emb=False)
    assert any(p is on.embedding.weight for p in on.supervised_parameters())
    assert not any(p is off.embedding.weight for p in off.supervised_parameters())
    for m in (on, off):
        ctx = {id(p) for p in m.context.parameters()}
        assert not ctx & {id(p) for p in m.supervised_parameters()}
