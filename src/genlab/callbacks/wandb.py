"""W&B logger factory: offline unless logged in, names from the experiment and sweep, flat config, resumable id.

Referenced by conf/logger/wandb.yaml. Offline runs land in ``<run dir>/wandb/offline-run-*``; upload them later
with ``wandb sync <run dir>/wandb/offline-run-*`` (or ``wandb sync --sync-all`` from the run directory).
"""

from __future__ import annotations

import netrc
import os
import secrets
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from omegaconf import OmegaConf, open_dict
from pytorch_lightning.loggers import WandbLogger
from pytorch_lightning.utilities import rank_zero_only

from genlab.errors import ConfigError
from genlab.runs import CONFIG_FILE, RUN_FILE, WANDB_ID_FILE, flatten_dict, global_rank, read_json, update_run_info

MODES = ("auto", "online", "offline", "disabled")
MAX_TAG_LEN = 64  # W&B rejects longer tags


class FlatWandbLogger(WandbLogger):
    """WandbLogger whose hyperparameters are flattened to dotted keys, so the runs table can pivot on any key.

    The run's resolved config.yaml (written by genlab.runs, possibly after this logger is built) is logged flat
    when the W&B run starts.
    """

    def __init__(self, *args: Any, config_file: str | Path | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Lightning always passes `anonymous` (None when unset); W&B warns on every run that it is deprecated.
        if self._wandb_init.get("anonymous") is None:
            self._wandb_init.pop("anonymous", None)
        self._config_file = Path(config_file) if config_file else None
        self._config_synced = False

    @property
    def experiment(self):  # type: ignore[override]
        exp = WandbLogger.experiment.fget(self)
        if not self._config_synced and self._config_file is not None and self._config_file.exists():
            self._config_synced = True
            flat = flatten_dict(OmegaConf.to_container(OmegaConf.load(self._config_file)))
            exp.config.update(flat, allow_val_change=True)
        return exp

    @rank_zero_only
    def log_hyperparams(self, params: Any) -> None:
        if not isinstance(params, Mapping):
            params = vars(params)
        params = OmegaConf.to_container(params, resolve=True) if OmegaConf.is_config(params) else dict(params)
        super().log_hyperparams(flatten_dict(params))


def is_logged_in() -> bool:
    """True when an API key is available locally (env or netrc). Never touches the network."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    path = Path(os.environ.get("NETRC", Path.home() / ".netrc")).expanduser()
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


def resolve_mode(mode: str) -> str:
    if mode not in MODES:
        raise ConfigError(f"logger.wandb.mode={mode!r} is not one of {MODES}; set e.g. logger.wandb.mode=offline")
    if mode != "auto":
        return mode
    env = os.environ.get("WANDB_MODE")  # an explicit user choice wins over the guess
    if env in ("online", "offline", "disabled"):
        return env
    if env == "dryrun":
        return "offline"
    return "online" if is_logged_in() else "offline"


def sweep_identity(
    group: str, name: str | None, tags: list[str], save_dir: str, sweep_group: bool = True
) -> tuple[str, str, list[str]]:
    """Group/name/tags from the Hydra runtime: one group per multirun (unless ``sweep_group`` is false: an
    evaluation sweep joins its training run's group), trials named and tagged by their overrides."""
    from hydra.core.hydra_config import HydraConfig

    tags = [str(t) for t in tags]
    run_name = name
    if HydraConfig.initialized():
        hc = HydraConfig.get()
        experiment = OmegaConf.select(hc, "runtime.choices.experiment")
        multirun = str(OmegaConf.select(hc, "mode", default="")).endswith("MULTIRUN")
        overrides = [o for o in hc.overrides.task if not o.startswith(("experiment=", "logger"))]
        dirname = OmegaConf.select(hc, "job.override_dirname", default="") or ""
        if experiment:
            tags.append(f"experiment={experiment}")
        if multirun:
            if sweep_group:
                group = f"{group}-{Path(hc.sweep.dir).name}"
            tags.append("multirun")
            if run_name is None:
                run_name = dirname or f"trial{hc.job.num}"
        tags += overrides
    if run_name is None:
        run_name = f"{group}-{Path(save_dir).name}"
    tags = list(dict.fromkeys(t[:MAX_TAG_LEN] for t in tags))  # dedupe, keep order
    return group, run_name, tags


def run_id(save_dir: str) -> tuple[str, bool]:
    """The run's W&B id: reused from ``<save_dir>/wandb_id`` when resuming, else new and stored there (rank 0)."""
    path = Path(save_dir) / WANDB_ID_FILE
    if path.exists() and path.read_text().strip():
        return path.read_text().strip(), True
    # W&B ids are short lowercase alphanumerics; generated here so the id exists before wandb.init.
    new = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
    if global_rank() == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(new + "\n")
        if (Path(save_dir) / RUN_FILE).exists():
            update_run_info(save_dir, wandb_id=new)
    return new, False


def make_wandb_logger(
    project: str,
    group: str,
    name: str | None,
    tags: list[str],
    save_dir: str,
    mode: str = "auto",
    job_type: str = "train",
    sweep_group: bool = True,
) -> WandbLogger | None:
    """Build the W&B logger for this run, or None when ``mode`` is disabled. See the module docstring."""
    mode = resolve_mode(mode)
    if mode == "disabled":
        return None
    import wandb

    # A previous trial of an in-process multirun may have left its run open; never log into it.
    if wandb.run is not None:
        wandb.run.finish()
    group, run_name, tags = sweep_identity(group, name, list(tags or []), save_dir, sweep_group)
    rid, resuming = run_id(save_dir)
    return FlatWandbLogger(
        project=project,
        group=group,
        name=run_name,
        tags=tags,
        save_dir=save_dir,
        id=rid,
        resume="allow" if resuming else None,
        mode=mode,
        config_file=Path(save_dir) / CONFIG_FILE,
        job_type=job_type,
        settings=wandb.Settings(init_timeout=120, silent=True),
    )


def finish_wandb(exit_code: int = 0) -> None:
    """Close the current W&B run (call at the end of each trial; exit_code 1 marks a failed trial)."""
    import sys

    wandb = sys.modules.get("wandb")
    if wandb is not None and wandb.run is not None:
        wandb.run.finish(exit_code=exit_code)


def training_group(run_dir: str | Path) -> str | None:
    """The W&B group genlab's logger gave the training run in ``run_dir`` (``<name>``, or ``<name>-<sweep dir>``
    for a multirun trial), read back from its config.yaml and run.json; None when the folder is no run."""
    info = read_json(Path(run_dir) / RUN_FILE)
    if info.get("job") == "eval" and info.get("training_dir"):  # an eval.py record logs into its training group
        return training_group(info["training_dir"])
    config = Path(run_dir) / CONFIG_FILE
    name = OmegaConf.select(OmegaConf.load(config), "name", default=None) if config.exists() else None
    name = name or info.get("experiment")
    if not name:
        return None
    hydra = info.get("hydra") or {}
    if str(hydra.get("mode", "")).endswith("MULTIRUN") and hydra.get("sweep_dir"):
        return f"{name}-{Path(hydra['sweep_dir']).name}"
    return str(name)


def run_dir_of_checkpoint(ckpt_path: str | Path) -> Path | None:
    """The run folder holding a checkpoint (``<run>/checkpoints/last.ckpt``): the nearest parent with run.json."""
    for parent in Path(ckpt_path).resolve().parents:
        if (parent / RUN_FILE).exists():
            return parent
    return None


def join_training_group(cfg: Any, ckpt_path: str) -> None:
    """Make ``eval.py``'s W&B logger (when ``logger=wandb``) log beside the checkpoint's training runs: same group
    (an evaluation multirun does not open a group of its own), job type ``eval``. Edits ``cfg.logger`` in place."""
    node = OmegaConf.select(cfg, "logger.wandb", default=None)
    if node is None:
        return
    run_dir = run_dir_of_checkpoint(ckpt_path)
    group = training_group(run_dir) if run_dir is not None else None
    with open_dict(cfg):
        if group is not None:
            node.group = group
        node.job_type = "eval"
        node.sweep_group = False


def log_summary(results: Mapping[str, float]) -> None:
    """Put final numbers (an evaluation's results) into the open W&B run's summary and close the run."""
    import sys

    wandb = sys.modules.get("wandb")
    if wandb is not None and wandb.run is not None:
        wandb.run.summary.update(dict(results))
        wandb.run.finish()
