"""AWD-LSTM(-MoS) (Dai's thesis App. A.2.4, A.7; the released code zihangdai/mos): parameter counts, dropout
placement, truncated BPTT."""

import pytest
import torch
import torch.nn.functional as F

from genlab.errors import ConfigError
from genlab.models.awd_lstm import AWDLSTM


def _count(model):
    return sum(p.numel() for p in model.parameters())  # tied matrix counted once


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        (dict(vocab_size=10000, emsize=280, nhid=960, nhidlast=620, nlayers=3, head="mos", n_experts=15), 21_500_620),
        (dict(vocab_size=33278, emsize=300, nhid=1150, nhidlast=650, nlayers=3, head="mos", n_experts=15), 34_909_528),
        (dict(vocab_size=10000, emsize=400, nhid=1150, nhidlast=400, nlayers=3, head="softmax"), 24_221_600),
        (dict(vocab_size=33278, emsize=400, nhid=1150, nhidlast=400, nlayers=3, head="softmax"), 33_556_078),
        (dict(vocab_size=27, emsize=1024, nhid=1024, nhidlast=1024, nlayers=1, head="softmax"), 8_424_475),
        (dict(vocab_size=27, emsize=510, nhid=910, nhidlast=910, nlayers=1, head="mos", n_experts=7), 8_448_517),
        (dict(vocab_size=27, emsize=452, nhid=860, nhidlast=860, nlayers=1, head="mos", n_experts=10), 8_432_711),
        (dict(vocab_size=27, emsize=683, nhid=683, nhidlast=683, nlayers=1, head="mos", n_experts=10), 8_434_394),
        (dict(vocab_size=27, emsize=750, nhid=750, nhidlast=750, nlayers=1, head="mos", n_experts=7), 8_474_277),
    ],
    ids=["ptb_mos", "wt2_mos", "ptb_awd", "wt2_awd", "text8_softmax", "text8_mos7_910", "text8_mos10_860",
         "text8_mos10_683", "text8_mos7_750"],
)
def test_c15_parameter_counts(kwargs, expected):
    assert _count(AWDLSTM(**kwargs)) == expected


def test_moc_has_the_same_parameter_count_as_mos():
    kw = dict(vocab_size=50, emsize=8, nhid=16, nhidlast=12, nlayers=3, n_experts=4)
    assert _count(AWDLSTM(head="mos", **kw)) == _count(AWDLSTM(head="moc", **kw))


def test_tied_decoder_and_init():
    model = AWDLSTM(vocab_size=50, emsize=8, nhid=16, nhidlast=12, nlayers=2, n_experts=3)
    assert model.head.decoder.weight is model.encoder.weight
    assert model.encoder.weight.abs().max() <= 0.1 and torch.all(model.head.decoder.bias == 0)
    assert model.head.prior.bias is None and model.head.latent.bias is not None
    untied = AWDLSTM(vocab_size=50, emsize=8, nhid=16, nhidlast=12, nlayers=2, n_experts=3, tie_weights=False)
    assert untied.head.decoder.weight is not untied.encoder.weight


def test_softmax_head_requires_nhidlast_equal_emsize():
    with pytest.raises(ConfigError, match="model.nhidlast"):
        AWDLSTM(vocab_size=50, emsize=8, nhid=16, nhidlast=12, head="softmax")


def _tiny(**kw):
    torch.manual_seed(0)
    base = dict(vocab_size=40, emsize=8, nhid=16, nhidlast=12, nlayers=3, n_experts=4, mos_log_eps=0.0)
    base.update(kw)
    return AWDLSTM(**base).double()


def _manual_forward(model, ids, masks):
    """The released code's dropout placement written out with explicit masks (dropout_e rows, i, h, o, l)."""
    emb = F.embedding(ids, model.encoder.weight * masks["e"])
    x = emb * masks["i"]
    for i, rnn in enumerate(model.rnns):
        lstm = torch.nn.LSTM(rnn.input_size, rnn.hidden_size, batch_first=True).double()
        lstm.load_state_dict(rnn.state_dict())
        x, _ = lstm(x)
        if i < model.nlayers - 1:
            x = x * masks["h"][i]
    g = x * masks["o"]
    head = model.head
    log_pi = F.log_softmax(head.prior(g), -1)
    h = (torch.tanh(head.latent(g)) * masks["l"]).unflatten(-1, (head.n_experts, head.emsize))
    comp = F.log_softmax(head.decoder(h), -1)
    return torch.logsumexp(log_pi[..., None] + comp, dim=-2), x, g


def test_dropout_placement_matches_spec_with_keyed_masks(monkeypatch):
    """Every dropout except weight drop on; masks recorded from the model's own calls and replayed by hand."""
    model = _tiny(wdrop=0.0, dropout=0.3, dropouth=0.2, dropouti=0.4, dropoute=0.1, dropoutl=0.25)
    ids = torch.randint(40, (3, 7))
    torch.manual_seed(5)
    log_p, memory = model.log_prob(ids)
    torch.manual_seed(5)
    # replay the RNG stream in call order: embedding rows, dropouti, dropouth x2, dropout, dropoutl
    w = model.encoder.weight
    masks = {"e": w.new_empty(40, 1).bernoulli_(0.9) / 0.9}
    masks["i"] = w.new_empty(3, 1, 8).bernoulli_(0.6) / 0.6
    masks["h"] = [w.new_empty(3, 1, 16).bernoulli_(0.8) / 0.8 for _ in range(2)]
    masks["o"] = w.new_empty(3, 1, 12).bernoulli_(0.7) / 0.7
    masks["l"] = w.new_empty(3, 1, 32).bernoulli_(0.75) / 0.75
    expected, raw, g = _manual_forward(model, ids, masks)
    assert torch.allclose(log_p, expected, atol=1e-10)
    torch.manual_seed(5)
    res = model.run(ids)
    assert torch.allclose(res.raw_output, raw, atol=1e-10) and torch.allclose(res.output, g, atol=1e-10)


def test_forward_protocol_and_eval_determinism():
    model = _tiny()
    ids, tgt = torch.randint(40, (2, 6)), torch.randint(40, (2, 6))
    out = model(ids, target=tgt)
    assert out.nll.shape == (2, 6) and out.nll.dtype == torch.float32
    assert len(out.memory) == 3 and out.memory[2][0].shape == (2, 12)
    assert all(not t.requires_grad for hc in out.memory for t in hc)
    model.eval()
    a, b = model(ids, tgt), model(ids, tgt)
    assert torch.equal(a.nll, b.nll)
    assert model(ids).nll is None


def test_c10_truncated_bptt_state_carried_but_gradient_cut():
    model = _tiny(dropout=0, dropouth=0, dropouti=0, dropoute=0, dropoutl=0, wdrop=0)
    ids1, ids1b, ids2 = torch.randint(40, (2, 5)), torch.randint(40, (2, 5)), torch.randint(40, (2, 5))
    tgt = torch.randint(40, (2, 5))
    first = model.run(ids1, tgt)
    first.embedded.retain_grad()
    second = model.run(ids2, tgt, first.memory)
    other = model.run(ids2, tgt, model.run(ids1b, tgt).memory)
    assert (second.raw_output - other.raw_output).abs().max() > 1e-4  # batch 2 depends on batch 1's inputs
    second.nll.sum().backward()
    assert first.embedded.grad is None or torch.all(first.embedded.grad == 0)
