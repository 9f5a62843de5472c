"""MoS, MoC and Softmax heads (Dai's thesis App. A.2): the three output layers are distributions, reduce as stated,
and the softmax bottleneck is visible when fitting a random target."""

import math

import pytest
import torch
import torch.nn.functional as F

from genlab.analysis.softmax_rank import bottleneck_fit
from genlab.nn.mixture_of_softmaxes import MixtureHead, SoftmaxHead, build_head

H, D, M, K = 12, 8, 30, 4


def _heads():
    torch.manual_seed(0)
    return {
        "softmax": SoftmaxHead(D, M).double(),
        "mos": MixtureHead(H, D, M, K, mix="probs").double(),
        "mos_floor": MixtureHead(H, D, M, K, mix="probs", log_eps=1e-8).double(),
        "moc": MixtureHead(H, D, M, K, mix="contexts").double(),
    }


@pytest.mark.parametrize("name", ["softmax", "mos", "mos_floor", "moc"])
def test_c1_valid_distribution_and_nll_matches_log_prob(name):
    head = _heads()[name]
    g = torch.randn(3, 5, D if name == "softmax" else H, dtype=torch.float64)
    log_p = head.log_prob(g)
    tol = 1e-6 if name != "mos_floor" else M * 1e-8 + 1e-6
    assert torch.allclose(log_p.exp().sum(-1), torch.ones(3, 5, dtype=torch.float64), atol=tol)
    target = torch.randint(M, (3, 5))
    assert torch.allclose(head.nll(g, target), -log_p.gather(-1, target[..., None]).squeeze(-1), atol=1e-10)


def test_c1_floor_caps_the_loss():
    torch.manual_seed(0)
    head = MixtureHead(H, D, M, K, mix="probs", log_eps=1e-8).double()
    with torch.no_grad():
        head.decoder.weight.mul_(1000)  # extremely peaked components -> tiny tail probabilities
    g = torch.randn(4, 6, H, dtype=torch.float64)
    assert head.log_prob(g).min() >= math.log(1e-8) - 1e-9
    assert head.nll(g, torch.randint(M, (4, 6))).max() <= -math.log(1e-8) + 1e-9


def test_c2_mos_with_one_component_is_log_softmax_of_the_latent_path():
    torch.manual_seed(0)
    head = MixtureHead(H, D, M, 1, mix="probs").double()
    g = torch.randn(2, 5, H, dtype=torch.float64)
    h = torch.tanh(head.latent(g))
    assert torch.allclose(head.log_prob(g), F.log_softmax(head.decoder(h), -1), atol=1e-12)


def test_c2_moc_is_softmax_over_the_mixed_context():
    head = _heads()["moc"]
    g = torch.randn(2, 5, H, dtype=torch.float64)
    pi = F.softmax(head.prior(g), -1)
    h = torch.tanh(head.latent(g)).view(2, 5, K, D)
    mixed = (pi[..., None] * h).sum(-2)
    assert torch.allclose(head.log_prob(g), F.log_softmax(head.decoder(mixed), -1), atol=1e-12)


class _OneHotPrior(torch.nn.Module):
    def __init__(self, j: int):
        super().__init__()
        self.j = j

    def forward(self, g):
        return 1e4 * F.one_hot(torch.full(g.shape[:-1], self.j), K).to(g.dtype)


def test_c2_one_hot_prior_selects_that_component():
    head = _heads()["mos"]
    head.prior = _OneHotPrior(2)
    g = torch.randn(2, 5, H, dtype=torch.float64)
    h = torch.tanh(head.latent(g)).view(2, 5, K, D)[..., 2, :]
    assert torch.allclose(head.log_prob(g), F.log_softmax(head.decoder(h), -1), atol=1e-12)


def test_mos_context_layout_is_component_major():
    # feature k*d + j of the latent is component k, dimension j (the released code's layout)
    head = _heads()["mos"]
    g = torch.randn(1, 1, H, dtype=torch.float64)
    _, h = head.contexts(g)
    flat = torch.tanh(head.latent(g))
    assert torch.equal(h[0, 0, 1], flat[0, 0, D : 2 * D])


def test_mos_context_dropout_is_locked_over_time():
    torch.manual_seed(0)
    head = MixtureHead(H, D, M, K, dropoutl=0.5)
    g = torch.randn(2, 6, H)
    _, h = head.contexts(g)
    ratio = h / torch.tanh(head.latent(g)).view(2, 6, K, D)
    assert torch.allclose(ratio, ratio[:, :1].expand_as(ratio))


def test_c4_bottleneck_visible_in_optimisation():
    torch.manual_seed(0)
    target = F.log_softmax(2 * torch.randn(64, 64), -1)
    kl_softmax, kl_mos = bottleneck_fit(target, d=4, k=1), bottleneck_fit(target, d=4, k=8)
    assert kl_mos < 0.25 * kl_softmax, (kl_softmax, kl_mos)


def test_c5_inverse_no_bottleneck_when_vocab_below_d():
    torch.manual_seed(0)
    target = F.log_softmax(2 * torch.randn(64, 8), -1)
    kl_softmax, kl_mos = bottleneck_fit(target, d=16, k=1), bottleneck_fit(target, d=16, k=8)
    assert kl_softmax < 1e-4 and kl_mos < 1e-4, (kl_softmax, kl_mos)


def test_build_head_rejects_unknown():
    with pytest.raises(ValueError, match="softmax, mos, moc"):
        build_head("mixture", H, D, M)
