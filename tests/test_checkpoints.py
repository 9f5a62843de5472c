"""genlab.checkpoints: the one reader of genlab checkpoints (file, run record, data identity and its checker)."""

from __future__ import annotations

import pytest
import torch
from reliability.harness import assert_equal_state

from genlab import checkpoints
from genlab.callbacks.run_record import RunRecord
from genlab.errors import CheckpointError
from helpers import TouchPayload


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


# ------------------------------------------------------------------------------- no code from a checkpoint
def test_a_checkpoint_carrying_code_is_refused_without_running_it(tmp_path):
    """Every reader of a user's checkpoint goes through checkpoints.load (weights_only): the payload never runs."""
    from genlab.analysis.gpt_zero_shot import load_lm
    from genlab.models.gpt import GPTLMHeadModel
    from genlab.tasks.gpt import load_pretrained_state

    marker, evil = tmp_path / "pwned", tmp_path / "evil.ckpt"
    torch.save({"state_dict": {"model.w": torch.ones(1)}, "hyper_parameters": {"lr": TouchPayload(marker)}}, evil)
    refused = r"evil\.ckpt holds \S+, which no genlab checkpoint stores .*could run code\. Pass a checkpoint written"
    with pytest.raises(CheckpointError, match=rf"ckpt_path=\S+{refused}.* Pass another\."):
        checkpoints.load(evil, key="ckpt_path", fix="Pass another.")
    with pytest.raises(CheckpointError, match=rf"task\.init_from=\S+{refused}"):
        load_pretrained_state(str(evil), GPTLMHeadModel(10, n_positions=8, n_embd=8, n_layer=1, n_head=2))  # GPT
        # finetuning's task.init_from=<genlab .ckpt>
    with pytest.raises(CheckpointError, match=refused):
        load_lm(evil)  # the zero-shot analysis
    assert not marker.exists()


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # one process saving: intended
def test_a_folder_of_shards_carrying_code_is_refused_without_running_it(tmp_path):
    """strategy=fsdp's checkpoints: DCP's index (.metadata), its non-tensor entries and Lightning's meta.pt."""
    import pickle
    import shutil

    import torch.distributed.checkpoint as dcp

    marker, good = tmp_path / "pwned", tmp_path / "good"
    dcp.save({"state_dict": {"model.w": torch.ones(2)}, "loops": {"step": 3}}, checkpoint_id=good, no_dist=True)
    torch.save({"global_step": 3}, good / "meta.pt")
    loaded = checkpoints.load(good)
    assert loaded["loops"] == {"step": 3} and loaded["global_step"] == 3
    assert torch.equal(checkpoints.submodule_weights(loaded)["w"], torch.ones(2))
    assert checkpoints.load(good, shard_tensors=False) == {"loops": {"step": 3}, "global_step": 3}

    in_entry = tmp_path / "entry"
    dcp.save({"state_dict": {"model.w": torch.ones(2)}, "loops": TouchPayload(marker)}, checkpoint_id=in_entry,
             no_dist=True)
    in_index, in_meta = shutil.copytree(good, tmp_path / "index"), shutil.copytree(good, tmp_path / "meta")
    index = pickle.loads((good / ".metadata").read_bytes())
    index.planner_data = TouchPayload(marker)
    (in_index / ".metadata").write_bytes(pickle.dumps(index))
    torch.save({"global_step": TouchPayload(marker)}, in_meta / "meta.pt")
    for folder in (in_entry, in_index, in_meta):
        for shard_tensors in (True, False):  # False: train.py's check before Lightning's FSDP loader reads it
            with pytest.raises(CheckpointError, match=rf"ckpt_path={folder} holds \S+, which no genlab checkpoint"):
                checkpoints.load(folder, key="ckpt_path", shard_tensors=shard_tensors)
    assert not marker.exists()


def test_checkpoints_as_written_before_weights_only_loading_still_load(tmp_path):
    """The types train.py's checkpoints hold (as c15fb8a wrote them, read then with weights_only=False): Lightning's
    loops and optimiser/scheduler states, the RNG callback's state (Python's random tuple, numpy's as tensors),
    ModelCheckpoint's state, plain hyperparameters and data-module state, the genlab record, task-held tensors."""
    import pytorch_lightning as pl

    from genlab.callbacks.rng import collect_rng_state

    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.Adam([w], lr=0.1)
    w.sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    ckpt: dict = {"epoch": 0, "global_step": 2, "pytorch-lightning_version": pl.__version__,
                  "state_dict": {"model.w": w.detach().clone()},
                  "loops": {"fit_loop": {"state_dict": {}, "epoch_loop.state_dict": {"_batches_that_stepped": 2},
                                         "epoch_progress": {"total": {"ready": 1, "completed": 0}}}},
                  "callbacks": {"RNGStateCallback": collect_rng_state(),
                                "ModelCheckpoint{'monitor': 'valid/loss'}": {
                                    "monitor": "valid/loss", "best_model_score": torch.tensor(1.5),
                                    "best_model_path": str(tmp_path / "a.ckpt"), "current_score": None,
                                    "best_k_models": {str(tmp_path / "a.ckpt"): torch.tensor(1.5)},
                                    "kth_value": torch.tensor(float("inf")), "last_model_path": ""}},
                  "optimizer_states": [opt.state_dict()], "lr_schedulers": [sched.state_dict()],
                  "hparams_name": "kwargs", "hyper_parameters": {"image_shape": [1, 28, 28], "lr": 3e-4},
                  "LMDataModule": {"epoch": 1, "order": (3, 1, 2)}, "lm_memory": [[torch.zeros(2, 1, 4)]],
                  "awd": {"averaging": True, "n_avg": 3}}
    RunRecord({"name": "txl_mini", "model": {"n_layer": 2}}, {"vocab_size": 10}).on_save_checkpoint(None, None, ckpt)
    path = tmp_path / "old.ckpt"
    torch.save(ckpt, path)
    loaded = checkpoints.load(path)
    assert_equal_state(loaded, ckpt)
    assert checkpoints.run_config(loaded, path)["name"] == "txl_mini"


def test_a_recorded_config_naming_code_is_refused_before_eval_builds_it(tmp_path):
    """weights_only stops pickled code; the run config eval.py instantiates is plain strings, checked by target."""
    from genlab.cli.eval import load_run_config

    marker, path = tmp_path / "pwned", tmp_path / "config.ckpt"
    for target in ("pathlib.Path.touch", "genlab.utils.atomic_write", "genlab.models.gpt.GPTLMHeadModel.mro"):
        config = {"name": "txl_mini", "model": {"_target_": "genlab.models.transformer_xl.TransformerXL"},
                  "task": {"x": [{"_target_": target, "_args_": [str(marker)]}]},
                  "callbacks": {"kill": {"_target_": "kill_at_step.KillAtStep"}}}  # a test's; eval.py builds none
        torch.save({"state_dict": {}, "genlab": {"config": config}}, path)
        with pytest.raises(CheckpointError, match=rf"config\.ckpt records task\.x\[0\]\._target_={target}, which "
                                                  "genlab does not build from a checkpoint"):
            load_run_config(str(path))
    assert not marker.exists()
    config["task"]["x"][0]["_target_"] = "genlab.tasks.optim.warmup_cosine"  # a schedule, as train.py records it
    torch.save({"state_dict": {}, "genlab": {"config": config}}, path)
    assert load_run_config(str(path))["config"] == config
