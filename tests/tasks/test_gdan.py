"""GDAN's task (Yang's thesis §3.2.4: the objectives, Algorithm 1; and exact resume) on tiny synthetic
tensors: the balanced D objective, REINFORCE and its baseline, Algorithm 1's alternating schedule, the domain-tag
routing, what is detached, the Table 3.4 method switches, the Context pseudo-questions and span evaluation."""

from functools import partial
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from hydra.utils import instantiate
from torch.utils.data import DataLoader

from genlab.callbacks.checkpoint import make_checkpoint_callback
from genlab.callbacks.rng import RNGStateCallback
from genlab.cli.validate import validate_config
from genlab.errors import ConfigError
from genlab.models.gdan import GDAN, TAG_GEN, TAG_TRUE, DomainClassifier, GAReader, QuestionGenerator, ReaderOutput
from genlab.models.gdan.features import masked_log_softmax
from genlab.tasks.gdan import GDANTask
from genlab.tasks.gdan_objectives import (
    METHODS,
    balanced_d_loss,
    context_question,
    ganin_lambda,
    reinforce_loss,
    rl_baseline,
)

VD, VG, EOS, UNK = 30, 24, 3, 1  # D's vocabulary; G's (shared ids below VG); G's <eos>; <unk> in both


# ------------------------------------------------------------------------------------------------ fixtures
def paragraphs(b, t, seed, answer_at_zero=False):
    """U-style rows: D ids (some >= VG, i.e. unknown to G and copied through extended slots), spans, G views."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(t // 2, t + 1, (b,), generator=g)
    lengths[0] = t
    mask = torch.arange(t)[None, :] < lengths[:, None]
    p = torch.randint(4, VD, (b, t), generator=g) * mask
    start = torch.zeros(b, dtype=torch.long) if answer_at_zero else (torch.rand(b, generator=g) * (lengths - 1)).long()
    end = torch.minimum(start + torch.randint(0, 3, (b,), generator=g), lengths - 1)
    g_p_ext = p.clone()
    for r in range(b):
        slots: dict[int, int] = {}
        for i in range(int(lengths[r])):
            if int(p[r, i]) >= VG:
                g_p_ext[r, i] = VG + slots.setdefault(int(p[r, i]), len(slots))
    return {"p_ids": p, "p_mask": mask, "start": start, "end": end, "g_p_ids": p.masked_fill(p >= VG, UNK),
            "g_p_ext": g_p_ext, "index": torch.arange(b) + 100 * seed}


def labelled(b, t, seed):
    """L rows: a paragraph, a question (ids < VG, so G's target ids are the same plus <eos>) and the answer span."""
    d = paragraphs(b, t, seed)
    g = torch.Generator().manual_seed(seed + 1)
    q_len = torch.randint(2, 5, (b,), generator=g)
    q_mask = torch.arange(4)[None, :] < q_len[:, None]
    q = torch.randint(4, VG, (b, 4), generator=g) * q_mask
    g_q = torch.nn.functional.pad(q, (0, 1)).scatter(1, q_len[:, None], EOS)
    d.update(q_ids=q, q_mask=q_mask, g_q_ids=g_q, g_q_mask=torch.arange(5)[None, :] <= q_len[:, None])
    return d


def evaluation(b, t, seed):
    """Labelled rows plus the original text: token i of row r is "w<id>" in a space-joined context."""
    d = labelled(b, t, seed)
    contexts, offsets, answers = [], torch.zeros(b, t, 2, dtype=torch.long), []
    for r in range(b):
        words, pos = [], 0
        for i in range(int(d["p_mask"][r].sum())):
            w = f"w{int(d['p_ids'][r, i])}"
            offsets[r, i] = torch.tensor([pos, pos + len(w)])
            words.append(w)
            pos += len(w) + 1
        contexts.append(" ".join(words))
        s, e = int(d["start"][r]), int(d["end"][r])
        answers.append([contexts[-1][int(offsets[r, s, 0]):int(offsets[r, e, 1])]])
    d.update(qid=[f"q{seed}_{r}" for r in range(b)], context=contexts, offsets=offsets, answers=answers)
    return d


def tiny_model(method="gen_domain_adv", dropout=0.1, seed=0):
    torch.manual_seed(seed)
    reader = GAReader(VD, embed_dim=8, hidden=6, num_layers=2, dropout=dropout)
    gen = QuestionGenerator(VG, embed_dim=8, enc_hidden=6, dec_hidden=10, max_question_len=5)
    clf = DomainClassifier(12, 8) if method == "gen_gan" else None
    return GDAN(reader, gen if METHODS[method].unlabeled_source == "generator" else None, clf)


def make_task(method="gen_domain_adv", model=None, **kw):
    return GDANTask(model or tiny_model(method), optimizer=partial(torch.optim.Adam, lr=1e-2),
                    g_mle_optimizer=partial(torch.optim.Adam, lr=1e-2), g_rl_optimizer=partial(torch.optim.SGD, lr=0.1),
                    method=method, **kw)


def train_batch(n_lab=3, n_unl=7, seed=0):
    return {"lab": labelled(n_lab, 8, seed), "unl": paragraphs(n_unl, 9, seed + 10)}


def loader(items):
    # batch_size=None: items are whole batches; own generator: making an iterator never draws from the global RNG
    return DataLoader(items, batch_size=None, collate_fn=lambda x: x, generator=torch.Generator())


def fit(task, steps, batch=None, val_batch=None, callbacks=(), ckpt_path=None, root=None, val_every=None):
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", logger=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, callbacks=list(callbacks),
                         enable_checkpointing=any(isinstance(c, pl.callbacks.ModelCheckpoint) for c in callbacks),
                         default_root_dir=root, val_check_interval=val_every, check_val_every_n_epoch=None,
                         limit_val_batches=None if val_batch is not None else 0)
    trainer.fit(task, train_dataloaders=loader([batch or train_batch()] * 50),
                val_dataloaders=loader([val_batch]) if val_batch is not None else None, ckpt_path=ckpt_path)
    return trainer


