"""Hydra callback for runs and sweeps: record every trial's outcome, close its W&B run, plot its curves
(``curves.png``), and keep ``multirun_summary.json/md`` in the sweep dir.

Registered in conf/hydra/default.yaml as ``hydra.callbacks.sweep_summary``. The summary is rewritten after each
trial, so an interrupted sweep still has one; trials that raised past train.py's own handler, or returned a
non-finite objective without writing metrics.json, are recorded as failed here.

``MultirunDDPGuard`` (``hydra.callbacks.multirun_ddp_guard``) refuses, before any trial, a multirun whose trials
would start their extra DDP/FSDP processes by re-running the script: Lightning's script launcher re-runs the whole
command line, so each extra process would run the whole sweep again and join later trials as a stray rank.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from genlab.cli.errors import USER_ERROR_EXIT
from genlab.errors import ConfigError
from genlab.report.plot import plot_run_curves_safely
from genlab.runs import METRICS_FILE, global_rank, read_json, write_final_metrics

log = logging.getLogger("genlab")


def _objective_failed(job_return: JobReturn) -> str | None:
    """Why a trial failed, from Hydra's view of it (None if it looks fine)."""
    if job_return.status == JobStatus.FAILED:
        err = job_return._return_value
        return f"{type(err).__name__}: {err}"
    try:
        value = float(job_return.return_value)
    except (TypeError, ValueError):
        return None
    return None if math.isfinite(value) else f"objective is {value}"


def _sweep_dir(config: DictConfig, output_dir: Path) -> Path:
    """The trial's sweep dir: its output dir minus the resolved subdir (re-resolving ``${now:}`` could differ)."""
    try:
        subdir = Path(str(OmegaConf.select(config, "hydra.sweep.subdir")))
    except Exception:  # an interpolation that only resolved inside the job
        return output_dir.parent
    if output_dir.parts[-len(subdir.parts):] == subdir.parts:
        return Path(*output_dir.parts[: -len(subdir.parts)])
    return output_dir.parent


class SweepSummary(Callback):
    def __init__(self) -> None:
        self.sweep_dir: str | None = None  # as the trials saw it (re-resolving ${now:} later could differ)

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        if global_rank() != 0 or job_return.hydra_cfg is None:
            return
        hc = job_return.hydra_cfg.hydra
        out = Path(hc.runtime.output_dir)
        failure = _objective_failed(job_return)
        status = read_json(out / METRICS_FILE).get("status")
        if failure and status is None:
            write_final_metrics(out, {}, status="failed", error=failure)
            status = "failed"
        from genlab.callbacks.wandb import finish_wandb

        finish_wandb(exit_code=1 if (failure or status == "failed") else 0)
        plot_run_curves_safely(out, only_if_stale=True)  # trials that died before train.py's summary
        if str(hc.mode).endswith("MULTIRUN"):
            self.sweep_dir = str(_sweep_dir(config, out))
            self._write(self.sweep_dir)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if global_rank() != 0:
            return
        sweep_dir = self.sweep_dir or str(OmegaConf.select(config, "hydra.sweep.dir"))
        summary = self._write(sweep_dir)
        if summary is not None:
            log.info(
                "sweep done: %d trials, %d finished, %d failed -> %s",
                summary["n_trials"], summary["n_finished"], summary["n_failed"],
                Path(sweep_dir) / "multirun_summary.md",
            )

    @staticmethod
    def _write(sweep_dir: str) -> dict[str, Any] | None:
        from genlab.report.collect import write_multirun_summary

        try:
            return write_multirun_summary(sweep_dir)
        except Exception as e:  # a summary must never take the sweep down
            log.warning("could not write the sweep summary in %s: %s", sweep_dir, e)
            return None


# Strategies whose processes Lightning starts by spawning/forking the trial function, not by re-running the script.
_IN_PROCESS_STARTS = ("spawn", "fork", "forkserver")
_STRING_STRATEGIES_IN_PROCESS = ("ddp_spawn", "ddp_fork", "ddp_notebook", "ddp_find_unused_parameters_false_spawn")


def _local_processes(trainer: DictConfig) -> int:
    """Processes one trial starts on this machine: trainer.devices, or what "auto"/-1 finds."""
    devices = trainer.get("devices", "auto")
    if OmegaConf.is_list(devices):
        return len(devices)
    if isinstance(devices, str) and devices.strip().isdigit():
        devices = int(devices)
    if isinstance(devices, int) and devices > 0:
        return devices
    if str(trainer.get("accelerator", "auto")) == "cpu":
        return 1
    import torch

    return max(1, torch.cuda.device_count())


def script_relaunching_strategy(config: DictConfig) -> str | None:
    """Name of the trial's strategy if Lightning would start its extra processes by re-running the script."""
    trainer = OmegaConf.select(config, "trainer")
    if trainer is None or _local_processes(trainer) * int(trainer.get("num_nodes", 1) or 1) <= 1:
        return None
    strategy = trainer.get("strategy", "auto")
    if isinstance(strategy, str):
        return None if strategy in _STRING_STRATEGIES_IN_PROCESS else strategy  # "auto" on >1 device is ddp
    if str(strategy.get("start_method", "popen")) in _IN_PROCESS_STARTS:
        return None
    return str(strategy.get("_target_", "?")).rsplit(".", 1)[-1]


def _processes_started_outside() -> bool:
    """torchrun or srun started every rank: Lightning then launches nothing itself."""
    return any(k in os.environ for k in ("TORCHELASTIC_RUN_ID", "RANK")) or int(os.environ.get("SLURM_NTASKS", 1)) > 1


class MultirunDDPGuard(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        launcher = str(OmegaConf.select(config, "hydra.launcher._target_", default=""))
        if launcher.endswith("SlurmLauncher") or _processes_started_outside():
            return  # srun starts one task per device; Lightning's SLURM environment launches nothing
        name = script_relaunching_strategy(config)
        if name is not None:
            err = ConfigError(
                f"strategy {name} with trainer.devices={OmegaConf.select(config, 'trainer.devices')} in a multirun: "
                "Lightning would start the extra processes by re-running this command, i.e. the whole sweep again in "
                "each. Use strategy=ddp_spawn for sweeps on one machine, or launcher=slurm (srun starts them)."
            )
            # Hydra turns a callback's exception into a warning and goes on; only an exit stops the sweep.
            print(f"error: {err}", file=sys.stderr, flush=True)
            raise SystemExit(USER_ERROR_EXIT)
