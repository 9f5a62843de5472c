"""GDAN end to end on the synthetic SQuAD-format fixture (the methods of Yang's thesis Table 3.4): every Table 3.4
method runs Algorithm 1 through the real data module (files -> protocol split -> batches) for a few hundred updates;
SL's dev F1 ends clearly above a random legal span's; GDAN's REINFORCE reward rises; ``train/d_loss_gen`` (Figure 3.8)
is logged by every method that trains on U."""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import pytest
import pytorch_lightning as pl
import torch

from genlab.data.qa.datamodule import SemiSupervisedSquadDataModule
from genlab.data.qa.synthetic import build_synthetic
from genlab.metrics.squad_eval import evaluate_v1
from genlab.models.gdan import GDAN, DomainClassifier, GAReader, QuestionGenerator
from genlab.tasks.gdan import GDANTask
from genlab.tasks.gdan_objectives import METHODS

MLE_STEPS = 30
D_STEPS = {"sl": 80, "gen_domain_adv": 80}  # the rows with a learning assertion; the others run 20 updates


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("gdan_synthetic")
    build_synthetic(root, train_articles=40, dev_articles=6, unlabeled_paragraphs=300)
    return root


def datamodule(root, method: str) -> SemiSupervisedSquadDataModule:
    spec = METHODS[method]
    dm = SemiSupervisedSquadDataModule(source="path", path=str(root), label_rate=0.5, seed=0, batch_size=16,
                                       unlabeled_batch_size=16, eval_batch_size=64,
                                       unlabeled=spec.unlabeled_source != "none",
                                       generator_vocab=spec.unlabeled_source == "generator")
    dm.setup("fit")
    return dm


def tiny_task(dm: SemiSupervisedSquadDataModule, method: str, prediction_dir: str | None = None) -> GDANTask:
    torch.manual_seed(0)
    sizes = dm.model_overrides()
    reader = GAReader(sizes["reader"]["vocab_size"], embed_dim=24, hidden=16, num_layers=2, dropout=0.1)
    gen = (QuestionGenerator(sizes["generator"]["vocab_size"], embed_dim=24, enc_hidden=16, dec_hidden=32,
                             max_question_len=10) if "generator" in sizes else None)
    clf = DomainClassifier(32, 16) if method == "gen_gan" else None
    return GDANTask(GDAN(reader, gen, clf), optimizer=partial(torch.optim.Adam, lr=5e-3),
                    g_mle_optimizer=partial(torch.optim.Adam, lr=5e-3),
                    g_rl_optimizer=partial(torch.optim.SGD, lr=0.05),
                    method=method, mle_steps=MLE_STEPS if gen is not None else 0, prediction_dir=prediction_dir)


class Record(pl.Callback):
    """Per-update values of the logged training keys (callback_metrics holds the last logged value)."""

    def __init__(self) -> None:
        self.rewards: list[float] = []
        self.d_loss_gen: list[float] = []

    def on_train_batch_end(self, trainer, task, outputs, batch, batch_idx) -> None:
        m = trainer.callback_metrics
        if task.counts["g"] > len(self.rewards) and "train/reward" in m:
            self.rewards.append(float(m["train/reward"]))
        if task.counts["d"] > len(self.d_loss_gen) and "train/d_loss_gen" in m:
            self.d_loss_gen.append(float(m["train/d_loss_gen"]))


def random_span_f1(dm: SemiSupervisedSquadDataModule, split: str = "dev") -> float:
    return evaluate_v1(dm.gold(split), dm.random_span_predictions(split))["f1"] / 100.0


@pytest.mark.parametrize("method", sorted(METHODS))
def test_check_16_every_method_runs_algorithm_1_on_the_fixture(data_dir, method, record_property, tmp_path):
    dm = datamodule(data_dir, method)
    task = tiny_task(dm, method, prediction_dir=str(tmp_path))
    spec = METHODS[method]
    alternating = spec.g_update != "none"
    d_steps = D_STEPS.get(method, 20)
    steps = task.mle_steps + d_steps * (2 if alternating else 1)
    record = Record()
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", logger=False, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=0,
                         val_check_interval=steps, check_val_every_n_epoch=None, callbacks=[record])
    trainer.fit(task, datamodule=dm)
    assert task.counts["d"] == d_steps and task.counts["g"] == (d_steps if alternating else 0)
    f1 = float(trainer.callback_metrics["valid/f1"])
    test = trainer.test(task, datamodule=dm, verbose=False)[0]
    assert 0.0 <= test["test/f1"] <= 1.0 and test["test/exact"] <= test["test/f1"]
    # every prediction is a substring of its original context
    preds = json.loads((tmp_path / "predictions.json").read_text())
    contexts = {it.qid: dm.passages[it.passage].context for it in dm.splits["test"]}
    assert preds.keys() == contexts.keys() and all(preds[q] and preds[q] in contexts[q] for q in preds)
    if spec.unlabeled_source != "none":
        assert len(record.d_loss_gen) == d_steps and all(np.isfinite(record.d_loss_gen))
    else:
        assert record.d_loss_gen == []
    if method == "sl":
        chance = random_span_f1(dm)
        record_property("sl_dev_f1", f1)
        record_property("random_span_f1", chance)
        assert f1 > max(3 * chance, chance + 0.15), (f1, chance)
    if method == "gen_domain_adv":
        r = record.rewards
        record_property("reward_first20", float(np.mean(r[:20])))
        record_property("reward_last20", float(np.mean(r[-20:])))
        assert len(r) == d_steps and all(x <= 0 for x in r)
        assert np.mean(r[-20:]) > np.mean(r[:20]), (np.mean(r[:20]), np.mean(r[-20:]))
