"""Run directories as machine-readable records: what ran (config, overrides, code, environment) and how it ended.

Layout of one run directory (written by the train entry point through these functions):
    config.yaml      resolved config            overrides.yaml   the Hydra task overrides of this run/trial
    run.json         experiment, git commit, environment, monitor, W&B run id, sweep position
    spiece.model     pretraining runs: the SentencePiece model of their data (see ``keep_tokenizer``)
    metrics.json     status (finished|failed|interrupted), final metrics, monitor value, best checkpoint, error
    checkpoints/     Lightning checkpoints (best + last)
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from genlab.errors import CheckpointError, UserError
from genlab.utils import atomic_write

CONFIG_FILE = "config.yaml"
OVERRIDES_FILE = "overrides.yaml"
RUN_FILE = "run.json"
METRICS_FILE = "metrics.json"
WANDB_ID_FILE = "wandb_id"
STATUSES = ("finished", "failed", "interrupted")  # interrupted: stopped by a signal, resumable


def _process_group() -> Any:
    """torch.distributed when this process is in an initialised group (e.g. a ddp_spawn worker), else None."""
    dist = sys.modules.get("torch.distributed")  # never import torch just to learn the rank
    return dist if dist is not None and dist.is_available() and dist.is_initialized() else None


def global_rank() -> int:
    """Rank of this process: from its process group, else from the launcher's environment (torchrun, Lightning DDP
    children, SLURM). Spawned workers (strategy=ddp_spawn) have a group but none of these variables."""
    dist = _process_group()
    if dist is not None:
        return dist.get_rank()
    for key in ("RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        if key in os.environ:
            return int(os.environ[key])
    # Lightning's subprocess DDP launcher sets LOCAL_RANK/NODE_RANK in the children only.
    return int(os.environ.get("LOCAL_RANK", 0)) + int(os.environ.get("NODE_RANK", 0))


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except json.JSONDecodeError as e:
        raise UserError(f"{path} is not valid JSON ({e}); delete it or restore it from the run directory") from e


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    # allow_nan=False keeps the files strict JSON; non-finite floats are stored as null by _finite().
    with atomic_write(path, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True, allow_nan=False)
        f.write("\n")


def _finite(x: Any) -> float | None:
    x = float(x.item() if hasattr(x, "item") else x)
    return x if math.isfinite(x) else None


def _hydra_config() -> DictConfig | None:
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get() if HydraConfig.initialized() else None


def _git_state(start: Path) -> dict[str, Any]:
    """Commit and dirty flag of the repository holding the code (not the cwd, which a user may change)."""

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=start, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    # Untracked files do not change what ran; modified tracked files do.
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status)}


def _world_size(cfg: DictConfig) -> int | None:
    """Processes of the run: from the group or launcher when already started, else what the trainer config asks for
    (the entry point records the run before Lightning spawns its workers). None when the config leaves it open."""
    dist = _process_group()
    if dist is not None:
        return dist.get_world_size()
    if "WORLD_SIZE" in os.environ:
        return int(os.environ["WORLD_SIZE"])
    devices = OmegaConf.select(cfg, "trainer.devices", default=1)
    nodes = OmegaConf.select(cfg, "trainer.num_nodes", default=1) or 1
    if isinstance(devices, str) and devices.strip().isdigit():
        devices = int(devices)
    if OmegaConf.is_list(devices) or isinstance(devices, (list, tuple)):
        devices = len(devices)
    if isinstance(devices, int) and not isinstance(devices, bool) and devices > 0 and isinstance(nodes, int):
        return devices * nodes
    return None  # "auto" or -1: decided by the hardware when the Trainer starts


def _environment() -> dict[str, Any]:
    import importlib.metadata as md

    import torch

    versions = {"python": platform.python_version()}
    for pkg in ("torch", "pytorch-lightning", "hydra-core", "omegaconf", "torchmetrics", "wandb", "numpy", "genlab"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    if torch.cuda.is_available():
        device = {"type": "cuda", "count": torch.cuda.device_count(), "name": torch.cuda.get_device_name(0)}
    elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        device = {"type": "mps", "count": 1, "name": "mps"}
    else:
        device = {"type": "cpu", "count": os.cpu_count(), "name": platform.processor() or platform.machine()}
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "argv": sys.argv,
        "versions": versions,
        "device": device,
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
    }


def _experiment_name(cfg: DictConfig, hydra_cfg: DictConfig | None) -> str | None:
    if hydra_cfg is not None:
        choice = OmegaConf.select(hydra_cfg, "runtime.choices.experiment")
        if choice:
            return str(choice)
    try:
        name = OmegaConf.select(cfg, "name")
    except Exception:  # an unresolvable interpolation outside Hydra
        name = None
    return None if name is None else str(name)


def _to_yaml(cfg: DictConfig) -> str:
    try:
        return OmegaConf.to_yaml(cfg, resolve=True)
    except Exception:
        # Outside a Hydra app `${hydra:...}` cannot resolve; keep the config as written rather than lose it.
        return OmegaConf.to_yaml(cfg, resolve=False)


def write_run_metadata(cfg: DictConfig, output_dir: str | Path) -> None:
    """Write config.yaml, overrides.yaml and run.json into ``output_dir`` (rank 0 only, atomically).

    A resumed run keeps its first start time and W&B run id; each resume is appended to ``resumed_at``.
    """
    if global_rank() != 0:
        return
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    hydra_cfg = _hydra_config()
    overrides = list(hydra_cfg.overrides.task) if hydra_cfg is not None else []

    with atomic_write(out / CONFIG_FILE, "w") as f:
        f.write(_to_yaml(cfg))
    with atomic_write(out / OVERRIDES_FILE, "w") as f:
        f.write(OmegaConf.to_yaml(OmegaConf.create(overrides)))

    previous = read_json(out / RUN_FILE)
    info: dict[str, Any] = {
        "experiment": _experiment_name(cfg, hydra_cfg),
        "overrides": overrides,
        "output_dir": str(out.resolve()),
        "start_time": previous.get("start_time", _now()),
        "resumed_at": previous.get("resumed_at", []) + ([_now()] if previous else []),
        "git": _git_state(Path(__file__).resolve().parent),
        "seed": OmegaConf.select(cfg, "seed", default=None),
        "monitor": OmegaConf.select(cfg, "task.monitor", default=None),
        "monitor_mode": OmegaConf.select(cfg, "task.monitor_mode", default=None),
        "wandb_id": previous.get("wandb_id") or _read_wandb_id(out),
        "model_overrides": previous.get("model_overrides"),
        **_environment(),
        "world_size": _world_size(cfg),
    }
    if hydra_cfg is not None:
        info["hydra"] = {
            "mode": str(OmegaConf.select(hydra_cfg, "mode", default=None)),
            "job_num": OmegaConf.select(hydra_cfg, "job.num", default=None),
            "override_dirname": OmegaConf.select(hydra_cfg, "job.override_dirname", default=None),
            "sweep_dir": OmegaConf.select(hydra_cfg, "sweep.dir", default=None),
        }
    write_json(out / RUN_FILE, info)


def keep_tokenizer(datamodule: Any, output_dir: str | Path) -> None:
    """Copy the data's tokenizer model into the run folder (rank 0, atomically) when the data module names one, so
    a checkpoint of the run can be finetuned with ``data.tokenizer=<its .ckpt>`` even when the run trained its own
    SentencePiece into the cache (``genlab.data.tokenizers.from_checkpoint.recorded_tokenizer`` finds it there)."""
    from genlab.data.tokenizers.from_checkpoint import RUN_TOKENIZER

    source = datamodule.sentencepiece_model() if hasattr(datamodule, "sentencepiece_model") else None
    target = Path(output_dir) / RUN_TOKENIZER
    if global_rank() != 0 or source is None or (target.is_file() and target.read_bytes() == source.read_bytes()):
        return
    with atomic_write(target) as f:
        f.write(source.read_bytes())


def update_run_info(output_dir: str | Path, **fields: Any) -> None:
    """Merge fields into run.json (e.g. ``wandb_id``, or ``model_overrides`` known only after data setup)."""
    if global_rank() != 0:
        return
    path = Path(output_dir) / RUN_FILE
    info = read_json(path)
    info.update(fields)
    write_json(path, info)


def _read_wandb_id(out: Path) -> str | None:
    p = out / WANDB_ID_FILE
    return (p.read_text().strip() or None) if p.exists() else None


def write_final_metrics(
    output_dir: str | Path,
    metrics: Mapping[str, float],
    status: str,
    error: str | None = None,
) -> None:
    """Write metrics.json: status, final metrics, the monitor metric and the best checkpoint.

    A run that "finished" with a non-finite monitor value (NaN loss) is recorded as failed, so a sweep summary and
    a report never average it in.
    """
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    if global_rank() != 0:
        return
    out = Path(output_dir)
    info = read_json(out / RUN_FILE)
    clean = {str(k): _finite(v) for k, v in metrics.items()}
    monitor = info.get("monitor")
    value = clean.get(monitor) if monitor else None
    if status == "finished" and monitor and monitor in metrics and value is None:
        status, error = "failed", error or f"monitor metric {monitor} is not finite ({metrics[monitor]})"
    best = find_best_checkpoint(out)
    write_json(
        out / METRICS_FILE,
        {
            "status": status,
            "error": error,
            "metrics": clean,
            "monitor": monitor,
            "monitor_mode": info.get("monitor_mode"),
            "monitor_value": value,
            "best_checkpoint": str(best) if best else None,
            "end_time": _now(),
        },
    )


def find_best_checkpoint(run_dir: str | Path) -> Path | None:
    """Best checkpoint of a run: the single non-`last` file, else the one last.ckpt's ModelCheckpoint points to."""
    ckdir = Path(run_dir) / "checkpoints"
    if not ckdir.is_dir():
        return None
    ckpts = sorted(ckdir.glob("*.ckpt"))
    last = [p for p in ckpts if p.stem.startswith("last")]
    others = [p for p in ckpts if p not in last]
    if len(others) == 1:
        return others[0]
    if last:
        best = _best_from_state(last[-1])
        if best is not None and best.exists():
            return best
        if best is not None and (ckdir / best.name).exists():  # run directory was moved
            return ckdir / best.name
    if others:  # several kept (save_top_k > 1) and no state to tell: the newest
        return max(others, key=lambda p: p.stat().st_mtime)
    return last[-1] if last else None


