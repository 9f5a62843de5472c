"""Instantiate a run's data, model and task from its composed config, in the order every system follows: data ->
model (with sizes only the data knows) -> task. Every caller that builds or rebuilds a run goes through here:
``train.py`` and ``eval.py`` (through ``genlab.cli.build``, which adds callbacks, loggers and the Trainer) and
``genlab.runs.Run.load_task``. It sits below the CLI, so the run records never import the entry points."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytorch_lightning as pl
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf


def build_data(data_cfg: DictConfig) -> pl.LightningDataModule:
    if "global_batch" in data_cfg:
        # The CLI's key (it sets trainer.accumulate_grad_batches), not a DataModule argument.
        plain = OmegaConf.to_container(data_cfg, resolve=True)
        plain.pop("global_batch")
        data_cfg = OmegaConf.create(plain)
    datamodule = instantiate(data_cfg)
    datamodule.prepare_data()
    datamodule.setup("fit")
    return datamodule


def data_sizes(datamodule: pl.LightningDataModule) -> dict[str, Any]:
    """Model arguments only the data knows (vocabulary size, number of classes ...), from a set-up DataModule."""
    return dict(datamodule.model_overrides()) if hasattr(datamodule, "model_overrides") else {}


def has_test(datamodule: pl.LightningDataModule) -> bool:
    """The data defines a test split (train.py tests after fitting; eval.py scores it)."""
    return type(datamodule).test_dataloader is not pl.LightningDataModule.test_dataloader


def build_task(cfg: DictConfig, datamodule: pl.LightningDataModule | None = None,
               sizes: Mapping[str, Any] | None = None) -> pl.LightningModule:
    """The model (with ``sizes``, by default those of ``datamodule``) and the task around it."""
    if sizes is None:
        sizes = data_sizes(datamodule) if datamodule is not None else {}
    model = instantiate(cfg.model, **sizes)
    # Plain lists/dicts, not OmegaConf nodes: tasks save their arguments as hyperparameters, and a checkpoint
    # holding an OmegaConf node cannot be read back with torch.load(weights_only=True) (Lightning's default).
    return instantiate(cfg.task, model=model, _convert_="all")
