"""Run metadata files, final metrics and loading a finished run (genlab.runs)."""

from __future__ import annotations

import json
import math

import pytest
import pytorch_lightning as pl
import torch
from omegaconf import OmegaConf
from pytorch_lightning.callbacks import ModelCheckpoint
from torch import nn

from genlab.errors import CheckpointError, UserError
from genlab.runs import (
    find_best_checkpoint,
    flatten_dict,
    global_rank,
    load_run,
    update_run_info,
    write_final_metrics,
    write_run_metadata,
)


class TinyTask(pl.LightningModule):
    """Regression task with the task constructor convention (model, optimizer, scheduler, monitor, ...)."""

    def __init__(
        self, model: nn.Module, optimizer, scheduler=None, monitor: str = "valid/loss", monitor_mode: str = "min",
        scale: float = 1.0,
    ):
        super().__init__()
        self.model, self.optimizer, self.monitor, self.scale = model, optimizer, monitor, scale
        self.extra_state_loaded = False

    def _loss(self, batch):
        x, y = batch
        return nn.functional.mse_loss(self.model(x) * self.scale, y)

    def training_step(self, batch, _):
        return self._loss(batch)

    def validation_step(self, batch, _):
        self.log("valid/loss", self._loss(batch))

    def configure_optimizers(self):
        return self.optimizer(self.parameters())

    def on_load_checkpoint(self, checkpoint):
        self.extra_state_loaded = True


def _data(n=32):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]])
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)


def _cfg(tmp_path):
    return OmegaConf.create(
        {
            "name": "tiny",
            "seed": 7,
            "out": str(tmp_path),
            "path_copy": "${out}/x",  # resolved in config.yaml
            "model": {"_target_": "torch.nn.Linear", "in_features": 3, "out_features": 1},
            "task": {
                "_target_": f"{__name__}.TinyTask",
                "optimizer": {"_target_": "torch.optim.SGD", "_partial_": True, "lr": 0.1},
                "scheduler": None,
                "monitor": "valid/loss",
                "monitor_mode": "min",
            },
        }
    )


def _clean_rank_env(monkeypatch):
    for k in ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)


def test_metadata_files_are_written_and_machine_readable(tmp_path, monkeypatch):
    _clean_rank_env(monkeypatch)
    cfg = _cfg(tmp_path)
    write_run_metadata(cfg, tmp_path / "run")
    run = tmp_path / "run"
    assert OmegaConf.load(run / "config.yaml").path_copy == f"{tmp_path}/x"  # resolved
    assert OmegaConf.to_container(OmegaConf.load(run / "overrides.yaml")) == []
    info = json.loads((run / "run.json").read_text())
    assert info["experiment"] == "tiny" and info["seed"] == 7
    assert info["monitor"] == "valid/loss" and info["monitor_mode"] == "min"
    assert len(info["git"]["commit"]) == 40 and isinstance(info["git"]["dirty"], bool)
    assert info["versions"]["torch"] == torch.__version__.split("+")[0] or info["versions"]["torch"] == torch.__version__
    assert info["versions"]["pytorch-lightning"] == pl.__version__
    assert info["device"]["type"] in ("cpu", "cuda", "mps") and info["world_size"] == 1
    assert info["hostname"] and info["start_time"].endswith("+00:00")
    assert not list(run.glob(".*.tmp"))  # atomic writes leave no temporaries


