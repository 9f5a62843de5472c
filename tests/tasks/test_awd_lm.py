"""AWD-LSTM / MoS training (Dai's thesis App. A.3, A.7 and the released code zihangdai/mos): AR/TAR, variable BPTT and
lr rescale, NT-ASGD, gradient accumulation, dynamic evaluation, fine-tuning, exact resume across the SGD -> ASGD
switch, bad input."""

from functools import partial

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from torch import nn

from genlab.data.lm.bptt import BPTTDataModule, epoch_windows, sample_seq_len
from genlab.errors import CheckpointError, ConfigError, UserError
from genlab.models.awd_lstm import AWDLSTM
from genlab.models.lm_output import LMOutput
from genlab.tasks.awd_lm import AWDLanguageModelTask, ar_tar
from genlab.tasks.dynamic_eval import (
    apply_update,
    decay_rates,
    dynamic_evaluate,
    gradient_statistics,
)
from genlab.tasks.nt_asgd import NTASGD

SYN = dict(vocab_size=40, n_topics=4, block=20, train_tokens=3000, valid_tokens=600, test_tokens=400)
NO_DROP = dict(dropout=0.0, dropouth=0.0, dropouti=0.0, dropoute=0.0, dropoutl=0.0, wdrop=0.0)


def _model(**kw):
    base = dict(vocab_size=40, emsize=8, nhid=16, nhidlast=12, nlayers=2, head="mos", n_experts=3)
    base.update(kw)
    return AWDLSTM(**base)


def _task(model, **kw):
    opt = partial(torch.optim.SGD, lr=kw.pop("lr", 5.0), weight_decay=1.2e-6)
    return AWDLanguageModelTask(model, optimizer=opt, **kw)


def _data(**kw):
    base = dict(dataset="synthetic_topics", batch_size=6, eval_batch_size=4, test_batch_size=1, bptt=20,
                eval_bptt=20, max_seq_len_delta=10, seed=3, options=SYN)
    base.update(kw)
    return BPTTDataModule(**base)


def _trainer(tmp_path, **kw):
    base = dict(max_epochs=1, logger=False, enable_checkpointing=False, accelerator="cpu", devices=1,
                enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                default_root_dir=tmp_path)
    base.update(kw)
    return pl.Trainer(**base)


# -- AR and TAR ----------------------------------------------------------------------------------------------
def test_c9_ar_tar_values():
    raw = torch.tensor([[[1.0, 2.0], [3.0, 0.0], [3.0, 4.0]]])  # [B=1, T=3, F=2]
    dropped = torch.tensor([[[2.0, 0.0], [6.0, 0.0], [0.0, 8.0]]])
    ar = 2.0 * (4 + 36 + 64) / 6
    tar = 1.0 * ((2 ** 2 + 2 ** 2) + (0 + 4 ** 2)) / 4
    assert torch.isclose(ar_tar(dropped, raw, 2.0, 1.0), torch.tensor(ar + tar))
    assert torch.isclose(ar_tar(dropped, raw, 2.0, 0.0), torch.tensor(ar))


# -- variable-length BPTT ------------------------------------------------------------------------------------
def test_c11_variable_length_sampler_statistics():
    rng = np.random.default_rng(0)
    draws = np.array([sample_seq_len(rng, 70, 40) for _ in range(100_000)])
    assert draws.min() >= 5 and draws.max() <= 110
    short = draws < 52  # N(35, 5) vs N(70, 5) separate cleanly
    assert abs(short.mean() - 0.05) < 0.005
    assert abs(draws[~short].mean() - 69.5) < 0.1  # int() truncates toward zero
    assert abs(draws[short].mean() - 34.5) < 0.3
    assert abs(draws.mean() - 67.8) < 0.1  # the released sampler's mean, simulated


def test_c11_windows_cover_the_stream_and_last_window_keeps_sampled_factor():
    windows = epoch_windows(500, 70, 40, seed=1, epoch=0)
    starts = [w[0] for w in windows]
    assert starts[0] == 0 and all(b - a == w[2] for a, b, w in zip(starts, starts[1:], windows))
    last = windows[-1]
    assert last[0] + last[1] == 499 and last[1] <= last[2]
    assert epoch_windows(500, 70, 40, 1, 0) == windows != epoch_windows(500, 70, 40, 1, 1)