def g_params(task):
    return [p.detach().clone() for p in task.model.generator.parameters()]


def d_params(task):
    return [p.detach().clone() for p in task.model.reader.parameters()]


def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


# ------------------------------------------------------------------------------------------ balanced objective
def test_d_loss_is_a_mean_per_dataset_and_ignores_batch_sizes():
    task = make_task("context_domain", model=tiny_model("context_domain", dropout=0.0))
    batch = train_batch(3, 7)
    lab, unl = batch["lab"], batch["unl"]
    reader = task.model.reader
    loss = task.d_loss(batch)["loss"]
    ce_l = -reader(lab["p_ids"], lab["p_mask"], lab["q_ids"], lab["q_mask"], torch.full((3,), TAG_TRUE)
                   ).log_likelihood(lab["start"], lab["end"])
    q, qm = context_question(unl["p_ids"], unl["p_mask"], unl["start"], unl["end"], 5)
    ce_u = -reader(unl["p_ids"], unl["p_mask"], q, qm, torch.full((7,), TAG_GEN)
                   ).log_likelihood(unl["start"], unl["end"])
    assert torch.allclose(loss, ce_l.mean() + ce_u.mean(), atol=1e-5)
    assert not torch.allclose(loss, torch.cat([ce_l, ce_u]).mean(), atol=1e-3)  # not the mean of the concatenation
    doubled = {"lab": lab, "unl": {k: torch.cat([v, v]) for k, v in unl.items()}}
    assert torch.allclose(task.d_loss(doubled)["loss"], loss, atol=1e-5)  # a duplicated U_G batch changes nothing
    assert torch.equal(balanced_d_loss(torch.tensor([1.0, 3.0]), torch.tensor([2.0])), torch.tensor(4.0))


# ------------------------------------------------------------------------------------- REINFORCE estimator
def test_equal_rewards_give_exactly_zero_gradient_with_the_batch_mean_baseline():
    task = make_task()
    task.reward = lambda unl, q, qm: torch.full((len(unl["start"]),), -2.5)
    out = task.g_loss(paragraphs(6, 8, 1))
    grads = torch.autograd.grad(out["loss"], list(task.model.generator.parameters()), allow_unused=True)
    assert all(g is None or (g == 0).all() for g in grads)
    assert any(g is not None for g in grads)


