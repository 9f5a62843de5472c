"""Instantiate the parts of a run from a composed config, in the one order every system follows:
data -> model (with sizes only the data knows) -> task -> callbacks, loggers -> trainer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from hydra.utils import instantiate
from pytorch_lightning.callbacks import LearningRateMonitor, ProgressBar
from omegaconf import DictConfig, OmegaConf

from genlab.errors import CheckpointError
from genlab.parallel import check_trainer_precision


def build_data(data_cfg: DictConfig) -> pl.LightningDataModule:
    datamodule = instantiate(data_cfg)
    datamodule.prepare_data()
    datamodule.setup("fit")
    return datamodule


def build_task(cfg: DictConfig, datamodule: pl.LightningDataModule) -> pl.LightningModule:
    sizes = datamodule.model_overrides() if hasattr(datamodule, "model_overrides") else {}
    model = instantiate(cfg.model, **sizes)
    return instantiate(cfg.task, model=model)


def build_callbacks(cfg: DictConfig) -> list[pl.Callback]:
    nodes = cfg.get("callbacks") or {}
    callbacks = [instantiate(node) for node in nodes.values() if node is not None]
    # Lightning refuses a progress bar it was told not to show, and an LR monitor with nothing to log to.
    if not cfg.trainer.get("enable_progress_bar", True):
        callbacks = [cb for cb in callbacks if not isinstance(cb, ProgressBar)]
    if not cfg.get("logger"):
        callbacks = [cb for cb in callbacks if not isinstance(cb, LearningRateMonitor)]
    return callbacks


def build_loggers(cfg: DictConfig) -> list[Any]:
    nodes = cfg.get("logger") or {}
    loggers = [instantiate(node) for node in nodes.values() if node is not None]
    return [lg for lg in loggers if lg is not None]


def build_trainer(cfg: DictConfig, callbacks: list[pl.Callback], loggers: list[Any]) -> pl.Trainer:
    check_trainer_precision(str(cfg.trainer.precision), str(cfg.trainer.accelerator))
    return instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False)


def resolve_checkpoint(ckpt_path: str | None, output_dir: str | Path) -> str | None:
    """``None``; ``last`` (this run dir's ``checkpoints/last.ckpt``); or an existing file."""
    if ckpt_path is None:
        return None
    path = Path(output_dir) / "checkpoints" / "last.ckpt" if ckpt_path == "last" else Path(ckpt_path)
    if not path.exists():  # a file, or a folder of shards (FSDP2)
        raise CheckpointError(
            f"ckpt_path={ckpt_path}: no checkpoint at {path}. Pass the file itself, e.g. "
            "ckpt_path=outputs/<experiment>/<date>/checkpoints/last.ckpt."
        )
    return str(path)


def config_to_dict(cfg: DictConfig) -> dict[str, Any]:
    """Resolved plain-dict copy of a config (stored in checkpoints so eval.py can rebuild the run)."""
    return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)  # type: ignore[return-value]
