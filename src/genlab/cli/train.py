"""``python train.py experiment=<name> [overrides]``: fit, then test the best checkpoint."""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytorch_lightning as pl
from omegaconf import DictConfig, OmegaConf

from genlab import assemble, checkpoints
from genlab.callbacks.interrupt import TrainingInterrupted
from genlab.callbacks.run_record import RunRecord
from genlab.cli import build, run_dir
from genlab.cli.errors import find_user_error, guarded, in_multirun
from genlab.cli.host_memory import apply_host_memory_setting
from genlab.cli.memory import check_memory, sizes_before_data
from genlab.cli.quiet import quiet_resume
from genlab.cli.summary import print_summary
from genlab.cli.validate import validate_config
from genlab.errors import ConfigError
from genlab.runs import keep_tokenizer, write_final_metrics, write_run_metadata

log = logging.getLogger("genlab")


def output_dir(cfg: DictConfig) -> Path:
    return Path(cfg.paths.output_dir)


def train(cfg: DictConfig, on_fit: Callable[[], None] = lambda: None) -> float:
    """Fit, test the best checkpoint, record and summarise; ``on_fit`` is called as training starts."""
    validate_config(cfg)
    apply_host_memory_setting(cfg)
    out = output_dir(cfg)
    _check_devices(cfg)
    if build_rank_zero():
        run_dir.check_writable(out)
        run_dir.acquire_lock(out)
        for tmp in run_dir.remove_partial_writes(out):
            log.warning("removed %s, left by a write that a kill interrupted", tmp)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule, task = build_data_and_task(cfg)
    _check_full_pass_monitor(cfg, task)
    identity = datamodule.identity() if hasattr(datamodule, "identity") else {}
    callbacks = build.build_callbacks(cfg) + [RunRecord(build.config_to_dict(cfg), identity)]
    trainer = build.build_trainer(cfg, callbacks, build.build_loggers(cfg))
    if trainer.is_global_zero:
        write_run_metadata(cfg, out)
        keep_tokenizer(datamodule, out)
    ckpt = build.resolve_checkpoint(cfg.get("ckpt_path"), out)
    if ckpt is not None and checkpoints.is_sharded(ckpt):  # Lightning's FSDP loader unpickles it unrestricted
        checkpoints.load(ckpt, key="ckpt_path", shard_tensors=False)  # so read everything but the tensors here first
    if ckpt is not None and Path(ckpt).is_file():
        logged_step, step = check_resume_checkpoint(ckpt, cfg, task)
        for logger in trainer.loggers:
            if hasattr(logger, "resumed_at"):  # genlab's CSV logger: history appended, not replaced
                logger.resumed_at(logged_step)
        _log_resume(cfg, Path(ckpt), out, step)
    if ckpt is not None:
        quiet_resume(datamodule)

    on_fit()
    _fit(cfg, trainer, task, datamodule, ckpt)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    if cfg.get("test_after_fit") and not trainer.fast_dev_run and assemble.has_test(datamodule):
        results = trainer.test(task, datamodule=datamodule, ckpt_path=best or None, verbose=False, weights_only=True)
        for per_loader in results:  # one dict per test dataloader (e.g. MNLI matched + mismatched)
            metrics.update({k: float(v) for k, v in per_loader.items()})
    if trainer.is_global_zero:
        write_final_metrics(out, metrics, status="finished")
        _summary(cfg, metrics, out, best)
    return metrics.get(task.monitor, math.nan)


def build_data_and_task(cfg: DictConfig) -> tuple[pl.LightningDataModule, pl.LightningModule]:
    """The data and the task, the task built once where the config knows the model's sizes: before the data, so the
    memory check stops a run the machine cannot hold before anything is read or tokenised, and kept when the data
    agrees (``task.init_from`` is then read once). Rebuilt and checked again when the data changes the model, or
    when only the data knows its sizes."""
    sizes, task = check_memory_before_data(cfg)
    datamodule = assemble.build_data(cfg.data)
    if task is None or sizes != assemble.data_sizes(datamodule):
        task = assemble.build_task(cfg, datamodule)
        check_memory(cfg, task)
    return datamodule, task