def test_c11_per_step_lr_rescaled_then_restored(tmp_path):
    torch.manual_seed(0)
    task, dm = _task(_model(), lr=2.0), _data()
    _trainer(tmp_path, limit_val_batches=0).fit(task, dm)
    rows = dm.rows("train", 6).shape[1]
    expected = [2.0 * w[2] / 20 for w in epoch_windows(rows, 20, 10, seed=3, epoch=0)]
    assert list(task.lr_trace) == pytest.approx(expected)
    assert task.optimizers().param_groups[0]["lr"] == 2.0


# -- NT-ASGD -------------------------------------------------------------------------------------------------
def test_c12_nt_asgd_triggers_on_expected_epoch():
    curve = [10, 9, 8, 7, 6, 5, 5.5, 5.4, 5.3, 5.2, 5.1, 5.05]
    asgd = NTASGD(nonmono=5)
    fired = [epoch for epoch, v in enumerate(curve, 1) if asgd.observe(v, epoch)]
    assert fired == [12] and asgd.switch_epoch == 12 and asgd.active
    assert not asgd.observe(100.0, 13)  # no second switch, nothing appended after it
    assert len(asgd.history) == 12
    flat = NTASGD(nonmono=5)
    assert not any(flat.observe(3.0, e) for e in range(1, 30))


def test_c12_average_is_mean_of_post_switch_iterates_and_raw_weights_come_back():
    p = nn.Parameter(torch.zeros(3))
    asgd = NTASGD(nonmono=1)
    asgd.update([p])
    assert asgd.average is None  # nothing averaged before the switch
    asgd.start(epoch=1)
    iterates = [torch.randn(3) for _ in range(5)]
    for it in iterates:
        p.data.copy_(it)
        asgd.update([p])
    mean = torch.stack(iterates).mean(0)
    assert torch.allclose(asgd.average[0], mean, atol=1e-6)
    with asgd.averaged([p]) as used:
        assert used and torch.allclose(p, mean, atol=1e-6)
    assert torch.equal(p.data, iterates[-1])


def test_c12_task_switches_and_evaluates_the_average(tmp_path, monkeypatch):
    scripted = iter([5.0, 4.0, 6.0])  # nonmono=1: epoch 3 (6 > min([5])) switches

    def observe(self, value, epoch, _orig=NTASGD.observe):
        return _orig(self, next(scripted), epoch)

    monkeypatch.setattr(NTASGD, "observe", observe)
    torch.manual_seed(0)
    task = _task(_model(), nonmono=1)
    _trainer(tmp_path, max_epochs=4).fit(task, _data())
    assert task.nt_asgd.switch_epoch == 3 and task.nt_asgd.n_averaged > 0
    raw = [p.detach().clone() for p in task.model.parameters()]
    with task.nt_asgd.averaged(list(task.model.parameters())):
        averaged = [p.detach().clone() for p in task.model.parameters()]
    assert not all(torch.equal(a, r) for a, r in zip(averaged, raw))
    assert all(torch.equal(a, r) for a, r in zip(raw, task.model.parameters()))


