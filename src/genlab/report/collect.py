"""Find run directories (single runs and sweep trials) and read each one's overrides, config, status and metrics."""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from genlab.errors import UserError
from genlab.runs import CONFIG_FILE, METRICS_FILE, OVERRIDES_FILE, RUN_FILE, flatten_dict, read_json, write_json
from genlab.utils import atomic_write

# Files that mark a directory as one run; Hydra's own .hydra/ copy covers trials that died before we wrote ours.
_MARKERS = (RUN_FILE, METRICS_FILE, ".hydra/overrides.yaml")


class ReportError(UserError):
    """The runs given to a report or summary cannot make the requested table."""


@dataclass
class RunResult:
    dir: Path
    experiment: str | None
    overrides: dict[str, str]
    status: str  # finished | failed | incomplete (no metrics.json: still running, or killed)
    metrics: dict[str, float | None]
    monitor: str | None = None
    monitor_value: float | None = None
    error: str | None = None
    job_num: int | None = None
    _config: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def config(self) -> dict[str, Any]:
        """The run's config flattened to dotted keys (loaded on first use)."""
        if self._config is None:
            for path in (self.dir / CONFIG_FILE, self.dir / ".hydra" / "config.yaml"):
                if path.exists():
                    self._config = flatten_dict(OmegaConf.to_container(OmegaConf.load(path), resolve=False))
                    break
            else:
                self._config = {}
        return self._config

    def value_of(self, key: str) -> str | None:
        """A run's setting as text: its override, else its config value (so defaults group with explicit values)."""
        if key == "experiment":
            return self.experiment
        if key in self.overrides:  # a sweep writes booleans as Python does ("True"); configs and YAML say "true"
            v = self.overrides[key]
            return v.lower() if v in ("True", "False") else v
        if key in self.config:
            return _as_text(self.config[key])
        return None

    def has_key(self, key: str) -> bool:
        return key == "experiment" or key in self.overrides or key in self.config

    def metric(self, name: str) -> float | None:
        v = self.metrics.get(name)
        return v if v is not None and math.isfinite(v) else None