def check_memory_before_data(cfg: DictConfig) -> tuple[dict | None, pl.LightningModule | None]:
    """The model built with the sizes the config gives, and checked: the sizes and the task (None, None: only the
    data knows them, and the check waits for it)."""
    sizes = sizes_before_data(cfg)
    if sizes is None:
        return None, None
    task = assemble.build_task(cfg, sizes=sizes)
    check_memory(cfg, task)
    return sizes, task


def _log_resume(cfg: DictConfig, ckpt: Path, out: Path, step: int) -> None:
    if ckpt.parent.parent.resolve() == out.resolve():
        log.info("continuing the run in %s from %s (after step %d) up to trainer.max_steps=%s; the final test uses the best "
                 "checkpoint over all its steps", out, ckpt.name, step, cfg.trainer.get("max_steps"))
    else:
        log.info("starting a new run in %s from %s (after step %d); its best checkpoint is chosen among this run's "
                 "validations", out, ckpt, step)


def check_resume_checkpoint(path: str, cfg: DictConfig, task: pl.LightningModule) -> tuple[int, int]:
    """``ckpt_path`` is a whole training checkpoint of this model: a truncated file, a weights-only file or another
    preset's checkpoint is one message naming the file and the preset that wrote it, not a torch traceback.
    Returns the logging step and the optimiser step the checkpoint was written at."""
    fix = "pass a checkpoints/*.ckpt file written by train.py for this experiment"
    ckpt = checkpoints.load(path, key="ckpt_path", fix=f"{fix}; a half-written file is never renamed into place, so "
                            "last.ckpt of the same run dir is whole.", mmap=True)
    writer = checkpoints.record(ckpt).get("config") or {}
    by = f" (written by experiment={writer.get('name')})" if writer.get("name") else ""
    if "state_dict" not in ckpt or "optimizer_states" not in ckpt:
        raise checkpoints.CheckpointError(f"ckpt_path={path}{by} holds no training state (weights only, or not a "
                                          f"Lightning checkpoint): it cannot be resumed; {fix}.")
    expected = {k: tuple(v.shape) for k, v in task.state_dict().items()}
    saved = {k: tuple(v.shape) for k, v in ckpt["state_dict"].items() if hasattr(v, "shape")}
    missing, unexpected = sorted(set(expected) - set(saved)), sorted(set(saved) - set(expected))
    resized = sorted(k for k in set(expected) & set(saved) if expected[k] != saved[k])
    if missing or unexpected or resized:
        detail = (f"{len(missing)} weights missing (e.g. {missing[:2]})" if missing else
                  f"{len(unexpected)} unexpected weights (e.g. {unexpected[:2]})" if unexpected else
                  f"{resized[0]} has shape {saved[resized[0]]}, this model {expected[resized[0]]}")
        raise checkpoints.CheckpointError(f"ckpt_path={path}{by} does not fit the model of experiment={cfg.name}: "
                                          f"{detail}; resume with the experiment and model overrides that wrote it, "
                                          f"or {fix}.")
    loops = ckpt.get("loops") or {}
    epoch_loop = (loops.get("fit_loop") or {}).get("epoch_loop.state_dict") or {}
    step = int(ckpt.get("global_step", 0))
    return int(epoch_loop.get("_batches_that_stepped", step)), step


def _check_full_pass_monitor(cfg: DictConfig, task: pl.LightningModule) -> None:
    """A monitor computed only over the whole dev set (SQuAD F1) never appears with ``trainer.limit_val_batches``."""
    limit = cfg.trainer.get("limit_val_batches")
    monitor = OmegaConf.select(cfg, "callbacks.checkpoint.monitor", default=None)
    if getattr(task, "monitor_needs_full_pass", False) and monitor and limit not in (None, 1.0) and limit != 0:
        raise ConfigError(f"trainer.limit_val_batches={limit} stops validation before the whole dev set is scored, "
                          f"and the checkpoint monitor {monitor} is computed only on a full pass, so no best "
                          "checkpoint could be chosen; drop trainer.limit_val_batches, or keep it and set "
                          "callbacks.checkpoint.monitor=null (last.ckpt only).")