def _best_from_state(ckpt: Path) -> Path | None:
    from genlab import checkpoints

    try:
        state = checkpoints.load(ckpt, mmap=True)
    except CheckpointError:
        return None
    for key, value in state.get("callbacks", {}).items():
        if "ModelCheckpoint" in str(key) and isinstance(value, dict) and value.get("best_model_path"):
            return Path(value["best_model_path"])
    return None


@dataclass
class Run:
    """A finished (or failed) run loaded from its directory; see :func:`load_run`."""

    dir: Path
    config: DictConfig
    overrides: list[str]
    info: dict[str, Any]
    status: str | None
    metrics: dict[str, float | None]
    best_checkpoint: Path | None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def experiment(self) -> str | None:
        return self.info.get("experiment")

    def model_overrides(self) -> dict[str, Any]:
        """Model args known only from the data (vocab size ...): from run.json, else by setting up the data."""
        if self.info.get("model_overrides") is not None:
            return dict(self.info["model_overrides"])
        if OmegaConf.select(self.config, "data") is None:
            return {}
        from genlab import assemble

        return assemble.data_sizes(assemble.build_data(self.config.data))

    def load_task(self, checkpoint: str | Path | None = None, map_location: str = "cpu"):
        """Instantiate the task from the run's config, as train.py built it, and load the best (or the given)
        checkpoint, in eval mode."""
        from genlab import assemble, checkpoints

        ckpt = Path(checkpoint) if checkpoint else self.best_checkpoint
        if ckpt is None or not ckpt.exists():
            raise CheckpointError(f"{self.dir}: no checkpoint found under checkpoints/; pass checkpoint=<path>")
        task = assemble.build_task(self.config, sizes=self.model_overrides())
        state = checkpoints.load(ckpt, map_location=map_location)
        try:
            task.load_state_dict(state["state_dict"])
        except (KeyError, RuntimeError) as e:
            raise CheckpointError(f"{ckpt} does not fit the model built from {self.dir / CONFIG_FILE}: {e}") from e
        task.on_load_checkpoint(state)  # task-held state (e.g. LM memories) saved beside the weights
        return task.eval()