def _as_text(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    return "null" if v is None else str(v)


def parse_overrides(overrides: list[str]) -> dict[str, str]:
    """["+a.b=1", "seed=2"] -> {"a.b": "1", "seed": "2"} (deletions `~key` are ignored)."""
    out = {}
    for o in overrides:
        if "=" not in o or o.startswith("~"):
            continue
        k, v = o.split("=", 1)
        out[k.lstrip("+")] = v
    return out


def find_run_dirs(paths: list[str | Path]) -> list[Path]:
    dirs: set[Path] = set()
    for p in map(Path, paths):
        if not p.exists():
            raise ReportError(f"{p} does not exist; pass run or sweep directories (e.g. outputs/<experiment>/...)")
        for marker in _MARKERS:
            for hit in [p / marker, *p.rglob(marker)]:
                if hit.exists() and "wandb" not in hit.relative_to(p).parts:
                    dirs.add(hit.parent.parent if marker.startswith(".hydra") else hit.parent)
    return sorted(dirs)


def load_result(d: Path) -> RunResult:
    info = read_json(d / RUN_FILE)
    m = read_json(d / METRICS_FILE)
    if "overrides" in info:
        overrides = info["overrides"]
    else:
        src = next((p for p in (d / OVERRIDES_FILE, d / ".hydra" / "overrides.yaml") if p.exists()), None)
        overrides = [str(o) for o in OmegaConf.load(src)] if src else []
    ov = parse_overrides(overrides)
    hydra_file = d / ".hydra" / "hydra.yaml"
    hydra_cfg = OmegaConf.load(hydra_file).hydra if hydra_file.exists() else None
    experiment = info.get("experiment") or ov.get("experiment")
    if experiment is None and hydra_cfg is not None:
        experiment = OmegaConf.select(hydra_cfg, "runtime.choices.experiment", default=None)
    job_num = (info.get("hydra") or {}).get("job_num")
    if job_num is None and hydra_cfg is not None:
        job_num = OmegaConf.select(hydra_cfg, "job.num", default=None)
    return RunResult(
        dir=d,
        experiment=experiment,
        overrides=ov,
        status=m.get("status", "incomplete"),
        metrics=dict(m.get("metrics", {})),
        monitor=m.get("monitor") or info.get("monitor"),
        monitor_value=m.get("monitor_value"),
        error=m.get("error"),
        job_num=job_num,
    )


def collect_runs(paths: list[str | Path]) -> list[RunResult]:
    """Every run under ``paths`` (run directories or sweep directories, searched recursively)."""
    return [load_result(d) for d in find_run_dirs(paths)]


def sweep_keys(runs: list[RunResult]) -> list[str]:
    """Override keys whose value differs between runs: the axes of the sweep."""
    keys: dict[str, set[str]] = {}
    for r in runs:
        for k, v in r.overrides.items():
            keys.setdefault(k, set()).add(v)
    return [k for k, vals in keys.items() if len(vals) > 1 or any(k not in r.overrides for r in runs)]


def write_multirun_summary(sweep_dir: str | Path) -> dict[str, Any]:
    """Write multirun_summary.json and .md in ``sweep_dir``: each trial's overrides, status and metrics."""
    sweep_dir = Path(sweep_dir)
    runs = collect_runs([sweep_dir]) if sweep_dir.exists() else []
    runs.sort(key=lambda r: (r.job_num if r.job_num is not None else 1 << 30, str(r.dir)))
    trials = [
        {
            "dir": str(r.dir.relative_to(sweep_dir)),
            "job_num": r.job_num,
            "overrides": r.overrides,
            "status": r.status,
            "monitor": r.monitor,
            "monitor_value": r.monitor_value,
            "metrics": r.metrics,
            "error": r.error,
        }
        for r in runs
    ]
    counts = {s: sum(t["status"] == s for t in trials) for s in ("finished", "failed", "incomplete")}
    summary = {
        "sweep_dir": str(sweep_dir.resolve()),
        "written": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "n_trials": len(trials),
        **{f"n_{s}": n for s, n in counts.items()},
        "trials": trials,
    }
    write_json(sweep_dir / "multirun_summary.json", summary)
    with atomic_write(sweep_dir / "multirun_summary.md", "w") as f:
        f.write(_summary_markdown(summary))
    return summary


def _summary_markdown(s: dict[str, Any]) -> str:
    lines = [
        f"# Sweep summary: {s['sweep_dir']}",
        "",
        f"{s['n_trials']} trials: {s['n_finished']} finished, {s['n_failed']} failed, {s['n_incomplete']} incomplete.",
        "",
        "| # | overrides | status | monitor | value | error |",
        "|---|---|---|---|---|---|",
    ]
    # Show what varies between trials; the JSON keeps every override.
    values: dict[str, set] = {}
    for t in s["trials"]:
        for k in t["overrides"]:
            values.setdefault(k, set()).add(t["overrides"][k])
    fixed = {k for k, v in values.items() if len(v) == 1 and all(k in t["overrides"] for t in s["trials"])}
    if len(s["trials"]) < 2:
        fixed = set()
    for t in s["trials"]:
        shown = {k: v for k, v in t["overrides"].items() if k != "experiment" and k not in fixed}
        ov = " ".join(f"{k}={v}" for k, v in shown.items()) or "(none)"
        value = "" if t["monitor_value"] is None else f"{t['monitor_value']:.4g}"
        err = (t["error"] or "").replace("|", "\\|").replace("\n", " ")[:120]
        num = "" if t["job_num"] is None else t["job_num"]
        lines.append(f"| {num} | `{ov}` | {t['status']} | {t['monitor'] or ''} | {value} | {err} |")
    return "\n".join(lines) + "\n"
