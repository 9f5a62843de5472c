"""W&B logger factory: offline by default, group/name/tags from the sweep, flat config, resumed run id."""

from __future__ import annotations

import json
import time

import pytest
from omegaconf import OmegaConf

from genlab.callbacks.wandb import finish_wandb, is_logged_in, make_wandb_logger, resolve_mode, sweep_identity
from genlab.errors import ConfigError
from helpers import flushed_wandb_record


@pytest.fixture(autouse=True)
def offline_env(tmp_path, monkeypatch):
    """No API key anywhere, and every wandb side file under tmp: the tests never see the user's login."""
    for k in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL", "RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb_config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb_cache"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb_data"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    yield
    finish_wandb()


def test_auto_mode_is_offline_without_a_key_and_online_with_one(tmp_path, monkeypatch):
    assert not is_logged_in() and resolve_mode("auto") == "offline"
    (tmp_path / "netrc").write_text("machine api.wandb.ai\n  login user\n  password " + "0" * 40 + "\n")
    assert is_logged_in() and resolve_mode("auto") == "online"
    monkeypatch.setenv("WANDB_MODE", "offline")  # an explicit user choice wins
    assert resolve_mode("auto") == "offline"
    assert resolve_mode("disabled") == "disabled"
    with pytest.raises(ConfigError, match="logger.wandb.mode"):
        resolve_mode("sometimes")


def test_disabled_returns_no_logger(tmp_path):
    assert make_wandb_logger("p", "g", None, [], str(tmp_path), mode="disabled") is None


@pytest.fixture
def multirun_hydra(tmp_path):
    """A Hydra runtime as in trial 3 of `-m experiment=a seed=1,2 model.x=4,5`."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    conf = tmp_path / "conf"
    (conf / "experiment").mkdir(parents=True)
    (conf / "train.yaml").write_text("defaults:\n  - experiment: a\n  - _self_\nseed: 1\nmodel: {x: 1}\n")
    (conf / "experiment" / "a.yaml").write_text("# @package _global_\nlr: 0.1\n")
    with initialize_config_dir(str(conf), version_base=None):
        cfg = compose("train", overrides=["experiment=a", "seed=2", "model.x=5"], return_hydra_config=True)
    hc = cfg.hydra
    OmegaConf.set_readonly(hc, False)
    hc.mode = RunMode.MULTIRUN
    hc.sweep.dir = str(tmp_path / "multirun_2026-01-01_00-00-00")
    hc.job.num = 3
    hc.job.override_dirname = "model.x=5,seed=2"
    HydraConfig.instance().set_config(cfg)
    yield
    HydraConfig.instance().cfg = None


def test_sweep_identity_groups_a_multirun(tmp_path, multirun_hydra):
    group, name, tags = sweep_identity("a", None, ["mine"], str(tmp_path))
    assert group == "a-multirun_2026-01-01_00-00-00"
    assert name == "model.x=5,seed=2"
    assert tags == ["mine", "experiment=a", "multirun", "seed=2", "model.x=5"]


def test_offline_run_is_created_with_group_tags_and_flat_config(tmp_path, multirun_hydra):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    logger = make_wandb_logger("genlab", "a", None, [], str(run_dir))
    # train.py writes the run's metadata after building the loggers; the W&B run starts later, at fit.
    (run_dir / "config.yaml").write_text("model: {d_model: 32, nested: {k: 1}}\nseed: 2\n")
    (run_dir / "run.json").write_text(json.dumps({"experiment": "a"}))
    logger.log_hyperparams({"optimizer": {"lr": 0.1}})
    logger.log_metrics({"train/loss": 1.5}, step=1)
    exp = logger.experiment
    assert exp.offline and exp.group == "a-multirun_2026-01-01_00-00-00"
    assert exp.name == "model.x=5,seed=2" and "seed=2" in exp.tags and "multirun" in exp.tags
    assert exp.config["model.d_model"] == 32 and exp.config["model.nested.k"] == 1
    assert exp.config["optimizer.lr"] == 0.1
    rid = (run_dir / "wandb_id").read_text().strip()
    assert exp.id == rid
    finish_wandb()
    offline = list((run_dir / "wandb").glob(f"offline-run-*-{rid}"))
    assert len(offline) == 1
    record = flushed_wandb_record(lambda: [offline[0] / f"run-{rid}.wandb"], b"a-multirun_2026-01-01_00-00-00")
    assert b"a-multirun_2026-01-01_00-00-00" in record
    assert b"model.x=5" in record and b"model.d_model" in record


def test_resumed_run_continues_the_same_id(tmp_path):
    first = make_wandb_logger("genlab", "g", None, [], str(tmp_path))
    rid = first.experiment.id
    finish_wandb()
    time.sleep(1.1)  # W&B names offline folders by the second: two sessions in one second would share a folder
    second = make_wandb_logger("genlab", "g", None, [], str(tmp_path))
    assert second.experiment.id == rid
    assert len(list((tmp_path / "wandb").glob(f"offline-run-*-{rid}"))) == 2  # one folder per session, same id
