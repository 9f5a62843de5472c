"""The softmax bottleneck (Dai's thesis App. A.2, A.8): Softmax and MoC log-probability matrices have rank <= d + 2,
MoS is full rank; the tolerance must use the epsilon of the precision the log-probs were computed in."""

import torch

from genlab.analysis.softmax_rank import (
    bottleneck_fit,
    collect_log_probs,
    numerical_rank,
    pairwise_kl,
    singular_value_cdf,
    singular_values,
)
from genlab.models.awd_lstm import AWDLSTM
from genlab.nn.mixture_of_softmaxes import MixtureHead, SoftmaxHead

N, M, D, K, H = 400, 60, 8, 6, 16


def _log_probs(dtype):
    torch.manual_seed(0)
    heads = {"softmax": SoftmaxHead(D, M), "moc": MixtureHead(H, D, M, K, mix="contexts"),
             "mos": MixtureHead(H, D, M, K, mix="probs")}
    out = {}
    for name, head in heads.items():
        with torch.no_grad():
            torch.nn.init.normal_(head.decoder.bias)
            g = torch.randn(N, D if name == "softmax" else H, dtype=torch.float64)
            out[name] = head.to(dtype).log_prob(g.to(dtype))
    return out


def test_c3_rank_property_float64():
    lp = _log_probs(torch.float64)
    assert numerical_rank(lp["softmax"]) == D + 2
    assert numerical_rank(lp["moc"]) == D + 2
    assert numerical_rank(lp["mos"]) == M


def test_p13_tolerance_follows_compute_precision():
    lp = _log_probs(torch.float32)
    assert numerical_rank(lp["softmax"]) == D + 2  # fp32 epsilon for fp32 log-probs
    assert numerical_rank(lp["mos"]) == M
    eps64 = torch.finfo(torch.float64).eps
    assert numerical_rank(lp["softmax"], eps=eps64) > D + 2  # the wrong epsilon counts round-off as rank


def test_blockwise_qr_gives_the_same_singular_values():
    a = torch.randn(300, 30, dtype=torch.float64)
    assert torch.allclose(singular_values(a, block_rows=64), torch.linalg.svdvals(a), atol=1e-9)


def test_rank_on_an_awd_lstm_stream():
    torch.manual_seed(0)
    kw = dict(vocab_size=M, nhid=16, nlayers=2, n_experts=K, mos_log_eps=0.0)
    tokens = torch.randint(M, (N + 1,))
    softmax = AWDLSTM(emsize=D, nhidlast=D, head="softmax", **kw)
    mos = AWDLSTM(emsize=D, nhidlast=16, head="mos", **kw)
    for model in (softmax, mos):
        torch.nn.init.normal_(model.head.decoder.bias)
        model.encoder.weight.data.mul_(20)  # spread the contexts so the mixture is far from one softmax
    lp_softmax = collect_log_probs(softmax, tokens, bptt=35)
    assert lp_softmax.shape == (N, M) and lp_softmax.dtype == torch.float64 and softmax.training
    assert numerical_rank(lp_softmax) <= D + 2
    assert numerical_rank(collect_log_probs(mos, tokens, bptt=35)) > D + 2


def test_singular_value_cdf_and_pairwise_kl():
    sv = torch.tensor([4.0, 2.0, 1.0, 0.0])
    cdf = singular_value_cdf(sv, torch.tensor([0.0, 0.3, 0.5, 1.0]))
    assert torch.allclose(cdf, torch.tensor([0.25, 0.5, 0.75, 1.0], dtype=torch.float64))
    same = torch.log_softmax(torch.randn(1, 5), -1).expand(10, 5)
    mean, se = pairwise_kl(same, 1000)
    assert abs(mean) < 1e-12 and se < 1e-12


def test_synthetic_topic_language_is_high_rank_and_mos_beats_softmax_at_small_d():
    """The bottleneck on the generator's exact conditionals (deterministic, unlike a short training run): the
    log-probability matrix of the topic-switching language is far above d + 2, and at d = 4 a mixture of 8
    softmaxes fits it much better than a Softmax."""
    from genlab.data.lm.synthetic_rank import make_topic_corpus, true_log_probs

    corpus = make_topic_corpus(vocab_size=48, n_topics=8, block=10, train_tokens=10, valid_tokens=201,
                               test_tokens=10, seed=0)
    target = torch.from_numpy(true_log_probs(corpus.unigrams, corpus.splits["valid"], block=10))
    assert torch.allclose(target.exp().sum(-1), torch.ones(200, dtype=torch.float64))
    assert numerical_rank(target) > 4 + 2
    kl_softmax = bottleneck_fit(target, d=4, k=1, steps=1500)
    kl_mos = bottleneck_fit(target, d=4, k=8, steps=1500)
    assert kl_mos < 0.5 * kl_softmax, (kl_softmax, kl_mos)
