"""Locked dropout, embedding dropout and weight drop semantics (AWD-LSTM, Merity et al., 2018, as MoS uses them)."""

import torch

from genlab.nn.locked_dropout import LockedDropout, embedding_dropout
from genlab.nn.weight_drop import WeightDropLSTM


def test_c6_locked_dropout_same_mask_across_time_and_identity_in_eval():
    torch.manual_seed(0)
    drop = LockedDropout(0.5)
    x = torch.rand(4, 7, 16) + 0.5  # nonzero everywhere
    out = drop(x)
    ratio = out / x
    assert torch.allclose(ratio, ratio[:, :1].expand_as(ratio))  # constant over t for each (b, f)
    assert set(ratio.unique().tolist()) <= {0.0, 2.0}
    assert not torch.equal(drop(x), out)  # resampled at the next call
    big = torch.ones(2000, 3, 50)
    assert abs(drop(big).mean().item() - 1.0) < 0.02  # E[out] = x
    drop.eval()
    assert torch.equal(drop(x), x)


def test_c7_embedding_dropout_drops_word_types():
    torch.manual_seed(0)
    weight = torch.rand(20, 8) + 0.5
    ids = torch.tensor([[3, 5, 3, 7, 5, 3], [7, 3, 1, 1, 5, 3]])
    p = 0.5
    for _ in range(5):
        emb = embedding_dropout(weight, ids, p, training=True)
        for word in ids.unique():
            vecs = emb[ids == word]
            ratio = vecs / weight[word]
            assert torch.allclose(ratio, ratio[0, 0].expand_as(ratio))  # all occurrences share the fate
            assert ratio[0, 0].item() in (0.0, 1 / (1 - p))
    assert torch.equal(embedding_dropout(weight, ids, p, training=False), weight[ids])


def test_c8_weight_drop_resampled_per_call_and_deterministic_in_eval():
    torch.manual_seed(0)
    lstm = WeightDropLSTM(6, 10, weight_dropout=0.5)
    x = torch.randn(3, 9, 6)
    state = (torch.randn(3, 10), torch.randn(3, 10))
    a, _ = lstm(x, state)
    b, _ = lstm(x, state)
    assert not torch.allclose(a, b)
    lstm.eval()
    c, _ = lstm(x, state)
    d, _ = lstm(x, state)
    assert torch.equal(c, d)
    ref = torch.nn.LSTM(6, 10, batch_first=True)
    ref.load_state_dict(lstm.state_dict())
    e, (h, cc) = ref(x, (state[0][None], state[1][None]))
    assert torch.allclose(c, e, atol=1e-6)  # eval = plain nn.LSTM with the raw weights


def test_c8_first_step_unaffected_by_weight_drop_with_zero_state():
    torch.manual_seed(0)
    lstm = WeightDropLSTM(4, 5, weight_dropout=0.9)
    x = torch.randn(2, 3, 4)
    train_out, _ = lstm(x)
    lstm.eval()
    eval_out, _ = lstm(x)
    assert torch.allclose(train_out[:, 0], eval_out[:, 0])
    assert not torch.allclose(train_out[:, 1:], eval_out[:, 1:])


def test_c8_raw_weight_gradient_only_through_kept_entries():
    torch.manual_seed(0)
    lstm = WeightDropLSTM(4, 5, weight_dropout=0.5)
    x = torch.randn(2, 6, 4)
    torch.manual_seed(1)
    out, _ = lstm(x)
    out.sum().backward()
    torch.manual_seed(1)
    dropped = lstm.recurrent_weight()  # the same DropConnect sample as in the forward above
    grad = lstm.weight_hh_l0.grad
    assert torch.all(grad[dropped == 0] == 0)
    assert (grad[dropped != 0] != 0).float().mean() > 0.9


def test_c8_survives_train_eval_train_cycles():
    # The original WeightDrop hack fails at the first training call after an eval pass (torch 2.x).
    lstm = WeightDropLSTM(4, 5, weight_dropout=0.5)
    x = torch.randn(2, 3, 4)
    for mode in (True, False, True, False, True):
        lstm.train(mode)
        out, _ = lstm(x)
        out.sum().backward()
    assert {n for n, _ in lstm.named_parameters()} == {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"}
