"""``python train.py experiment=<name> [overrides]``: fit, then test the best checkpoint."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytorch_lightning as pl
from omegaconf import DictConfig

from genlab.callbacks.run_record import RunRecord
from genlab.cli import build
from genlab.cli.errors import guarded
from genlab.cli.memory import check_memory
from genlab.cli.summary import print_summary
from genlab.cli.validate import validate_config
from genlab.errors import ConfigError
from genlab.runs import keep_tokenizer, write_final_metrics, write_run_metadata

log = logging.getLogger("genlab")


def output_dir(cfg: DictConfig) -> Path:
    return Path(cfg.paths.output_dir)


def train(cfg: DictConfig) -> float:
    validate_config(cfg)
    out = output_dir(cfg)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule = build.build_data(cfg.data)
    task = build.build_task(cfg, datamodule)
    check_memory(cfg, task)  # stop before training a run the machine cannot hold
    identity = datamodule.identity() if hasattr(datamodule, "identity") else {}
    callbacks = build.build_callbacks(cfg) + [RunRecord(build.config_to_dict(cfg), identity)]
    trainer = build.build_trainer(cfg, callbacks, build.build_loggers(cfg))
    if trainer.is_global_zero:
        write_run_metadata(cfg, out)
        keep_tokenizer(datamodule, out)
    ckpt = build.resolve_checkpoint(cfg.get("ckpt_path"), out)

    _fit(cfg, trainer, task, datamodule, ckpt)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    if cfg.get("test_after_fit") and not trainer.fast_dev_run and _has_test(datamodule):
        results = trainer.test(task, datamodule=datamodule, ckpt_path=best or None, verbose=False)
        for per_loader in results:  # one dict per test dataloader (e.g. MNLI matched + mismatched)
            metrics.update({k: float(v) for k, v in per_loader.items()})
    if trainer.is_global_zero:
        write_final_metrics(out, metrics, status="finished")
        _summary(cfg, metrics, out, best)
    return metrics.get(task.monitor, math.nan)


def _fit(cfg: DictConfig, trainer: pl.Trainer, task: pl.LightningModule, datamodule: pl.LightningDataModule,
         ckpt: str | None) -> None:
    try:
        trainer.fit(task, datamodule=datamodule, ckpt_path=ckpt)
    except ValueError as err:  # Lightning checks the interval against the epoch only once the data loader exists
        if "val_check_interval" not in str(err):
            raise
        raise ConfigError(
            f"trainer.val_check_interval={cfg.trainer.get('val_check_interval')} counts batches within one epoch "
            f"(trainer.check_val_every_n_epoch={cfg.trainer.get('check_val_every_n_epoch')}), and one epoch of this "
            "data has fewer; set trainer.check_val_every_n_epoch=null to count optimiser steps across epochs, or a "
            "smaller trainer.val_check_interval.") from err


def _has_test(datamodule: pl.LightningDataModule) -> bool:
    return type(datamodule).test_dataloader is not pl.LightningDataModule.test_dataloader


def _summary(cfg: DictConfig, metrics: dict[str, float], out: Path, best: str) -> None:
    print_summary(f"{cfg.name} finished", metrics, out, best)


def main(cfg: DictConfig) -> float:
    def record_failure(err: BaseException) -> None:
        write_final_metrics(output_dir(cfg), {}, status="failed", error=f"{type(err).__name__}: {err}")

    return guarded(lambda: train(cfg), record_failure)
