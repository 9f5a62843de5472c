"""Instantiate the parts of a run from a composed config, in the one order every system follows:
data -> model (with sizes only the data knows) -> task (``genlab.assemble``, shared with ``genlab.runs``) ->
callbacks, loggers -> trainer, with the checks that span sections (accumulation, data parallelism, precision)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf, open_dict
from pytorch_lightning.callbacks import LearningRateMonitor, ModelSummary, ProgressBar

# Data, model and task are built below the CLI (runs.Run.load_task rebuilds them too); the entry points and the
# scripts reach the whole build sequence through this module.
from genlab.callbacks.epoch_resume import ResumeAtEpochBoundary
from genlab.errors import CheckpointError, ConfigError
from genlab.parallel import accumulation_steps, check_strategy_device, check_trainer_precision, world_size

log = logging.getLogger("genlab")


def build_callbacks(cfg: DictConfig) -> list[pl.Callback]:
    nodes = cfg.get("callbacks") or {}
    callbacks = [instantiate(node) for node in nodes.values() if node is not None]
    # Lightning refuses a progress bar it was told not to show, and an LR monitor with nothing to log to.
    if not cfg.trainer.get("enable_progress_bar", True):
        callbacks = [cb for cb in callbacks if not isinstance(cb, ProgressBar)]
    if not cfg.get("logger"):
        callbacks = [cb for cb in callbacks if not isinstance(cb, LearningRateMonitor)]
    # Lightning's own default is Rich's table, printed to the console whenever rich is installed; the plain one
    # goes to Lightning's logger (quiet unless GENLAB_VERBOSE=1): genlab logs a one-line model summary itself.
    if cfg.trainer.get("enable_model_summary", True) and not any(isinstance(cb, ModelSummary) for cb in callbacks):
        callbacks.append(ModelSummary())
    # not a config node: resuming an epoch-end checkpoint exactly is a correctness fix, not an option
    callbacks.append(ResumeAtEpochBoundary())
    return callbacks


def build_loggers(cfg: DictConfig) -> list[Any]:
    nodes = cfg.get("logger") or {}
    loggers = [instantiate(node) for node in nodes.values() if node is not None]
    return [lg for lg in loggers if lg is not None]


def accumulate_grad_batches(cfg: DictConfig) -> int:
    """``trainer.accumulate_grad_batches``, derived from ``data.global_batch`` when that is set.

    ``data.global_batch`` counts samples (sequences; for ordered LM streams, streams per optimiser step, so
    tokens per step = global_batch x data.tgt_len; the LM and pretraining (PLM/DAE/MLM) DataModules split them
    into accumulation chunks with their own memory) over all processes: accumulation = global_batch /
    (data.batch_size x trainer.devices x trainer.num_nodes), so one sweep optimises the same on 1 or 64 devices.
    """
    explicit = int(cfg.trainer.get("accumulate_grad_batches") or 1)
    global_batch = cfg.data.get("global_batch") if cfg.get("data") is not None else None
    if global_batch is None:
        return explicit
    micro = cfg.data.get("batch_size")
    if not isinstance(micro, int):
        raise ConfigError("data.global_batch needs the per-device micro-batch data.batch_size (an integer), which "
                          "this data config does not have; remove data.global_batch and set "
                          "trainer.accumulate_grad_batches instead.")
    world = world_size(cfg.trainer.devices, cfg.trainer.num_nodes, str(cfg.trainer.accelerator))
    steps = accumulation_steps(int(global_batch), micro, world)
    if explicit not in (1, steps):
        raise ConfigError(
            f"data.global_batch={global_batch} sets trainer.accumulate_grad_batches={steps} (= {global_batch} / "
            f"({micro} x {world} processes)), but trainer.accumulate_grad_batches={explicit} is also set; "
            "drop one of the two."
        )
    log.info("data.global_batch=%d = data.batch_size %d x %d processes x trainer.accumulate_grad_batches %d",
             global_batch, micro, world, steps)
    return steps


def data_class(cfg: DictConfig) -> type | None:
    """The DataModule class named by ``data._target_`` (None when the config has no importable one)."""
    target = cfg.data.get("_target_") if cfg.get("data") is not None else None
    try:
        return get_class(target) if target else None
    except Exception:  # noqa: BLE001 - a bad _target_ is reported by instantiate, with Hydra's message
        return None


def check_accumulation(cfg: DictConfig, steps: int) -> None:
    """DataModules whose task accumulates in its own way declare ``accumulation_key`` and refuse the trainer's."""
    own = getattr(data_class(cfg), "accumulation_key", None)
    if steps > 1 and own:
        raise ConfigError(
            f"trainer.accumulate_grad_batches={steps} (from data.global_batch or set directly) is not supported with "
            f"data._target_={cfg.data._target_}: its task optimises manually and accumulates through {own}. "
            f"Remove data.global_batch / trainer.accumulate_grad_batches; set data.batch_size to the per-process "
            f"batch and {own} to the micro-batch instead."
        )


def check_data_parallel(cfg: DictConfig) -> None:
    """DataModules whose steps cannot be split over processes declare ``data_parallel = False`` and are refused
    on more than one, rather than every rank silently training on the same batches."""
    cls = data_class(cfg)
    world = world_size(cfg.trainer.devices, cfg.trainer.num_nodes, str(cfg.trainer.accelerator))
    if world > 1 and not getattr(cls, "data_parallel", True):
        raise ConfigError(
            f"data._target_={cfg.data._target_} runs on one process only (its training steps are not split by "
            f"rank), but trainer.devices x trainer.num_nodes = {world}; set trainer.devices=1 trainer.num_nodes=1."
        )


def distributed_sampler(cfg: DictConfig) -> bool:
    """``trainer.use_distributed_sampler``; when unset (the default) it follows the DataModule: those that split
    their data by rank themselves (``shards_by_rank = True``: ordered LM streams) must not get Lightning's
    DistributedSampler, every other one needs it so that each rank trains on its own share of the batches."""
    explicit = cfg.trainer.get("use_distributed_sampler")
    if explicit is not None:
        return bool(explicit)
    return not getattr(data_class(cfg), "shards_by_rank", False)


def build_trainer(cfg: DictConfig, callbacks: list[pl.Callback], loggers: list[Any]) -> pl.Trainer:
    check_trainer_precision(str(cfg.trainer.precision), str(cfg.trainer.accelerator))
    check_strategy_device(cfg.trainer.get("strategy", "auto"), str(cfg.trainer.accelerator))
    accumulate = accumulate_grad_batches(cfg)
    check_accumulation(cfg, accumulate)
    check_data_parallel(cfg)
    with open_dict(cfg.trainer):  # recorded: the run's config.yaml shows the values actually used
        cfg.trainer.accumulate_grad_batches = accumulate
        cfg.trainer.use_distributed_sampler = distributed_sampler(cfg)
    try:
        return instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False)
    except Exception as err:
        invalid = _misconfiguration(err)
        if invalid is None:
            raise
        raise ConfigError(f"trainer: {invalid} Fix the trainer.* override (e.g. trainer.max_steps=1000).") from err


def _misconfiguration(err: BaseException | None) -> str | None:
    """Lightning's message when the Trainer refused one of its arguments (Hydra wraps it in its own error)."""
    from lightning_fabric.utilities.exceptions import MisconfigurationException

    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, MisconfigurationException):
            return str(err)
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


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