def test_reinforce_raises_the_probability_of_a_rewarded_token():
    """Stub reward +1 when the sampled question contains w*: 200 REINFORCE steps with the batch-mean baseline."""
    torch.manual_seed(0)
    g = QuestionGenerator(40, embed_dim=8, enc_hidden=8, dec_hidden=16, max_question_len=4)
    p = torch.randint(4, 20, (1, 6)).expand(32, 6)
    pm, start, end = torch.ones(32, 6, dtype=torch.bool), torch.ones(32, dtype=torch.long), torch.full((32,), 2)
    w_star = 33  # not in the paragraph: only p_vocab can produce it

    def p_contains(n=20):
        with torch.no_grad():
            return sum(float((g.sample(g.encode(p, p, pm, start, end)).tokens == w_star).any(1).float().mean())
                       for _ in range(n)) / n

    before = p_contains()
    opt = torch.optim.SGD(g.parameters(), lr=0.5)
    for _ in range(200):
        gen = g.sample(g.encode(p, p, pm, start, end))
        reward = (gen.tokens == w_star).any(1).float()
        b, _ = rl_baseline(reward, "batch_mean", None, 0.9)
        loss = reinforce_loss(reward, b, gen.sequence_log_prob())
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = p_contains()
    assert before < 0.2 and after > 0.6, (before, after)


def test_moving_average_and_none_baselines():
    r = torch.tensor([-1.0, -3.0])
    b, run = rl_baseline(r, "moving_average", None, 0.9)
    assert float(b) == -2.0 and run == -2.0
    b, run = rl_baseline(torch.tensor([0.0, 0.0]), "moving_average", run, 0.9)
    assert float(b) == -2.0 and run == pytest.approx(-1.8)  # used before it absorbs the batch
    b, run = rl_baseline(r, "none", 5.0, 0.9)
    assert float(b) == 0.0 and run == 5.0


# ----------------------------------------------------------------------------------- reward sign and scale
def test_rewards_are_log_probabilities_computed_by_a_frozen_eval_mode_d():
    task = make_task()
    reader = task.model.reader.train()
    seen = []
    forward = reader.forward

    def spy(*args, **kw):
        seen.append((reader.training, torch.is_grad_enabled()))
        return forward(*args, **kw)

    reader.forward = spy
    out = task.g_loss(paragraphs(5, 8, 2))
    assert seen == [(False, False)] and reader.training
    assert (out["reward"] <= 0).all() and not out["reward"].requires_grad and not out["baseline"].requires_grad


# ---------------------------------------------------------------------------------------------- Context baseline
def test_context_pseudo_question_window_and_truncation():
    p = torch.arange(10, 22)[None]  # 12 tokens, token i has id 10 + i
    mask = torch.ones_like(p, dtype=torch.bool)
    q, qm = context_question(p, mask, torch.tensor([3]), torch.tensor([4]), window=5)
    assert q[qm].tolist() == [10, 11, 12, 15, 16, 17, 18, 19]  # tokens 0..2 and 5..9, never the answer (3, 4)
    q, qm = context_question(p, mask, torch.tensor([0]), torch.tensor([0]), window=5)
    assert q[qm].tolist() == [11, 12, 13, 14, 15]  # answer at 0: only the W tokens after it
    q, qm = context_question(p, torch.arange(12)[None] < 9, torch.tensor([6]), torch.tensor([7]), window=5)
    assert q[qm].tolist() == [11, 12, 13, 14, 15, 18]  # truncated at the last valid token, no padding, no wrap
    q, qm = context_question(p[:, :2], mask[:, :2], torch.tensor([0]), torch.tensor([1]), window=5)
    assert q[qm].tolist() == [UNK]


def test_context_questions_are_built_from_u_only_and_tagged_per_domain():
    task = make_task("context_domain", model=tiny_model("context_domain", dropout=0.0))
    batch = train_batch(3, 4)
    calls = []
    forward = task.model.reader.forward
    task.model.reader.forward = lambda *a: calls.append(a) or forward(*a)
    task.d_loss(batch)
    _, _, q_ids, q_mask, tag = calls[0]
    lab, unl = batch["lab"], batch["unl"]
    assert torch.equal(q_ids[:3, :4][q_mask[:3, :4]], lab["q_ids"][lab["q_mask"]])  # L keeps its human questions
    cq, cm = context_question(unl["p_ids"], unl["p_mask"], unl["start"], unl["end"], 5)
    assert torch.equal(q_ids[3:][q_mask[3:]], cq[cm])
    assert tag.tolist() == [TAG_TRUE] * 3 + [TAG_GEN] * 4


