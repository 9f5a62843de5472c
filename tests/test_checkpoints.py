"""genlab.checkpoints: the one reader of genlab checkpoints (file, run record, data identity and its checker)."""

from __future__ import annotations

import pytest
import torch

from genlab import checkpoints
from genlab.callbacks.run_record import RunRecord
from genlab.errors import CheckpointError


def test_missing_truncated_and_foreign_files_name_the_file_and_key(tmp_path):
    with pytest.raises(CheckpointError, match=r"ckpt_path=.*none\.ckpt: no such file\. Pass another\."):
        checkpoints.load(tmp_path / "none.ckpt", key="ckpt_path", fix="Pass another.")
    good = tmp_path / "good.ckpt"
    torch.save({"state_dict": {"model.w": torch.ones(3)}}, good)
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(good.read_bytes()[:40])
    with pytest.raises(CheckpointError, match=r"truncated\.ckpt is not a readable checkpoint \(truncated"):
        checkpoints.load(truncated)
    text = tmp_path / "notes.ckpt"
    text.write_text("not a checkpoint")
    with pytest.raises(CheckpointError, match="notes.ckpt is not a readable checkpoint"):
        checkpoints.load(text)
    foreign = tmp_path / "tensor.pt"
    torch.save(torch.zeros(2), foreign)
    with pytest.raises(CheckpointError, match=r"tensor\.pt is not a checkpoint \(it holds a Tensor"):
        checkpoints.load(foreign)
    assert torch.equal(checkpoints.submodule_weights(checkpoints.load(good))["w"], torch.ones(3))


def test_run_record_written_by_the_callback_is_read_back(tmp_path):
    ckpt: dict = {"state_dict": {}}
    RunRecord({"model": {"n_layer": 2}}, {"dataset": "ptb", "vocab_size": 10}).on_save_checkpoint(None, None, ckpt)
    checkpoints.record_data_identity(ckpt, {"vocab": "abc"})  # a task adding what it knows: merged
    path = tmp_path / "run.ckpt"
    torch.save(ckpt, path)
    loaded = checkpoints.load(path)
    assert checkpoints.run_config(loaded, path) == {"model": {"n_layer": 2}}
    assert checkpoints.data_identity(loaded) == {"dataset": "ptb", "vocab_size": 10, "vocab": "abc"}
    with pytest.raises(CheckpointError, match="not written by genlab's train.py"):
        checkpoints.run_config({"state_dict": {}}, path)


def test_identity_of_earlier_awd_checkpoints_is_still_read():
    assert checkpoints.data_identity({"data_identity": {"vocab_size": 3}}) == {"vocab_size": 3}
    assert checkpoints.data_identity({}) == {}


def test_one_checker_for_evaluation_and_for_weights_moved_to_other_data():
    saved = {"dataset": "wt103", "vocab_size": 10, "vocab": "abc"}
    checkpoints.check_data_identity(saved, {"vocab_size": 10, "tokenizer": "x"}, "a.ckpt")  # unshared keys: silent
    with pytest.raises(CheckpointError, match=r"a.ckpt was trained with dataset='wt103' but the data gives 'ptb'"):
        checkpoints.check_data_identity(saved, {**saved, "dataset": "ptb"}, "a.ckpt")
    # weights moved to other data (second stage, finetuning) agree on the vocabulary only
    checkpoints.check_data_identity(saved, {**saved, "dataset": "ptb"}, "a.ckpt", keys=checkpoints.VOCABULARY_KEYS)
    with pytest.raises(CheckpointError, match=r"vocab_size=10 but the data gives 11.*different vocabulary.*; retrain"):
        checkpoints.check_data_identity(saved, {"vocab_size": 11}, "a.ckpt", keys=checkpoints.VOCABULARY_KEYS,
                                        fix="retrain")
