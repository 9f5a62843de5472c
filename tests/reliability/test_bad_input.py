"""Issue 27, bad input: one message naming the key or file and the fix, exit 2, no traceback, nothing lost."""

from __future__ import annotations

import json

import pytest
import torch

from helpers import TINY_TXL
from reliability.harness import train

pytestmark = pytest.mark.reliability

QUICK = [*TINY_TXL, "trainer.max_steps=2", "trainer.limit_val_batches=0", "test_after_fit=false", "logger=csv",
         "trainer.enable_progress_bar=false"]


def _user_error(result, *phrases: str) -> None:
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr + result.stdout
    for phrase in phrases:
        assert phrase in result.stderr, result.stderr[-3000:]


def test_truncated_checkpoint(tmp_path):
    bad = tmp_path / "half.ckpt"
    bad.write_bytes(b"PK\x03\x04 not a whole zip")
    _user_error(train(tmp_path / "run", *QUICK, f"ckpt_path={bad}"), f"ckpt_path={bad} is not a readable checkpoint")


def test_foreign_checkpoint_names_the_preset_that_wrote_it(tmp_path):
    foreign = tmp_path / "foreign.ckpt"
    torch.save({"state_dict": {"model.w": torch.zeros(3)}, "optimizer_states": [],
                "genlab": {"config": {"name": "cegan_gmm4_mini"}}}, foreign)
    _user_error(train(tmp_path / "run", *QUICK, f"ckpt_path={foreign}"),
                "written by experiment=cegan_gmm4_mini", "does not fit the model of experiment=txl_mini")


def test_misspelt_key_suggests_the_right_one(tmp_path):
    result = train(tmp_path / "run", *QUICK, "trainer.max_epoch=3")
    _user_error(result, "did you mean trainer.max_epochs")


def test_unwritable_run_dir_is_refused_before_training(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    _user_error(train(blocker / "run", *QUICK), "cannot be created", "choose another hydra.run.dir")


def test_unwritable_checkpoint_dir_is_refused_before_training(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoints").write_text("")  # checkpoints/ cannot be created
    result = train(run, *QUICK, "trainer.devices=4096", "trainer.accelerator=cpu")
    _user_error(result, "is not writable", "paths.output_dir")
    assert "oversubscribed" in result.stderr + result.stdout  # trainer.devices > CPU count warns first


def test_second_run_into_a_live_run_dir_is_refused(tmp_path):
    import os

    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").write_text(str(os.getppid()))  # a live process (pytest's parent) holds the run dir
    _user_error(train(run, *QUICK), f"is writing into {run}")
    assert (run / ".lock").read_text() == str(os.getppid())


def test_squad_file_without_usable_answers(tmp_path):
    data = tmp_path / "squad"
    data.mkdir()
    context = "The cat sat on the mat."
    broken = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": [
        {"id": f"q{i}", "question": "Where?", "answers": [{"text": "on the sofa", "answer_start": 500}]}
        for i in range(4)]}]}]}
    for name in ("train-v1.1.json", "dev-v1.1.json"):
        (data / name).write_text(json.dumps(broken))
    result = train(tmp_path / "run", "experiment=bert_squad1_mini", "data.source=path", f"data.path={data}",
                   "trainer.max_steps=2", "test_after_fit=false", "logger=csv")
    _user_error(result, "has no usable answers")


def test_limited_validation_with_a_full_pass_monitor(tmp_path):
    result = train(tmp_path / "run", "experiment=bert_squad1_mini", "trainer.limit_val_batches=2", "trainer.max_steps=2",
                   "test_after_fit=false", "logger=csv")
    _user_error(result, "computed only on a full pass", "callbacks.checkpoint.monitor=null")