# ---------------------------------------------------------------------------------------------- SQuAD metric offsets
class SpanStub(GAReader):
    """A reader whose answer is always token ``pos`` (start and end), recording the tags it is given."""

    def __init__(self, pos):
        super().__init__(VD, embed_dim=4, hidden=3, num_layers=2)
        self.pos, self.tags = pos, []

    def forward(self, p_ids, p_mask, q_ids, q_mask, tag=None):
        self.tags.append(tag)
        logits = torch.zeros(p_ids.shape)
        logits[:, self.pos] = 10.0
        lp = masked_log_softmax(logits, p_mask)
        return ReaderOutput(lp, lp, torch.zeros(*p_ids.shape, 6), p_mask)


def test_predictions_are_cut_from_the_original_text_and_evaluation_uses_d_true():
    context = "He was born in 1990 ."
    offsets = torch.tensor([[[0, 2], [3, 6], [7, 11], [12, 14], [15, 19], [20, 21]]])
    batch = {"p_ids": torch.tensor([[5, 6, 7, 8, 9, 10]]), "p_mask": torch.ones(1, 6, dtype=torch.bool),
             "q_ids": torch.tensor([[11, 12]]), "q_mask": torch.ones(1, 2, dtype=torch.bool),
             "start": torch.tensor([4]), "end": torch.tensor([4]), "qid": ["a"], "context": [context],
             "offsets": offsets, "answers": [["1990", "in 1990"]]}  # D ids of "1990" would be the "0000" word
    stub = SpanStub(4)
    task = make_task("gen_domain_adv", model=GDAN(stub, tiny_model().generator))
    task.counts["d"] = 1  # a D that has trained: the only kind that may be tested (test_model_selection_...)
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    out = trainer.test(task, dataloaders=loader([batch]), verbose=False)[0]
    assert out["test/exact"] == 1.0 and out["test/f1"] == 1.0
    assert task._eval["preds"] == {"a": "1990"}
    assert stub.tags[-1].tolist() == [TAG_TRUE]


# ------------------------------------------------------------------------------------ alternating schedule
class ScheduleSpy(GDANTask):
    """Records every optimiser step, D's mode during G's reward, and the G updates behind each U_G batch."""

    def configure_optimizers(self):
        opts = super().configure_optimizers()
        self.trace, self.modes, self.question_checks = [], [], []
        for name, opt in zip(("d", "g_mle", "g_rl"), opts):
            def step(*a, _orig=opt.step, _name=name, **k):
                self.trace.append((_name, d_params(self), g_params(self)))
                return _orig(*a, **k)
            opt.step = step
        return opts

    def reward(self, unl, q, qm):
        reader = self.model.reader
        reader.forward = lambda *a, _f=reader.forward: self.modes.append(reader.training) or _f(*a)
        try:
            return super().reward(unl, q, qm)
        finally:
            del reader.forward  # back to the class's forward

    def unlabeled_questions(self, unl):
        with torch.no_grad():  # what the *current* G decodes greedily for this batch
            g = self.model.generator
            want = self.model.questions_for_reader(
                g.sample(g.encode(unl["g_p_ids"], unl["g_p_ext"], unl["p_mask"], unl["start"], unl["end"]),
                         greedy=True), unl["g_p_ext"], unl["p_ids"])
        got = super().unlabeled_questions(unl)
        g_steps_done = sum(1 for name, _, _ in self.trace if name == "g_rl")
        self.question_checks.append((torch.equal(got[0], want[0]), self.generated_at_g_step == g_steps_done))
        return got


