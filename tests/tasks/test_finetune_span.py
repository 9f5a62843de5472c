"""SQuAD span task: the generated cloze mini trains and beats trivial baselines; prediction files; SQuAD 2.0
threshold outputs."""

from __future__ import annotations

import functools
import json
import warnings

import pytest
import pytorch_lightning as pl

from genlab.data.finetune.squad import SquadDataModule
from genlab.errors import ConfigError
from genlab.metrics.squad_eval import evaluate_v1, evaluate_v2
from genlab.models.xlnet import XLNetLMHeadModel
from genlab.tasks.finetune_span import SpanExtractionTask
from genlab.tasks.layerwise_lr import AdamWeightDecay
from genlab.tasks.optim import warmup_linear
from helpers import train_preset

warnings.filterwarnings("ignore", category=UserWarning)


def make(version, V, steps, lr=1e-3, **kw):
    m = XLNetLMHeadModel(V, n_layer=2, d_model=64, n_head=4, d_head=16, d_inner=128)
    return SpanExtractionTask(m, functools.partial(AdamWeightDecay, lr=lr),
                              functools.partial(warmup_linear, warmup_steps=steps // 10, max_steps=steps),
                              version=version, layer_decay=1.0, **kw)


def fit(task, dm, steps):
    tr = pl.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, accelerator="cpu",
                    enable_progress_bar=False, enable_model_summary=False, gradient_clip_val=1.0,
                    check_val_every_n_epoch=1000, num_sanity_val_steps=0)
    tr.fit(task, dm)
    return tr.test(task, dm, verbose=False)[0]


def test_cloze_squad11_mini_beats_first_word_baseline(tmp_path):
    pl.seed_everything(0)
    dm = SquadDataModule("1.1", source="mini", cache_dir=str(tmp_path / "c"), vocab_size=2000, max_seq_len=128,
                         doc_stride=64, max_query_length=48, batch_size=16)
    dm.setup("fit")
    res = fit(make("1.1", dm.model_overrides()["vocab_size"], 250, prediction_dir=str(tmp_path / "p")), dm, 250)
    baseline = evaluate_v1(dm.dev_data, {e.qid: e.context.split()[0] for e in dm.dev_examples})
    assert res["test/f1"] > baseline["f1"] + 5 and res["test/exact"] > baseline["exact"] + 5, (res, baseline)
    preds = json.loads((tmp_path / "p" / "predictions.json").read_text())
    assert set(preds) == {e.qid for e in dm.dev_examples}
    nbest = json.loads((tmp_path / "p" / "nbest_predictions.json").read_text())
    assert all(len(v) <= 5 for v in nbest.values())


def test_squad20_reports_threshold_and_breakdown(tmp_path):
    dm = SquadDataModule("2.0", source="mini", cache_dir=str(tmp_path / "c"), vocab_size=2000, max_seq_len=128,
                         doc_stride=64, max_query_length=48, batch_size=16)
    dm.setup("fit")
    res = fit(make("2.0", dm.model_overrides()["vocab_size"], 3, prediction_dir=str(tmp_path)), dm, 3)
    assert {"test/best_f1", "test/best_f1_thresh", "test/hasans_f1", "test/noans_f1", "test/exact"} <= set(res)
    no_ans = sum(1 for e in dm.dev_examples if e.is_impossible) / len(dm.dev_examples)
    assert res["test/best_f1"] >= 100 * no_ans - 1e-3  # all-null is one of the thresholds searched
    assert json.loads((tmp_path / "null_odds.json").read_text())


def test_bad_options():
    with pytest.raises(ConfigError, match="task.threshold"):
        make("2.0", 50, 1, threshold="auto")
    with pytest.raises(ConfigError, match="task.version"):
        make("3.0", 50, 1)


@pytest.mark.slow  # the preset's own 20,000 steps: about 35 minutes on one core
def test_xlnet_squad2_mini_beats_no_answer_baseline(compose_cfg, tmp_path, record_property):
    res, dm = train_preset("xlnet_squad2_mini", compose_cfg, tmp_path / "c", tmp_path)  # final weights
    no_answer = evaluate_v2(dm.dev_data, {e.qid: "" for e in dm.dev_examples})
    record_property("test/best_f1", float(res["test/best_f1"]))
    record_property("no_answer_f1", float(no_answer["f1"]))
    assert res["test/best_f1"] > no_answer["f1"] + 2, (res, no_answer)