def test_hydra_overrides_and_experiment_are_recorded(tmp_path, monkeypatch):
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    _clean_rank_env(monkeypatch)
    conf = tmp_path / "conf"
    (conf / "experiment").mkdir(parents=True)
    (conf / "train.yaml").write_text("defaults:\n  - experiment: a\n  - _self_\nseed: 1\n")
    (conf / "experiment" / "a.yaml").write_text("# @package _global_\nlr: 0.1\n")
    with initialize_config_dir(str(conf), version_base=None):
        cfg = compose("train", overrides=["seed=3", "lr=0.5"], return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        try:
            run_cfg = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
            write_run_metadata(run_cfg, tmp_path / "run")
        finally:
            HydraConfig.instance().cfg = None
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["experiment"] == "a"
    assert info["overrides"] == ["seed=3", "lr=0.5"]
    assert OmegaConf.to_container(OmegaConf.load(tmp_path / "run" / "overrides.yaml")) == ["seed=3", "lr=0.5"]
    assert "hydra" not in OmegaConf.load(tmp_path / "run" / "config.yaml")


def test_resume_keeps_start_time_and_wandb_id(tmp_path, monkeypatch):
    _clean_rank_env(monkeypatch)
    cfg = _cfg(tmp_path)
    write_run_metadata(cfg, tmp_path)
    update_run_info(tmp_path, wandb_id="abc123")
    first = json.loads((tmp_path / "run.json").read_text())
    write_run_metadata(cfg, tmp_path)
    second = json.loads((tmp_path / "run.json").read_text())
    assert second["start_time"] == first["start_time"] and second["wandb_id"] == "abc123"
    assert len(second["resumed_at"]) == 1


def test_non_zero_rank_writes_nothing(tmp_path, monkeypatch):
    _clean_rank_env(monkeypatch)
    monkeypatch.setenv("LOCAL_RANK", "1")
    write_run_metadata(_cfg(tmp_path), tmp_path / "run")
    write_final_metrics(tmp_path / "run", {"valid/loss": 1.0}, "finished")
    assert not (tmp_path / "run").exists()


def test_final_metrics_finished_failed_and_nan(tmp_path, monkeypatch):
    _clean_rank_env(monkeypatch)
    write_run_metadata(_cfg(tmp_path), tmp_path)
    write_final_metrics(tmp_path, {"valid/loss": torch.tensor(0.25), "test/loss": 0.5}, "finished")
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["status"] == "finished" and m["error"] is None
    assert m["metrics"] == {"valid/loss": 0.25, "test/loss": 0.5}
    assert m["monitor"] == "valid/loss" and m["monitor_value"] == 0.25 and m["monitor_mode"] == "min"

    write_final_metrics(tmp_path, {}, "failed", error="RuntimeError: CUDA out of memory")
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["status"] == "failed" and "out of memory" in m["error"]

    write_final_metrics(tmp_path, {"valid/loss": math.nan}, "finished")
    text = (tmp_path / "metrics.json").read_text()
    assert "NaN" not in text  # strict JSON
    m = json.loads(text)
    assert m["status"] == "failed" and "valid/loss" in m["error"] and m["monitor_value"] is None

    with pytest.raises(ValueError, match="status"):
        write_final_metrics(tmp_path, {}, "done")


def _train(tmp_path, cfg):
    from hydra.utils import instantiate

    task = instantiate(cfg.task, model=instantiate(cfg.model))
    ckpt = ModelCheckpoint(dirpath=tmp_path / "checkpoints", monitor="valid/loss", mode="min", save_last=True)
    trainer = pl.Trainer(
        max_epochs=3, logger=False, callbacks=[ckpt], accelerator="cpu", enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(task, _data(), _data())
    return task, ckpt


def test_load_run_restores_config_metrics_and_best_checkpoint(tmp_path, monkeypatch):
    _clean_rank_env(monkeypatch)
    torch.manual_seed(0)
    cfg = _cfg(tmp_path)
    write_run_metadata(cfg, tmp_path)
    update_run_info(tmp_path, model_overrides={})
    _, ckpt = _train(tmp_path, cfg)
    write_final_metrics(tmp_path, {"valid/loss": float(ckpt.best_model_score)}, "finished")

    with pytest.raises(CheckpointError, match="TinyTask"):  # a class of the user's: built only when trusted
        load_run(tmp_path)
    run = load_run(tmp_path, trust_config=True)
    assert run.status == "finished" and run.experiment == "tiny"
    assert run.best_checkpoint == tmp_path / "checkpoints" / (ckpt.best_model_path.split("/")[-1])
    assert run.metrics["valid/loss"] == pytest.approx(float(ckpt.best_model_score))
    task = run.load_task()
    assert task.extra_state_loaded and not task.training
    best = torch.load(ckpt.best_model_path, map_location="cpu", weights_only=False)["state_dict"]
    for k, v in task.state_dict().items():
        assert torch.equal(v, best[k]), k


def test_best_checkpoint_read_from_last_when_several_kept(tmp_path):
    ck = tmp_path / "checkpoints"
    ck.mkdir()
    for name in ("epoch=0.ckpt", "epoch=1.ckpt"):
        torch.save({"state_dict": {}}, ck / name)
    state = {"callbacks": {"ModelCheckpoint{'monitor': 'valid/loss'}": {"best_model_path": str(ck / "epoch=0.ckpt")}}}
    torch.save(state, ck / "last.ckpt")
    assert find_best_checkpoint(tmp_path) == ck / "epoch=0.ckpt"


def test_load_run_refuses_a_config_that_names_code_to_run(tmp_path):
    """A run dir is a file a user passes: a config.yaml whose model is ``pathlib.Path.touch`` stops before anything
    is built, naming the file and the key."""
    victim = tmp_path / "touched"
    cfg = OmegaConf.create({"model": {"_target_": "pathlib.Path.touch", "self": str(victim)}})
    OmegaConf.save(cfg, tmp_path / "config.yaml")
    with pytest.raises(CheckpointError, match=r"config.yaml records model._target_=pathlib.Path.touch"):
        load_run(tmp_path)
    assert not victim.exists()


def test_load_run_rejects_a_directory_that_is_not_a_run(tmp_path):
    with pytest.raises(UserError, match="not a genlab run directory"):
        load_run(tmp_path)


def test_flatten_dict():
    assert flatten_dict({"a": {"b": 1, "c": {"d": [1, 2]}}, "e": {}}) == {"a.b": 1, "a.c.d": [1, 2], "e": {}}


def test_spawned_worker_rank_comes_from_its_process_group(tmp_path, monkeypatch):
    """A ddp_spawn worker has a process group but no RANK/LOCAL_RANK variables: rank 1 must still write nothing."""
    import torch.distributed as dist

    _clean_rank_env(monkeypatch)
    write_run_metadata(_cfg(tmp_path), tmp_path / "run")
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 1)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    assert global_rank() == 1
    write_run_metadata(_cfg(tmp_path), tmp_path / "worker")
    update_run_info(tmp_path / "run", wandb_id="from-rank-1")
    write_final_metrics(tmp_path / "run", {"valid/loss": 1.0}, status="finished")
    assert not (tmp_path / "worker").exists() and not (tmp_path / "run" / "metrics.json").exists()
    assert "from-rank-1" not in (tmp_path / "run" / "run.json").read_text()
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 0)
    write_run_metadata(_cfg(tmp_path), tmp_path / "worker")
    assert json.loads((tmp_path / "worker" / "run.json").read_text())["world_size"] == 2