def test_alternating_schedule_frozen_sides_eval_mode_and_current_g():
    torch.manual_seed(0)
    task = ScheduleSpy(tiny_model(), optimizer=partial(torch.optim.Adam, lr=1e-2),
                       g_mle_optimizer=partial(torch.optim.Adam, lr=1e-2),
                       g_rl_optimizer=partial(torch.optim.SGD, lr=0.1), method="gen_domain_adv", t_d=2, t_g=1,
                       mle_steps=2, decode_for_d="greedy")
    d_init = d_params(task)
    after = []
    recorder = pl.Callback()
    recorder.on_train_batch_end = lambda *a: after.append((d_params(task), g_params(task), task.model.reader.training))
    fit(task, 11, callbacks=[recorder])
    names = [name for name, _, _ in task.trace]
    assert names == ["g_mle", "g_mle", "d", "d", "g_rl", "d", "d", "g_rl", "d", "d", "g_rl"]
    assert same(task.trace[2][1], d_init)  # the first update after MLE is a D step, from D's random init
    for i, name in enumerate(names):
        d_before, g_before = task.trace[i][1], task.trace[i][2]
        d_after, g_after, reader_training = after[i]
        assert same(g_before, g_after) if name == "d" else same(d_before, d_after), (i, name)
        assert reader_training  # back in train() after every update
    assert task.modes == [False, False, False]  # D in eval() while G's reward is computed
    assert task.question_checks == [(True, True)] * 6
    assert task.counts == {"mle": 2, "d_pre": 0, "d": 6, "g": 3}


# --------------------------------------------------------------------------------------------- tag routing
class TagStub(GAReader):
    """Start log-probs peak at position 0 only when the tag is d_true; otherwise uniform."""

    def __init__(self):
        super().__init__(VD, embed_dim=4, hidden=3, num_layers=2)
        self.calls = []

    def forward(self, p_ids, p_mask, q_ids, q_mask, tag=None):
        self.calls.append((self.tagged(p_ids, p_mask, tag), self.tagged(q_ids, q_mask, tag), tag))
        logits = torch.zeros(p_ids.shape)
        if tag is not None:
            logits[:, 0] += 5.0 * (tag == TAG_TRUE)
        lp = masked_log_softmax(logits, p_mask)
        return ReaderOutput(lp, masked_log_softmax(torch.zeros(p_ids.shape), p_mask), torch.zeros(*p_ids.shape, 6),
                            p_mask)


def test_tag_routing_d_true_for_l_and_g_reward_d_gen_for_u_g():
    unl = paragraphs(4, 8, 3, answer_at_zero=True)
    rewards = {}
    for method in ("gen_domain_adv", "gen_dual"):
        stub = TagStub()
        task = make_task(method, model=GDAN(stub, tiny_model().generator))
        rewards[method] = task.g_loss(unl)["reward"]
        assert stub.calls[-1][2] is None if method == "gen_dual" else stub.calls[-1][2].tolist() == [TAG_TRUE] * 4
    assert (rewards["gen_domain_adv"] > rewards["gen_dual"] + 1.0).all()  # a swapped tag makes these equal
    stub = TagStub()
    task = make_task("gen_domain_adv", model=GDAN(stub, tiny_model().generator))
    task.d_loss(train_batch(3, 4))
    (p_ids, p_mask), (q_ids, q_mask), _ = stub.calls[-1]
    for ids, mask in ((p_ids, p_mask), (q_ids, q_mask)):
        last = ids[torch.arange(7), mask.sum(1) - 1]
        assert last.tolist() == [stub.tag_id(TAG_TRUE)] * 3 + [stub.tag_id(TAG_GEN)] * 4


# ---------------------------------------------------------------------------------------- what is detached
def test_what_is_detached_in_both_directions():
    task = make_task()
    reader, gen = task.model.reader, task.model.generator
    loss_d = task.d_loss(train_batch())["loss"]
    assert all(g is None for g in torch.autograd.grad(loss_d, list(gen.parameters()), allow_unused=True))
    with torch.no_grad():
        gen.out_proj.bias[EOS] = 1.5  # some questions end early, leaving padded steps
    calls = []
    sample = gen.sample
    gen.sample = lambda *a, **k: calls.append(1) or sample(*a, **k)
    out = task.g_loss(paragraphs(8, 8, 4))
    assert len(calls) == 1  # one sample per instance, no second sampling pass
    assert all(g is None for g in torch.autograd.grad(out["loss"], list(reader.parameters()), allow_unused=True,
                                                      retain_graph=True))
    generated = out["generated"]
    advantage = out["reward"] - out["baseline"]
    assert torch.equal(out["loss"], -(advantage * generated.log_probs.sum(1)).mean())  # the same pass's log-probs
    params = list(gen.parameters())
    # the gradient is exactly that of the surrogate with R - b as constants: it flows only through log P_G
    surrogate = -(advantage.detach() * generated.sequence_log_prob()).mean()
    for a, b in zip(torch.autograd.grad(out["loss"], params, retain_graph=True, allow_unused=True),
                    torch.autograd.grad(surrogate, params, retain_graph=True, allow_unused=True)):
        assert (a is None and b is None) or torch.equal(a, b)
    padded = (~generated.mask).nonzero()
    assert len(padded) > 0
    for row, step in padded[:3].tolist():
        grads = torch.autograd.grad(generated.log_probs[row, step], params, retain_graph=True, allow_unused=True)
        assert all(g is None or (g == 0).all() for g in grads)


