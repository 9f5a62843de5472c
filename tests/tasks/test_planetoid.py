"""Planetoid objective and training behaviour (Yang's thesis §3.3.3: the context loss of Eq. 3.12, the
transductive and inductive losses built on Eq. 3.13-3.14, Algorithm 3; §3.3.4 for Planetoid-G)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from genlab.data.graphs.planetoid import PlanetoidDataModule
from genlab.errors import ConfigError
from genlab.models.graph_baselines import logistic_regression, predict
from genlab.models.planetoid import PlanetoidI, PlanetoidT
from genlab.tasks.planetoid import (
    PlanetoidTask,
    full_softmax_loss,
    negative_sampling_loss,
)


def _sgd(lr):
    return functools.partial(torch.optim.SGD, lr=lr)


def _fit(dm, model, lr_sup=0.1, lr_ctx=0.01, patience=1000, val_every=1, **task_kw):
    task = PlanetoidTask(model, _sgd(lr_sup), _sgd(lr_ctx), patience=patience, **task_kw)
    trainer = pl.Trainer(
        max_epochs=1, val_check_interval=val_every, check_val_every_n_epoch=None, logger=False, enable_checkpointing=False,
        accelerator="cpu", num_sanity_val_steps=0, enable_progress_bar=False, enable_model_summary=False,
    )
    trainer.fit(task, datamodule=dm)
    return task, trainer


def _dm(name, tmp_path, **kw):
    dm = PlanetoidDataModule(name=name, source="mini", cache_dir=str(tmp_path), **kw)
    dm.prepare_data()
    dm.setup("fit")
    return dm


# ---------------------------------------------------------------------------------------------- losses
def test_negative_sampling_loss_is_bce_and_pushes_scores_the_right_way():
    s = torch.randn(50, dtype=torch.float64, requires_grad=True)
    gamma = torch.where(torch.rand(50) < 0.5, 1.0, -1.0).double()
    loss = negative_sampling_loss(s, gamma, "sum")
    torch.testing.assert_close(loss, F.binary_cross_entropy_with_logits(s, (gamma + 1) / 2, reduction="sum"))
    loss.backward()
    assert torch.all(s.grad[gamma > 0] < 0) and torch.all(s.grad[gamma < 0] > 0)


def test_full_softmax_loss_is_cross_entropy_over_nodes():
    torch.manual_seed(0)
    e, w, b = torch.randn(8, 5).double(), torch.randn(20, 5).double(), torch.randn(20).double()
    c = torch.randint(0, 20, (8,))
    logits = e @ w.T + b
    manual = -(logits.gather(1, c[:, None]).squeeze(1) - torch.logsumexp(logits, 1)).sum()
    torch.testing.assert_close(full_softmax_loss(logits, c, "sum"), manual)
    torch.testing.assert_close(full_softmax_loss(logits, c, "mean"), F.cross_entropy(logits, c))
    m = PlanetoidT(num_nodes=20, n_features=3, n_classes=2, embedding_size=5).double()
    task = PlanetoidTask(m, _sgd(0.1), _sgd(0.1))
    i = torch.arange(8)
    expect = F.cross_entropy(m.embedding(i) @ m.context.out.weight.T + m.context.out.bias, c, reduction="sum")
    torch.testing.assert_close(task.context_loss(torch.zeros(20, 3).double(), i, c, torch.ones(8).double()), expect)


def test_layer_loss_adds_exactly_two_ce_terms():
    torch.manual_seed(0)
    m = PlanetoidT(num_nodes=10, n_features=4, n_classes=3, embedding_size=5).double()
    x, y, nodes = torch.rand(10, 4).double(), torch.randint(0, 3, (10,)), torch.arange(6)
    out = m(nodes, x[nodes])
    base = F.cross_entropy(out.logits, y[nodes])
    with_aux = PlanetoidTask(m, _sgd(0.1), _sgd(0.1), layer_loss=True).supervised_loss(x, y, nodes)
    without = PlanetoidTask(m, _sgd(0.1), _sgd(0.1), layer_loss=False).supervised_loss(x, y, nodes)
    torch.testing.assert_close(without, base)
    aux = sum(F.cross_entropy(z, y[nodes]) for z in out.branch_logits)
    torch.testing.assert_close(with_aux, base + aux)


# ---------------------------------------------------------------------- which step updates what
def _step(task, opt_idx, loss):
    opt = task.configure_optimizers()[opt_idx]
    opt.zero_grad()
    loss.backward()
    opt.step()


@pytest.mark.parametrize("update_emb", [True, False])
def test_transductive_steps_update_the_right_parameters(update_emb):
    torch.manual_seed(0)
    m = PlanetoidT(num_nodes=10, n_features=4, n_classes=3, embedding_size=5, update_emb=update_emb)
    task = PlanetoidTask(m, _sgd(0.5), _sgd(0.5))
    x, y, nodes = torch.rand(10, 4), torch.randint(0, 3, (10,)), torch.tensor([1, 4])
    before = {k: v.clone() for k, v in m.state_dict().items()}
    _step(task, 0, task.supervised_loss(x, y, nodes))
    emb_changed = (m.embedding.weight != before["embedding.weight"]).any(1)
    assert emb_changed.tolist() == [update_emb and k in (1, 4) for k in range(10)]
    assert torch.equal(m.context.out.weight, before["context.out.weight"])
    assert torch.equal(m.context.out.bias, before["context.out.bias"])
    before = {k: v.clone() for k, v in m.state_dict().items()}
    _step(task, 1, task.context_loss(x, torch.tensor([0, 2]), torch.tensor([3, 5]), torch.ones(2)))
    for k in ("branch_x.layer.weight", "branch_e.layer.weight", "out.weight", "out.bias"):
        assert torch.equal(m.state_dict()[k], before[k]), k
    assert not torch.equal(m.embedding.weight, before["embedding.weight"])


def test_inductive_steps_update_the_right_parameters():
    torch.manual_seed(0)
    m = PlanetoidI(num_nodes=10, n_features=4, n_classes=3, embedding_size=5, context_mode="sigmoid")
    task = PlanetoidTask(m, _sgd(0.5), _sgd(0.5))
    x, y = torch.rand(10, 4), torch.randint(0, 3, (10,))
    before = {k: v.clone() for k, v in m.state_dict().items()}
    _step(task, 1, task.context_loss(x, torch.tensor([0, 2]), torch.tensor([3, 5]), torch.tensor([1.0, -1.0])))
    changed = {k for k, v in m.state_dict().items() if not torch.equal(v, before[k])}
    assert changed == {"embed.weight", "context_bias", "context.vectors.weight"}
    before = {k: v.clone() for k, v in m.state_dict().items()}
    _step(task, 0, task.supervised_loss(x, y, torch.arange(5)))
    changed = {k for k, v in m.state_dict().items() if not torch.equal(v, before[k])}
    assert "context.vectors.weight" not in changed and "context_bias" not in changed
    assert {"embed.weight", "embed.bias", "out.weight"} <= changed


def test_softmax_head_refuses_negative_pairs_and_scheduler_is_rejected():
    m = PlanetoidT(num_nodes=5, n_features=2, n_classes=2, embedding_size=3)
    task = PlanetoidTask(m, _sgd(0.1), _sgd(0.1))
    with pytest.raises(ConfigError, match="neg_mode"):
        task.context_loss(torch.zeros(5, 2), torch.tensor([0]), torch.tensor([1]), torch.tensor([-1.0]))
    with pytest.raises(ConfigError, match="scheduler"):
        PlanetoidTask(m, _sgd(0.1), _sgd(0.1), scheduler=_sgd(0.1))


# ---------------------------------------------------------------------------------------- behaviour
def test_karate_planetoid_g_two_labels(tmp_path):
    accs = []
    for seed in (1, 2, 3):
        pl.seed_everything(seed, verbose=False)
        dm = _dm("karate", tmp_path, g_batch_size=34, g_sample_size=20, warmup_label_iters=50, warmup_graph_iters=50,
                 iter_graph=1, iter_inst=1, iter_label=1, steps=100, seed=seed)
        model = PlanetoidT(**dm.model_overrides(), use_feature=False, embedding_size=16)
        _fit(dm, model, lr_ctx=0.001, val_every=10)
        nodes = torch.arange(2, 34)  # every node but the two labelled ones (0 and 33 of the club)
        accs.append((model(nodes, dm.x[nodes]).logits.argmax(-1) == dm.y[nodes]).float().mean().item())
    assert np.mean(accs) >= 0.8, accs


def _feat_accuracy(dm) -> float:
    g = dm.graph
    fits = [logistic_regression(g.features[: g.n_labeled], g.labels[: g.n_labeled], g.n_classes, l2=l2)
            for l2 in (1e-3, 1e-2, 1e-1)]
    best = max(fits, key=lambda lin: (predict(lin, g.features[dm.val_idx]) == g.labels[dm.val_idx]).mean())
    return float((predict(best, g.features[g.test_idx]) == g.labels[g.test_idx]).mean())


SYNTH_T = dict(g_batch_size=100, g_sample_size=50, warmup_label_iters=200, warmup_graph_iters=60, iter_graph=1,
               iter_inst=1, iter_label=0, steps=150)


def test_synthetic_sbm_planetoid_t_beats_feat(tmp_path):
    gains = []
    for seed in (1, 2, 3):
        pl.seed_everything(seed, verbose=False)
        dm = _dm("synth", tmp_path, seed=seed, **SYNTH_T)
        feat = _feat_accuracy(dm)
        model = PlanetoidT(**dm.model_overrides())
        task, trainer = _fit(dm, model, lr_ctx=0.01, val_every=5)
        t_acc = trainer.test(task, datamodule=dm, verbose=False)[0]["test/acc"]
        gains.append(t_acc - feat)
    assert np.mean(gains) >= 0.1, gains


@pytest.mark.slow  # 100 s measured on the shared, loaded 2-core machine; keeps this file in the CI budget
def test_synthetic_sbm_planetoid_i_not_worse_than_feat(tmp_path):
    gaps = []
    for seed in (1, 2, 3):
        pl.seed_everything(seed, verbose=False)
        dm = _dm("synth", tmp_path, seed=seed, inductive=True, **SYNTH_T)
        feat = _feat_accuracy(dm)
        model = PlanetoidI(**dm.model_overrides())
        task, trainer = _fit(dm, model, lr_ctx=0.001, val_every=5)
        gaps.append(trainer.test(task, datamodule=dm, verbose=False)[0]["test/acc"] - feat)
    assert np.mean(gaps) >= -0.03, gaps


def test_warmup_decreases_the_context_loss(tmp_path):
    dm = _dm("synth", tmp_path, g_batch_size=100, warmup_label_iters=0, warmup_graph_iters=60, steps=0)
    task, _ = _fit(dm, PlanetoidT(**dm.model_overrides()), lr_ctx=0.001)
    losses = task.warmup_losses
    k = max(1, len(losses) // 10)
    assert losses[-k:].mean() < losses[:k].mean()
