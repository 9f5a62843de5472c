"""XLNet's SQuAD 1.1 protocol (XLNet v1 §3.3): a model finetuned on SQuAD 2.0 (with its
answerability head) is scored on the 1.1 dev set with the answerability part removed -- always its best non-null
span, plain v1.1 EM/F1. In-process on the cloze minis (squad2 mini -> squad1 mini dev), and as the one command a
user runs: ``eval.py ckpt_path=<squad2 run> data=squad2_mini_eval11``."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import pytorch_lightning as pl

from genlab.data.finetune.squad import SquadDataModule
from genlab.metrics.squad_eval import evaluate_v1, evaluate_v2
from genlab.models.xlnet import XLNetLMHeadModel
from genlab.tasks.finetune_span import SpanExtractionTask
from genlab.tasks.layerwise_lr import AdamWeightDecay
from genlab.tasks.optim import warmup_linear

warnings.filterwarnings("ignore", category=UserWarning)
ROOT = Path(__file__).resolve().parents[2]


def test_squad2_trained_model_scored_on_squad11_dev_always_answers(tmp_path):
    pl.seed_everything(0)
    dm = SquadDataModule("2.0", source="mini", cache_dir=str(tmp_path / "c"), vocab_size=2000, max_seq_len=128,
                         doc_stride=64, max_query_length=48, batch_size=16, eval_version="1.1")
    dm.setup("fit")
    assert dm.dev_version == "1.1" and all(not e.is_impossible for e in dm.dev_examples)
    steps = 250
    model = XLNetLMHeadModel(dm.model_overrides()["vocab_size"], n_layer=2, d_model=64, n_head=4, d_head=16,
                             d_inner=128)
    task = SpanExtractionTask(model, functools.partial(AdamWeightDecay, lr=1e-3),
                              functools.partial(warmup_linear, warmup_steps=25, max_steps=steps), version="2.0",
                              layer_decay=1.0, prediction_dir=str(tmp_path / "p"))
    # training really is SQuAD 2.0: unanswerable windows are in the training features
    assert dm.train_features().is_impossible.sum() > 0
    tr = pl.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, accelerator="cpu",
                    enable_progress_bar=False, enable_model_summary=False, gradient_clip_val=1.0,
                    check_val_every_n_epoch=1000, num_sanity_val_steps=0)
    tr.fit(task, dm)
    res = tr.test(task, dm, verbose=False)[0]
    # v1.1 scoring: no threshold search, no HasAns/NoAns split
    assert "test/best_f1" not in res and "test/noans_f1" not in res
    preds = json.loads((tmp_path / "p" / "predictions.json").read_text())
    nbest = json.loads((tmp_path / "p" / "nbest_predictions.json").read_text())
    assert set(preds) == {e.qid for e in dm.dev_examples}
    # never "no answer" by the null score: always the best valid span. A question whose top start x end candidates
    # are all invalid (e.g. inside the question) has no span, as in the official code; rare
    assert all(preds[q] == b[0]["text"] and preds[q] for q, b in nbest.items() if b)
    assert sum(not b for b in nbest.values()) < 0.01 * len(preds)
    assert res["test/f1"] == pytest.approx(evaluate_v1(dm.dev_data, preds)["f1"], abs=1e-4)
    null = json.loads((tmp_path / "p" / "null_odds.json").read_text())
    suppressed = evaluate_v2(dm.dev_data, preds, null, 0.0)  # what keeping the answerability head would score
    assert res["test/f1"] >= suppressed["f1"] - 1e-6
    baseline = evaluate_v1(dm.dev_data, {e.qid: e.context.split()[0] for e in dm.dev_examples})
    assert res["test/f1"] > baseline["f1"] + 5, (res, baseline)


def run(script: str, *args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "GENLAB_OFFLINE": "1", "WANDB_MODE": "disabled", "GENLAB_LOGS": str(tmp_path / "outputs"),
           "GENLAB_CACHE": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, str(ROOT / script), *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600, check=False)


def test_one_command_eval_of_a_squad2_run_on_squad11(tmp_path):
    tiny = ["model.n_layer=1", "model.d_model=32", "model.n_head=2", "model.d_head=16", "model.d_inner=64",
            "data.eval_batch_size=128", "trainer.enable_progress_bar=false", "logger=csv"]
    trained = run("train.py", "experiment=xlnet_squad2_mini", *tiny, "trainer.max_steps=2", tmp_path=tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    ckpt = next((tmp_path / "outputs").rglob("last.ckpt"))
    out = run("eval.py", f"ckpt_path={ckpt}", "data=squad2_mini_eval11", "data.eval_batch_size=128", "splits=[test]",
              "trainer.enable_progress_bar=false", "logger=csv", tmp_path=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "test/f1" in out.stdout and "test/exact" in out.stdout
    assert "best_f1" not in out.stdout and "noans" not in out.stdout  # the answerability head is not used