def test_one_alternating_cycle_runs_and_the_g_step_leaves_d_without_gradients():
    torch.manual_seed(0)
    task = make_task(mle_steps=1, baseline="moving_average")
    trainer = fit(task, 3)
    assert task.counts == {"mle": 1, "d_pre": 0, "d": 1, "g": 1}
    assert all(p.grad is None for p in task.model.reader.parameters())
    metrics = trainer.callback_metrics
    assert float(metrics["train/reward"]) <= 0 and torch.isfinite(metrics["train/g_loss"])
    assert task.running_baseline is not None


# ----------------------------------------------------------------------------------------- method switches
@pytest.mark.parametrize("method", ["gen", "gen_domain"])
def test_fixed_generator_rows_never_step_g_after_mle(method):
    torch.manual_seed(0)
    task = ScheduleSpy(tiny_model(method), optimizer=partial(torch.optim.Adam, lr=1e-2),
                       g_mle_optimizer=partial(torch.optim.Adam, lr=1e-2),
                       g_rl_optimizer=partial(torch.optim.SGD, lr=0.1), method=method, mle_steps=2)
    d_init = d_params(task)
    snaps = {}
    recorder = pl.Callback()
    recorder.on_train_batch_end = lambda *a: snaps.setdefault(task.counts["mle"] + task.counts["d"],
                                                              (g_params(task), d_params(task)))
    fit(task, 6, callbacks=[recorder])
    assert [n for n, _, _ in task.trace] == ["g_mle"] * 2 + ["d"] * 4
    assert same(snaps[2][0], g_params(task))  # G after training == G after MLE
    assert same(snaps[2][1], d_init)  # MLE does not touch D: D's init does not depend on L


def test_sl_never_reads_the_unlabeled_batch():
    class NoUnlabeled(dict):
        def __getitem__(self, key):
            if key == "unl":
                raise AssertionError("sl read the U batch")
            return super().__getitem__(key)

    torch.manual_seed(0)
    task = make_task("sl")
    assert task.model.generator is None
    fit(task, 3, batch=NoUnlabeled(train_batch()))
    assert task.counts["d"] == 3


def test_ganin_ramp_and_method_defaults():
    assert ganin_lambda(0.0) == 0.0
    assert ganin_lambda(0.1) == pytest.approx(0.4621, abs=1e-4)
    assert ganin_lambda(0.5) == pytest.approx(0.9866, abs=1e-4)
    assert make_task("gen_gan").weight_schedule == "ganin" and make_task("gen_dual").weight_schedule == "ganin"
    assert make_task("gen_domain_adv").weight_schedule == "constant"
    assert make_task("gen_domain_adv", weight_schedule="ganin").weight_schedule == "ganin"


def test_configuration_errors_name_the_key():
    with pytest.raises(ConfigError, match="domain_classifier"):
        make_task("gen_gan", model=tiny_model("gen_dual"))
    with pytest.raises(ConfigError, match="generator"):
        make_task("gen", model=tiny_model("sl"))
    with pytest.raises(ConfigError, match="cache_generated"):
        make_task("gen_domain_adv", cache_generated=True)
    with pytest.raises(ConfigError, match="t_d"):
        make_task(t_d=0)


def test_reward_clip_mle_mix_and_generator_init_from_a_checkpoint(tmp_path):
    task = make_task(reward_clip=20.0, mle_mix_weight=0.5)
    task.reward = lambda unl, q, qm: torch.full((len(unl["start"]),), -50.0)
    lab = labelled(3, 8, 7)
    out = task.g_loss(paragraphs(4, 8, 1), lab)
    assert (out["reward"] == -20.0).all()
    assert torch.allclose(out["loss"], 0.5 * task.mle_loss(lab)["loss"])  # equal rewards: only the MLE term is left
    path = tmp_path / "g.ckpt"
    torch.save({"state_dict": task.state_dict()}, path)
    other = make_task(model=tiny_model(seed=5), g_init_from=str(path))
    assert same(g_params(other), g_params(task)) and not same(d_params(other), d_params(task))
    with pytest.raises(ConfigError, match="mle_steps"):
        make_task(g_init_from=str(path), mle_steps=3)


