"""Reduce a sweep over an evaluation setting to its best value: the "PPL best" / "Attn Len" columns of the TXL
ablations (Yang thesis Tables 2.6 and 2.8), from one ``eval.py -m ... eval.mem_len=...`` sweep per checkpoint.

``record_evaluation`` makes each evaluation a run folder the report reads (the training run's experiment, config and
overrides, plus the ``eval.*`` overrides and the results); ``reduce_best`` turns the runs that differ only in the
swept key into one run holding the best metric and the shortest setting that reaches it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from genlab.report.collect import ReportError, RunResult
from genlab.report.table import _sort_key
from genlab.runs import CONFIG_FILE, METRICS_FILE, RUN_FILE, read_json, write_json
from genlab.utils import atomic_write

MODES = ("min", "max")


def best_key(over: str) -> str:
    """The metric name under which a reduced run stores the swept setting that reached the best value."""
    return f"best/{over}"


def reduce_best(runs: list[RunResult], over: str, metric: str, mode: str = "min", tol: float = 0.0) -> list[RunResult]:
    """One run per group of runs equal in every override but ``over``: its ``metric`` is the best over ``over`` and
    ``best/<over>`` the smallest value of ``over`` within ``tol`` of that best ("the shortest possible attention
    length to achieve PPL best"). A group whose runs all failed stays as one failed run."""
    if mode not in MODES:
        raise ReportError(f"--best-mode {mode!r} is not one of {MODES}")
    groups: dict[tuple, list[RunResult]] = {}
    for r in runs:
        if r.value_of(over) is None:
            raise ReportError(f"--best-over {over}: run {r.dir} does not set it; pass the sweep over {over} only")
        key = (r.experiment, tuple(sorted((k, v) for k, v in r.overrides.items() if k != over)))
        groups.setdefault(key, []).append(r)
    out = []
    for members in groups.values():
        scored = [(r.metric(metric), r) for r in members if r.status == "finished" and r.metric(metric) is not None]
        first = members[0]
        reduced = RunResult(dir=first.dir, experiment=first.experiment,
                            overrides={k: v for k, v in first.overrides.items() if k != over},
                            status="finished" if scored else "failed", metrics={}, monitor=metric)
        reduced._config = {k: v for k, v in first.config.items() if k != over}
        if scored:
            sign = 1.0 if mode == "min" else -1.0
            best = min(sign * v for v, _ in scored) * sign
            reached = [r for v, r in scored if sign * (v - best) <= tol]
            shortest = min(reached, key=lambda r: _sort_key(str(r.value_of(over))))
            reduced.metrics = {metric: best, best_key(over): _as_number(shortest.value_of(over))}
        out.append(reduced)
    return out


def _as_number(text: str | None) -> float:
    try:
        return float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError) as e:
        raise ReportError(f"--best-over needs a numeric setting; got {text!r}") from e


def record_evaluation(cfg: DictConfig, run_config: Mapping[str, Any], results: Mapping[str, float],
                      training_dir: str | Path | None) -> Path:
    """Write eval.py's output folder as a run the report collects: config.yaml = the trained run's config plus this
    evaluation's ``eval`` node; run.json = the training run's experiment and overrides plus the evaluation's own;
    metrics.json = the results. Returns the folder."""
    from hydra.core.hydra_config import HydraConfig

    out = Path(cfg.paths.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    trained = read_json(Path(training_dir) / RUN_FILE) if training_dir else {}
    own = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    own = [o for o in own if o.split("=", 1)[0].lstrip("+~").startswith(("eval.", "mode", "data"))]
    config = OmegaConf.create(dict(run_config))
    config.eval = OmegaConf.to_container(cfg.get("eval") or {}, resolve=True)
    with atomic_write(out / CONFIG_FILE, "w") as f:
        f.write(OmegaConf.to_yaml(config, resolve=False))
    info = {"experiment": trained.get("experiment") or run_config.get("name"), "job": "eval",
            "overrides": list(trained.get("overrides", [])) + own, "checkpoint": str(cfg.ckpt_path),
            "training_dir": str(training_dir) if training_dir else None}
    if HydraConfig.initialized():
        hc = HydraConfig.get()
        mode = str(OmegaConf.select(hc, "mode", default=None))
        info["hydra"] = {"mode": mode}
        if mode.endswith("MULTIRUN"):  # job.num and sweep.dir exist (and resolve) only then
            info["hydra"].update(job_num=hc.job.num, sweep_dir=str(hc.sweep.dir))
    write_json(out / RUN_FILE, info)
    finite = {k: float(v) for k, v in results.items() if math.isfinite(float(v))}
    write_json(out / METRICS_FILE, {"status": "finished", "metrics": finite, "monitor": None})
    return out