def load_run(run_dir: str | Path, trust_config: bool = False) -> Run:
    """Load a run directory in one call: config, overrides, run info, final metrics and best checkpoint.

    The analysis scripts build the run's data, model and task from its ``config.yaml``, a file the user passes: unless
    ``trust_config``, every ``_target_`` there must be one genlab builds from a checkpoint's record (classes of genlab,
    torch.nn, torch.optim and Lightning, genlab's factories), so a copied run dir cannot name ``os.system``. Pass
    ``trust_config=True`` for a run whose config you wrote with classes of your own."""
    from genlab import checkpoints

    d = Path(run_dir).expanduser()
    if not (d / CONFIG_FILE).exists():
        raise UserError(f"{d} is not a genlab run directory (no {CONFIG_FILE}); pass the directory of one run")
    config = OmegaConf.load(d / CONFIG_FILE)
    if not trust_config:
        recorded = OmegaConf.to_container(config)
        checkpoints.check_targets({k: recorded.get(k) for k in checkpoints.REBUILT}, d / CONFIG_FILE,
                                  fix="load_run(dir, trust_config=True) builds a config you wrote")
    m = read_json(d / METRICS_FILE)
    best = m.get("best_checkpoint")
    best_path = Path(best) if best else None
    if best_path is not None and not best_path.exists() and (d / "checkpoints" / best_path.name).exists():
        best_path = d / "checkpoints" / best_path.name  # the run directory was moved or copied
    if best_path is None or not best_path.exists():
        best_path = find_best_checkpoint(d)
    ov = OmegaConf.load(d / OVERRIDES_FILE) if (d / OVERRIDES_FILE).exists() else []
    return Run(
        dir=d,
        config=config,
        overrides=[str(o) for o in ov],
        info=read_json(d / RUN_FILE),
        status=m.get("status"),
        metrics=m.get("metrics", {}),
        best_checkpoint=best_path,
        error=m.get("error"),
    )


def flatten_dict(d: Mapping[str, Any], sep: str = ".", prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists stay values so they show as one column."""
    flat: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{sep}{k}" if prefix else str(k)
        if isinstance(v, Mapping) and v:
            flat.update(flatten_dict(v, sep, key))
        else:
            flat[key] = v
    return flat