# ------------------------------------------------------------------------------------------------ all rows
@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_table_3_4_row_trains_and_evaluates(method):
    torch.manual_seed(0)
    task = make_task(method, mle_steps=2, cache_generated=method in ("gen", "gen_domain"))
    trainer = fit(task, 6, val_batch=evaluation(4, 8, 5), val_every=6)
    m = trainer.callback_metrics
    assert 0.0 <= float(m["valid/f1"]) <= 1.0 and 0.0 <= float(m["valid/exact"]) <= float(m["valid/f1"])
    assert ("train/d_loss_gen" in m) == (method != "sl")
    assert ("train/reward" in m) == (METHODS[method].g_update != "none")
    assert ("valid/g_nll" in m) == (METHODS[method].unlabeled_source == "generator")
    if method == "gen_gan":
        assert "train/d_domain_bce" in m
    if "train/rl_weight" in m:  # last G update: 3 of the 4 alternating updates done (Ganin p = 3/4) or constant 1
        want = ganin_lambda(3 / 4) if METHODS[method].weight_schedule == "ganin" else 1.0
        assert float(m["train/rl_weight"]) == pytest.approx(want)


def test_mle_keeps_the_generator_with_the_best_dev_nll():
    torch.manual_seed(0)
    task = make_task("gen_domain", mle_steps=4)
    best = {}

    class Snap(pl.Callback):
        def on_validation_end(self, trainer, pl_module):
            nll = float(trainer.callback_metrics["valid/g_nll"])
            if task.counts["mle"] <= 4 and nll <= best.get("nll", float("inf")):
                best.update(nll=nll, state=g_params(task))

    fit(task, 4, val_batch=evaluation(4, 8, 6), val_every=1, callbacks=[Snap()])
    assert task.best_g_state is not None and task.best_g_nll == pytest.approx(best["nll"])
    task._close_mle()
    assert same(g_params(task), best["state"]) and task.best_g_state is None


@pytest.mark.parametrize("method", ["gen_domain", "gen_domain_adv"])
def test_dev_nll_of_a_final_generator_is_computed_once_and_logged_unchanged(method):
    """Gen / Gen + domain never update G after MLE, so its dev NLL is scored once and reused (same value logged);
    a G that REINFORCE moves is scored at every validation."""
    torch.manual_seed(0)
    task = make_task(method, mle_steps=2)
    val = evaluation(4, 8, 6)
    scored, logged = [], []
    score = task.mle_loss
    task.mle_loss = lambda lab: scored.append(task.counts["mle"]) or score(lab)

    class Log(pl.Callback):
        def on_validation_end(self, trainer, pl_module):
            if task.mle_closed:
                logged.append(float(trainer.callback_metrics["valid/g_nll"]))

    fit(task, 6, val_batch=val, val_every=1, callbacks=[Log()])
    task.eval()
    with torch.no_grad():
        direct = float(score({k: val[k] for k in ("g_p_ids", "g_p_ext", "p_mask", "start", "end", "g_q_ids",
                                                 "g_q_mask")})["nll_per_token"])
    after_mle = len(scored) - 2 * 2  # two MLE training updates, two validations during MLE
    assert len(logged) == 4 and after_mle == (1 if method == "gen_domain" else 4)
    assert logged[-1] == pytest.approx(direct, rel=1e-6)
    if method == "gen_domain":
        assert len(set(logged)) == 1