# -- gradient accumulation -----------------------------------------------------------------------------------
def test_c13_gradient_accumulation_equals_full_batch():
    torch.manual_seed(0)
    model = _model(**NO_DROP).double()
    inputs, target = torch.randint(40, (6, 9)), torch.randint(40, (6, 9))
    grads = []
    for small in (6, 2):
        task = _task(model, small_batch_size=small)
        task._train_memory = [None] * (6 // small)
        for _step in range(2):  # the second step carries the per-chunk states
            model.zero_grad()
            task.chunked_backward(inputs, target, lambda loss: loss.backward())
        grads.append([p.grad.clone() for p in model.parameters()])
    for full, acc in zip(*grads):
        assert torch.allclose(full, acc, atol=1e-6)


def test_small_batch_size_must_divide_batch():
    task = _task(_model(), small_batch_size=4)
    with pytest.raises(ConfigError, match="small_batch_size"):
        task._chunks(6)


# -- resume across the switch --------------------------------------------------------------------------------
def test_resume_across_sgd_to_asgd_switch_is_exact(tmp_path, monkeypatch):
    """Dropout off: the RNG state of a real run is restored by the lead's RNG callback, not by the task."""

    def observe(self, value, epoch, _orig=NTASGD.observe):  # nonmono=1: switch after epoch 3 (6 > min([5]))
        return _orig(self, {1: 5.0, 2: 4.0, 3: 6.0}.get(epoch, 7.0), epoch)

    monkeypatch.setattr(NTASGD, "observe", observe)

    def run(max_epochs, ckpt=None):
        torch.manual_seed(0)
        task = _task(_model(**NO_DROP), nonmono=1)
        trainer = _trainer(tmp_path, max_epochs=max_epochs, limit_val_batches=2)
        trainer.fit(task, _data(), ckpt_path=ckpt)
        return task, trainer

    straight, _ = run(5)
    first, trainer = run(3)
    assert first.nt_asgd.switch_epoch == 3 and first.nt_asgd.average is None
    path = tmp_path / "switch.ckpt"
    trainer.save_checkpoint(path)
    resumed, _ = run(5, ckpt=str(path))
    assert resumed.nt_asgd.switch_epoch == 3
    for a, b in zip(straight.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)
    assert straight.nt_asgd.n_averaged == resumed.nt_asgd.n_averaged > 0
    for a, b in zip(straight.nt_asgd.average, resumed.nt_asgd.average):
        assert torch.equal(a, b)


# -- fine-tuning and bad input -------------------------------------------------------------------------------
def test_finetune_continues_from_the_averaged_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setattr(NTASGD, "observe", lambda self, v, e: (self.start(e), True)[1] if e == 1 else False)
    torch.manual_seed(0)
    task = _task(_model(), nonmono=1)
    trainer = _trainer(tmp_path, max_epochs=2)
    trainer.fit(task, _data())
    path = tmp_path / "best.ckpt"
    trainer.save_checkpoint(path)
    monkeypatch.undo()
    with task.nt_asgd.averaged(list(task.model.parameters())):
        averaged = {k: v.clone() for k, v in task.model.state_dict().items()}
    ft = _task(_model(), stage="finetune", init_checkpoint=str(path), nonmono=1)
    trainer = _trainer(tmp_path, max_epochs=1, limit_train_batches=0, limit_val_batches=0)
    trainer.fit(ft, _data())
    for k, v in ft.model.state_dict().items():
        assert torch.equal(v, averaged[k]), k
    assert ft.nt_asgd.active and ft.nt_asgd.n_averaged == 0  # a fresh average, not the old one
    assert ft.model.head.decoder.weight is ft.model.encoder.weight


def test_finetune_stops_on_the_non_monotone_rule(tmp_path):
    task = _task(_model(), stage="finetune", init_checkpoint="unused", nonmono=1)
    task.finetune_history = [3.0, 2.0]
    from genlab.tasks.nt_asgd import nonmonotone_trigger

    assert nonmonotone_trigger(task.finetune_history, 3.5, 1) and not nonmonotone_trigger([3.0], 3.5, 1)


def test_bad_input_finetune_without_checkpoint(tmp_path):
    with pytest.raises(ConfigError, match="task.init_checkpoint"):
        _task(_model(), stage="finetune")
    task = _task(_model(), stage="finetune", init_checkpoint=str(tmp_path / "missing.ckpt"))
    with pytest.raises(CheckpointError, match="missing.ckpt"):
        _trainer(tmp_path).fit(task, _data())


def test_bad_input_vocabulary_mismatch_between_checkpoint_and_data(tmp_path):
    task = _task(_model())
    trainer = _trainer(tmp_path, limit_train_batches=2, limit_val_batches=1)
    trainer.fit(task, _data())
    path = tmp_path / "a.ckpt"
    trainer.save_checkpoint(path)
    other = dict(SYN, vocab_size=50)
    ft = _task(_model(vocab_size=50), stage="finetune", init_checkpoint=str(path))
    with pytest.raises(CheckpointError, match="different vocabulary"):
        _trainer(tmp_path).fit(ft, _data(options=other))


# -- dynamic evaluation --------------------------------------------------------------------------------------
def _static_nll(model, tokens, bptt):
    model.eval()
    total, count, memory = 0.0, 0, None
    with torch.no_grad():
        for s in range(0, len(tokens) - 1, bptt):
            e = min(s + bptt, len(tokens) - 1)
            out = model(tokens[s:e][None], target=tokens[s + 1 : e + 1][None], memory=memory)
            memory, total, count = out.memory, total + out.nll.double().sum().item(), count + e - s
    return total / count


def test_c14_zero_rates_reduce_to_static_evaluation_and_runs_are_identical():
    torch.manual_seed(0)
    model = _model(wdrop=0.5, dropout=0.3, dropoute=0.1)  # every dropout must be off during dynamic eval
    train, test = torch.randint(40, (600,)), torch.randint(40, (203,))
    stats = gradient_statistics(model, train, batch_size=10, bptt=5)
    nll, losses = dynamic_evaluate(model, test, stats, lr=0.0, lamb=0.0, epsilon=0.001, bptt=5)
    assert nll == pytest.approx(_static_nll(model, test, 5), abs=1e-6)
    before = [p.clone() for p in model.parameters()]
    a = dynamic_evaluate(model, test, stats, lr=0.002, lamb=0.075, epsilon=0.001)
    b = dynamic_evaluate(model, test, stats, lr=0.002, lamb=0.075, epsilon=0.001)
    assert a == b and a[0] != nll  # bit-identical and the adaptation does something
    assert all(torch.equal(x, y) for x, y in zip(before, model.parameters()))  # reset to theta0
    assert losses[0] == pytest.approx(a[1][0])  # the first chunk's loss is recorded before any update


def test_c14_decrate_clipped_to_inverse_lambda():
    stats = {"a": torch.tensor([1.0, 100.0]), "b": torch.tensor([0.5])}
    rates = decay_rates(stats, lamb=0.5)
    gsum = 50.5 + 0.5
    assert torch.allclose(rates["a"], torch.tensor([1 / gsum, 100 / gsum]).clamp(max=2.0))
    assert rates["a"].max() <= 2.0
    assert torch.allclose(decay_rates(stats, lamb=0.0)["a"], torch.tensor([1 / gsum, 100 / gsum]))


class _OneParamLM(nn.Module):
    """nll_t = (w - x_t)^2 / 2 with a trivial recurrent state, to check one dynamic-eval update by hand."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(0.5, dtype=torch.float64))

    def forward(self, input_ids, target=None, memory=None):
        nll = 0.5 * (self.w - target.double()) ** 2
        return LMOutput(nll=nll, memory=torch.zeros(1) if memory is None else memory + 1)


def test_c14_one_update_matches_the_formula():
    model = _OneParamLM()
    tokens = torch.tensor([0, 1, 2, 3, 4, 5, 1, 1, 1, 1, 1])  # chunk 1 targets 1..5, chunk 2 targets 1,1,1,1,1
    stats = {"w": torch.tensor(0.7, dtype=torch.float64)}
    lr, lamb, eps = 0.1, 0.5, 0.01
    _, losses = dynamic_evaluate(model, tokens, stats, lr=lr, lamb=lamb, epsilon=eps, bptt=5)
    w0 = 0.5
    grad = np.mean([w0 - t for t in (1, 2, 3, 4, 5)])
    decrate = min(1.0, 1 / lamb)  # MS / gsum = 1 for a single tensor
    w1 = w0 + lamb * decrate * (w0 - w0) - lr * grad / (0.7 + eps)
    assert losses[0] == pytest.approx(np.mean([0.5 * (w0 - t) ** 2 for t in (1, 2, 3, 4, 5)]))
    assert losses[1] == pytest.approx(0.5 * (w1 - 1) ** 2)
    assert model.w.item() == w0


def test_c14_pull_back_term():
    p = nn.Parameter(torch.tensor([2.0]))
    theta0 = {"p": torch.tensor([1.0])}
    apply_update([("p", p)], theta0, {"p": torch.tensor([0.4])}, {"p": torch.tensor([1.0])}, 0.1, 0.5, 0.0)
    assert p.item() == pytest.approx(2.0 + 0.5 * 0.4 * (1.0 - 2.0))  # no gradient: pull-back only


def test_bad_input_dynamic_eval_needs_recurrent_state():
    class Stateless(_OneParamLM):
        def forward(self, input_ids, target=None, memory=None):
            return LMOutput(nll=0.5 * (self.w - target.double()) ** 2, memory=None)

    with pytest.raises(UserError, match="recurrent"):
        gradient_statistics(Stateless(), torch.arange(20) % 3, batch_size=2, bptt=5)


def test_c16_evaluation_protocol_batches():
    dm = _data(eval_batch_size=10, test_batch_size=1, eval_bptt=20)
    dm.setup("fit")
    val, test = next(iter(dm.val_dataloader())), list(dm.test_dataloader())
    assert val["input_ids"].shape == (10, 20)
    assert test[0]["input_ids"].shape == (1, 20)
    assert sum(b["target"].numel() for b in test) == len(dm.corpus.splits["test"]) - 1  # every token predicted once
    assert torch.equal(test[0]["target"][0, :-1], test[0]["input_ids"][0, 1:])
