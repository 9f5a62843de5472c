"""``genlab-report --wandb``: log a built table (as a ``wandb.Table``) and its plot into the sweep's W&B group.

The group is the one genlab's logger gave the training runs (``<experiment>-<sweep dir>`` for a multirun), so the
table sits beside the runs it summarises. Offline unless logged in, like training: the offline run folder then
holds the table (``wandb sync`` uploads it).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from genlab.report.collect import ReportError, RunResult
from genlab.report.table import Table, to_csv


def sweep_group(runs: list[RunResult]) -> str:
    """The one W&B group of the runs a table was built from (refuses runs of several groups)."""
    from genlab.callbacks.wandb import training_group

    groups = sorted({g for g in (training_group(r.dir) for r in runs) if g})
    if len(groups) != 1:
        found = ", ".join(groups) or "none (no run.json/config.yaml with an experiment name)"
        raise ReportError(f"--wandb logs into the runs' W&B group, but they have {found}; pass --wandb-group <group>")
    return groups[0]


def table_rows(table: Table) -> tuple[list[str], list[list]]:
    """The long-format table (one row per cell, numbers unrounded) as W&B columns and rows."""
    lines = list(csv.reader(io.StringIO(to_csv(table))))
    numeric = {"mean", "std", "median", "n", "failed", "reference"}
    header, rows = lines[0], []
    for line in lines[1:]:
        rows.append([(float(v) if v != "" else None) if k in numeric else v for k, v in zip(header, line)])
    return header, rows


def log_table(table: Table, name: str, group: str, project: str, out_dir: str | Path, plot: Path | None,
              markdown: str, mode: str = "auto") -> str:
    """One W&B run of job type ``report`` in ``group`` holding the table (key ``name``), its plot and the Markdown;
    returns the run's local folder."""
    import wandb

    from genlab.callbacks.wandb import resolve_mode

    if wandb.run is not None:
        wandb.run.finish()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    entity, _, project = project.rpartition("/")
    run = wandb.init(entity=entity or None, project=project, group=group, job_type="report", name=f"report-{name}", dir=str(out_dir),
                     mode=resolve_mode(mode), config={"metric": table.metric, "rows": table.row_keys,
                                                      "cols": table.col_keys, "aggregate": table.aggregate},
                     settings=wandb.Settings(init_timeout=120, silent=True))
    columns, rows = table_rows(table)
    payload = {name: wandb.Table(columns=columns, data=rows), f"{name}_markdown": wandb.Html(f"<pre>{markdown}</pre>")}
    if plot is not None and plot.exists():
        payload[f"{name}_plot"] = wandb.Image(str(plot))
    run.log(payload)
    folder = str(Path(run.dir).parent)
    run.finish()
    return folder