def test_model_selection_starts_once_d_has_trained(tmp_path):
    """Algorithm 1 early-stops its D/G loop: during G's MLE phase D is its random init, so no dev F1 is logged, no
    checkpoint of it is ranked, and a model whose D never trained is refused at test time."""
    torch.manual_seed(0)
    task = make_task("gen_domain", mle_steps=4)
    seen = []

    class Seen(pl.Callback):
        def on_validation_end(self, trainer, pl_module):
            m = trainer.callback_metrics
            seen.append((trainer.global_step, float(m["valid/f1"]) if "valid/f1" in m else None,
                         int(m["valid/best_step"]) if "valid/best_step" in m else None))

    ckpt = make_checkpoint_callback(str(tmp_path / "ckpt"), "valid/f1", "max")
    fit(task, 8, val_batch=evaluation(4, 8, 6), val_every=1, callbacks=[Seen(), ckpt])
    assert [s[1] is None for s in seen] == [True] * 4 + [False] * 4  # steps 1-4 are MLE updates
    f1s = [f for _, f, _ in seen[4:]]
    best_step = seen[4 + f1s.index(max(f1s))][0]
    assert seen[-1][2] == best_step == int(Path(ckpt.best_model_path).stem.removeprefix("best-step")) > 4
    with pytest.raises(ConfigError, match="untrained D"):
        pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False).test(
            make_task("gen_domain", mle_steps=4), dataloaders=loader([evaluation(4, 8, 6)]), verbose=False)


# ------------------------------------------------------------------------------------------------ resume
class Losses(pl.Callback):
    def __init__(self):
        self.seen = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.seen.append((trainer.global_step, float(trainer.callback_metrics["train/loss"])))


def run(tmp_path, name, steps, ckpt_path=None, save_at=None, method="gen_domain_adv"):
    task = make_task(method, model=tiny_model(method, seed=1), mle_steps=2, baseline="moving_average", t_d=2,
                     cache_generated=method == "gen_domain")
    log = Losses()
    callbacks = [log, RNGStateCallback()]
    if save_at:
        callbacks.append(pl.callbacks.ModelCheckpoint(dirpath=tmp_path / name, every_n_train_steps=save_at,
                                                      save_top_k=-1, filename="{step}"))
    torch.manual_seed(123)
    fit(task, steps, callbacks=callbacks, ckpt_path=ckpt_path, root=str(tmp_path / name))
    return task, log.seen


@pytest.mark.parametrize("method", ["gen_domain_adv", "gen_domain"])
def test_resume_is_bit_exact(tmp_path, method):
    """9 updates uninterrupted == 5, stop, resume to 9: same losses, weights, optimisers' effect, counters,
    RL baseline and generated-question cache (D's dropout and G's sampling draw from the restored RNG)."""
    full, full_losses = run(tmp_path, "full", 9, method=method)
    run(tmp_path, "part", 5, save_at=5, method=method)
    ckpt = tmp_path / "part" / "step=5.ckpt"
    state = torch.load(ckpt, weights_only=True)
    assert len(state["optimizer_states"]) == 3 and "gdan" in state
    resumed, resumed_losses = run(tmp_path, "resumed", 9, ckpt_path=str(ckpt), method=method)
    assert resumed_losses == full_losses[5:]
    for (name, a), (_, b) in zip(full.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), name
    assert resumed.counts == full.counts and resumed.running_baseline == full.running_baseline
    assert resumed.generated_cache.keys() == full.generated_cache.keys()
    assert all(torch.equal(resumed.generated_cache[k], v) for k, v in full.generated_cache.items())


# ------------------------------------------------------------------------------------------------ configs
@pytest.mark.parametrize("model", ["gdan", "gdan_reader", "gdan_gan"])
def test_configs_validate_and_build(compose_cfg, model):
    cfg = compose_cfg(["~experiment", "name=gdan", f"model={model}", "task=gdan"])
    validate_config(cfg)
    built = instantiate(cfg.model, reader={"vocab_size": 40, "embed_dim": 8, "hidden": 4},
                        generator={"vocab_size": 30, "embed_dim": 8, "enc_hidden": 4, "dec_hidden": 8}
                        if model != "gdan_reader" else None,
                        domain_classifier={"in_dim": 8} if model == "gdan_gan" else None)
    method = {"gdan": "gen_domain_adv", "gdan_reader": "context_domain", "gdan_gan": "gen_gan"}[model]
    task = instantiate(cfg.task, model=built, method=method, _convert_="all")
    assert isinstance(task, GDANTask) and task.monitor == "valid/f1"
    assert task.hparams.prediction_dir == f"{cfg.paths.output_dir}/predictions"  # written by default, in the run dir
    assert (built.generator is None) == (model == "gdan_reader")