def build_rank_zero() -> bool:
    """The launching process (Lightning's DDP children and torchrun ranks > 0 leave the run dir to rank 0)."""
    from genlab.runs import global_rank

    return global_rank() == 0


def _check_devices(cfg: DictConfig) -> None:
    devices, accelerator = cfg.trainer.get("devices"), str(cfg.trainer.get("accelerator"))
    cpus = os.cpu_count() or 1
    if accelerator == "cpu" or (accelerator == "auto" and not _has_gpu()):
        if isinstance(devices, int) and devices > cpus:
            log.warning("trainer.devices=%d processes on a CPU machine with %d cores: oversubscribed, each process "
                        "gets less than a core and training is slower than with trainer.devices=%d", devices, cpus,
                        cpus)


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def _fit(cfg: DictConfig, trainer: pl.Trainer, task: pl.LightningModule, datamodule: pl.LightningDataModule,
         ckpt: str | None) -> None:
    try:
        trainer.fit(task, datamodule=datamodule, ckpt_path=ckpt, weights_only=True)  # never code from a file
    except OSError as err:
        disk = run_dir.disk_error(err)
        if disk is None:
            raise
        raise run_dir.RunDirError(f"writing into {output_dir(cfg)} failed ({disk.strerror or disk}); the "
                                  "checkpoints written before are intact (each is written to a temporary file "
                                  "and renamed). Free the disk or fix its permissions, then resume with "
                                  "ckpt_path=last.") from err
    except ValueError as err:  # Lightning checks the interval against the epoch only once the data loader exists
        if "val_check_interval" not in str(err):
            raise
        raise ConfigError(
            f"trainer.val_check_interval={cfg.trainer.get('val_check_interval')} counts batches within one epoch "
            f"(trainer.check_val_every_n_epoch={cfg.trainer.get('check_val_every_n_epoch')}), and one epoch of this "
            "data has fewer; set trainer.check_val_every_n_epoch=null to count optimiser steps across epochs, or a "
            "smaller trainer.val_check_interval.") from err


def _summary(cfg: DictConfig, metrics: dict[str, float], out: Path, best: str) -> None:
    print_summary(f"{cfg.name} finished", metrics, out, best)


def main(cfg: DictConfig) -> float:
    out, fitting = output_dir(cfg), []
    fresh = build_rank_zero() and run_dir.is_fresh(out)  # nothing in it yet but Hydra's start-up files

    def record_failure(err: BaseException) -> None:
        user_error = find_user_error(err)
        if not in_multirun() and (isinstance(user_error, ConfigError) or (user_error and not fitting)):
            # stopped before training: a new run dir goes, an existing run's records stay as they were
            if fresh and run_dir.remove_unused(out, Path(cfg.paths.log_dir)):
                log.info("removed the run dir %s: the run stopped before training", out)
            return
        write_final_metrics(out, {}, status="failed", error=f"{type(err).__name__}: {err}")

    def run() -> float:
        try:
            return train(cfg, on_fit=lambda: fitting.append(True))
        except TrainingInterrupted as stop:
            write_final_metrics(out, {}, status="interrupted", error=str(stop))
            print(f"interrupted: {stop}", file=sys.stderr, flush=True)
            sys.exit(128 + stop.signum)
        except RuntimeError as err:  # torch.save's writer reports a full disk as a RuntimeError
            disk = run_dir.disk_error(err)
            if disk is None:
                raise
            raise run_dir.RunDirError(f"writing into {out} failed ({disk.strerror or disk}); the "
                                      "checkpoints written before are intact. Free the disk, then resume with "
                                      "ckpt_path=last.") from err

    return guarded(run, record_failure)