@pytest.mark.parametrize("trainer,expected", [({"devices": 2, "num_nodes": 3}, 6), ({"devices": [0, 1]}, 2),
                                              ({"devices": "4"}, 4), ({"devices": "auto"}, None),
                                              ({"devices": -1}, None), ({}, 1)])
def test_world_size_recorded_before_the_workers_start(tmp_path, monkeypatch, trainer, expected):
    """The entry point writes run.json before Lightning spawns its workers: the world size comes from the config."""
    _clean_rank_env(monkeypatch)
    cfg = _cfg(tmp_path)
    cfg.trainer = trainer
    write_run_metadata(cfg, tmp_path / "run")
    assert json.loads((tmp_path / "run" / "run.json").read_text())["world_size"] == expected


def test_load_task_rebuilds_a_run_trained_with_global_batch(compose_cfg, tmp_path, monkeypatch):
    """``+data.global_batch`` is the CLI's key (it sets the accumulation), not a DataModule argument: a finished
    run's task is rebuilt by the CLI's own builder, so the run loads (it used to fail on an unexpected keyword)."""
    from genlab.cli.train import train
    from helpers import TINY_TXL

    _clean_rank_env(monkeypatch)
    cfg = compose_cfg([*TINY_TXL, "+data.global_batch=8", "trainer.max_steps=2", "trainer.val_check_interval=2",
                       "trainer.limit_val_batches=1", "trainer.enable_progress_bar=false", "test_after_fit=false"])
    train(cfg)
    run = load_run(tmp_path)
    assert run.status == "finished" and run.config.trainer.accumulate_grad_batches == 2
    task = run.load_task()
    assert not task.training
    saved = torch.load(run.best_checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    assert set(task.state_dict()) == set(saved)
    for k, v in task.state_dict().items():
        assert torch.equal(v, saved[k]), k
