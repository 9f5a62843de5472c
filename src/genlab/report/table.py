"""Runs -> an ablation table: rows and columns are chosen config keys, cells aggregate the seeds of one setting."""

from __future__ import annotations

import csv
import io
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from genlab.report.collect import ReportError, RunResult

AGGREGATES = ("mean_std", "median")


@dataclass
class Cell:
    values: list[float]  # finite metric values of the finished runs (one per seed)
    failed: int = 0  # runs of this setting that failed or did not finish
    reference: float | None = None  # the paper's number

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values) if self.values else math.nan

    @property
    def std(self) -> float:
        # Sample standard deviation over seeds (ddof=1), the usual "mean +- std over n seeds".
        return statistics.stdev(self.values) if len(self.values) > 1 else 0.0

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else math.nan


@dataclass
class Table:
    metric: str
    aggregate: str
    row_keys: list[str]
    col_keys: list[str]
    rows: list[tuple[str, ...]]
    cols: list[tuple[str, ...]]
    cells: dict[tuple[tuple[str, ...], tuple[str, ...]], Cell]
    experiment: str | None = None
    n_runs: int = 0
    n_failed: int = 0
    notes: list[str] = field(default_factory=list)

    def cell(self, row: tuple[str, ...], col: tuple[str, ...]) -> Cell | None:
        return self.cells.get((row, col))


def _sort_key(value: str) -> tuple[int, float, str]:
    """Numbers in numeric order, then text; so mem_len 50 < 100 < 200 in the table."""
    try:
        return (0, float(value), value)
    except ValueError:
        return (1, 0.0, value)


def check_experiments(runs: list[RunResult], experiment: str | None, keys: list[str]) -> list[RunResult]:
    """Keep one experiment's runs; refuse a mix unless `experiment` is itself a row/column key."""
    if experiment is not None:
        runs = [r for r in runs if r.experiment == experiment]
        if not runs:
            raise ReportError(f"no runs of experiment {experiment!r}; check --experiment against the run directories")
        return runs
    names = sorted({str(r.experiment) for r in runs})
    if len(names) > 1 and "experiment" not in keys:
        raise ReportError(
            f"the runs mix experiments {names}; pass --experiment <name> to pick one, "
            "or add `experiment` to --rows/--cols to compare them in one table"
        )
    return runs


def build_table(
    runs: list[RunResult],
    rows: list[str],
    cols: list[str] | None = None,
    metric: str | None = None,
    aggregate: str = "mean_std",
    experiment: str | None = None,
    seed_key: str = "seed",
) -> Table:
    """Group finished runs by the values of the ``rows`` and ``cols`` keys and aggregate ``metric`` over seeds.

    ``metric`` defaults to the runs' monitor. A key may be any override or config key (dotted), or ``experiment``.
    """
    cols = list(cols or [])
    aggregate = _aggregate(aggregate)
    if aggregate not in AGGREGATES:
        raise ReportError(f"--agg {aggregate!r} is not one of {AGGREGATES}")
    if not runs:
        raise ReportError("no run directories found (no run.json / metrics.json / .hydra under the given paths)")
    runs = check_experiments(runs, experiment, rows + cols)
    finished = [r for r in runs if r.status == "finished"]
    if not finished:
        statuses = {s: sum(r.status == s for r in runs) for s in sorted({r.status for r in runs})}
        raise ReportError(f"no finished runs among {len(runs)} ({statuses}); wait for the sweep or check its errors")
    if not rows and not cols:
        raise ReportError("choose at least one key for --rows or --cols (e.g. --rows model.mem_len)")
    for key in rows + cols:
        if key == seed_key:
            raise ReportError(f"{seed_key!r} is aggregated over; do not use it as a row or column key")
        if not any(r.has_key(key) for r in finished):
            known = sorted({k for r in finished[:1] for k in (*r.overrides, *r.config)})
            raise ReportError(f"key {key!r} is in no run's overrides or config; known keys include {known[:30]}")
    if metric is None:
        monitors = sorted({r.monitor for r in finished if r.monitor})
        if len(monitors) != 1:
            raise ReportError(f"the runs monitor {monitors or 'nothing'}; pass --metric <name> (e.g. test/ppl)")
        metric = monitors[0]
    if not any(metric in r.metrics for r in finished):
        known = sorted({k for r in finished for k in r.metrics})
        raise ReportError(f"metric {metric!r} is in no finished run's metrics.json; available: {known}")

    cells: dict[tuple[tuple[str, ...], tuple[str, ...]], Cell] = {}
    for r in runs:
        # A key a run's config lacks reads as null, as an entry of reference.yaml that leaves it out (or sets null).
        row = tuple(_as_key(r.value_of(k)) for k in rows)
        col = tuple(_as_key(r.value_of(k)) for k in cols)
        cell = cells.setdefault((row, col), Cell([]))
        value = r.metric(metric) if r.status == "finished" else None
        if value is None:
            cell.failed += 1
        else:
            cell.values.append(value)
    table = Table(
        metric=metric,
        aggregate=aggregate,
        row_keys=rows,
        col_keys=cols,
        rows=sorted({k[0] for k in cells}, key=lambda t: [_sort_key(v) for v in t]),
        cols=sorted({k[1] for k in cells}, key=lambda t: [_sort_key(v) for v in t]),
        cells=cells,
        experiment=experiment or (runs[0].experiment if len({r.experiment for r in runs}) == 1 else None),
        n_runs=len(runs),
        n_failed=sum(c.failed for c in cells.values()),
    )
    _note_seed_counts(table)
    return table


def _note_seed_counts(table: Table) -> None:
    counts = sorted({c.n for c in table.cells.values()})
    if len(counts) > 1:
        table.notes.append(f"cells aggregate different numbers of seeds ({counts}); see n in the CSV")
    if table.n_failed:
        table.notes.append(f"{table.n_failed} failed or unfinished run(s) left out of the aggregates")


# ---- reference numbers -------------------------------------------------------------------------------------------


LAYOUT = "a mapping with `rows:`/`cols:` (lists of keys) and a `values:` list of {<key>: <value>, ..., value: <number>}"


def load_reference(path: str | Path) -> dict[str, Any]:
    """Read an experiments/<table>/reference.yaml (see experiments/README.md for the format), checking its layout:
    `values` is a list (empty when the paper has no comparable number) whose entries carry a number and every
    row/column key, so each one can match a cell."""
    path = Path(path)
    try:
        ref = yaml.safe_load(path.read_text())
    except FileNotFoundError as e:
        raise ReportError(f"reference file {path} does not exist; fix --reference") from e
    except yaml.YAMLError as e:
        raise ReportError(f"{path} is not valid YAML: {e}") from e
    if not isinstance(ref, dict) or not isinstance(ref.get("values"), list):
        raise ReportError(f"{path}: no `values:` list; expected {LAYOUT} (see experiments/README.md)")
    keys = []
    for name in ("rows", "cols"):
        ks = ref.get(name, [])
        if not isinstance(ks, list) or not all(isinstance(k, str) for k in ks):
            raise ReportError(f"{path}: `{name}:` must be a list of config keys, got {ks!r}")
        keys += ks
    if not keys and ref["values"]:
        raise ReportError(f"{path}: set `rows:` (and/or `cols:`) to the keys that select each entry of `values:`")
    if ref.get("aggregate") is not None and _aggregate(ref["aggregate"]) not in AGGREGATES:
        raise ReportError(f"{path}: aggregate {ref['aggregate']!r} is not one of {AGGREGATES}")
    for i, entry in enumerate(ref["values"]):
        if not isinstance(entry, dict):
            raise ReportError(f"{path}: values[{i}] is {entry!r}; expected {{<key>: <value>, ..., value: <number>}}")
        v = entry.get("value")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ReportError(f"{path}: values[{i}] needs a numeric `value:` (got {v!r})")
        missing = [k for k in keys if k not in entry]
        if missing:
            raise ReportError(f"{path}: values[{i}] does not name {missing}; give every row/column key "
                              "(null where a run's config lacks it)")
    return ref


def _aggregate(name: str) -> str:
    return {"mean": "mean_std", "mean+-std": "mean_std"}.get(name, name)


def attach_reference(table: Table, reference: dict[str, Any]) -> int:
    """Put the paper's number in each matching cell; returns how many reference entries matched a cell."""
    matched = 0
    for entry in reference.get("values", []):
        if "value" not in entry:
            raise ReportError(f"reference entry {entry} has no `value:`")
        row = tuple(_as_key(entry.get(k)) for k in table.row_keys)
        col = tuple(_as_key(entry.get(k)) for k in table.col_keys)
        cell = table.cells.get((row, col))
        if cell is not None:
            cell.reference = float(entry["value"])
            matched += 1
    return matched


def _as_key(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    return "null" if v is None else str(v)


# ---- rendering ---------------------------------------------------------------------------------------------------


def format_cell(cell: Cell | None, aggregate: str, precision: int, with_reference: bool, pm: str = "±") -> str:
    if cell is None:
        return ""
    if not cell.values:
        text = "failed" if cell.failed else ""
    elif aggregate == "median":
        text = f"{cell.median:.{precision}f}"
    elif cell.n == 1:
        text = f"{cell.mean:.{precision}f}"
    else:
        text = f"{cell.mean:.{precision}f} {pm} {cell.std:.{precision}f}"
    if with_reference and cell.reference is not None:
        text += f" ({cell.reference:.{precision}f})"
    return text


def _grid(table: Table, precision: int, with_reference: bool, pm: str) -> tuple[list[str], list[list[str]]]:
    rkey = ", ".join(table.row_keys) or ""
    if table.col_keys:
        header = [rkey] + [", ".join(f"{k}={v}" for k, v in zip(table.col_keys, c)) for c in table.cols]
    else:
        header = [rkey, table.metric]
    body = []
    for row in table.rows:
        cells = [format_cell(table.cell(row, col), table.aggregate, precision, with_reference, pm) for col in table.cols]
        body.append([", ".join(row)] + cells)
    return header, body


def _caption(table: Table, with_reference: bool) -> str:
    agg = "mean ± std over seeds" if table.aggregate == "mean_std" else "median over seeds"
    cols = f"; columns: {', '.join(table.col_keys)}" if table.col_keys else ""
    ref = "; paper's value in parentheses" if with_reference else ""
    return f"{table.metric} ({agg}) of {table.experiment or 'runs'}; rows: {', '.join(table.row_keys)}{cols}{ref}."


def to_markdown(table: Table, precision: int = 2, with_reference: bool = False) -> str:
    header, body = _grid(table, precision, with_reference, "±")
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    lines = [_caption(table, with_reference), ""]
    lines.append("| " + " | ".join(map(esc, header)) + " |")
    lines.append("|" + "|".join("---" for _ in header) + "|")
    lines += ["| " + " | ".join(map(esc, r)) + " |" for r in body]
    lines += [""] + [f"Note: {n}." for n in table.notes]
    return "\n".join(lines).rstrip() + "\n"


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def _tex(s: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in s)


def to_latex(table: Table, precision: int = 2, with_reference: bool = False) -> str:
    header, body = _grid(table, precision, with_reference, "PLUSMINUS")
    fix = lambda s: _tex(s).replace("PLUSMINUS", r"$\pm$")  # noqa: E731
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        r"\begin{tabular}{l" + "c" * (len(header) - 1) + "}",
        r"\toprule",
        " & ".join(fix(h) for h in header) + r" \\",
        r"\midrule",
        *[" & ".join(fix(c) for c in row) + r" \\" for row in body],
        r"\bottomrule",
        r"\end{tabular}",
        r"\caption{" + _tex(_caption(table, with_reference)).replace("±", r"$\pm$") + "}",
        r"\end{table}",
    ]
    return "\n".join(lines) + "\n"


def to_csv(table: Table) -> str:
    """Long format, one line per cell, numbers unrounded: easy to load back into pandas."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*table.row_keys, *table.col_keys, "metric", "mean", "std", "median", "n", "failed", "reference"])
    for row in table.rows:
        for col in table.cols:
            c = table.cell(row, col)
            if c is None:
                continue
            nums = [c.mean, c.std, c.median] if c.values else ["", "", ""]
            ref = "" if c.reference is None else c.reference
            w.writerow([*row, *col, table.metric, *nums, c.n, c.failed, ref])
    return buf.getvalue()


def table_files(table: Table, name: str, precision: int = 2, with_reference: bool = False,
                title: str | None = None) -> dict[str, str]:
    """``<name>.md`` (under ``# title`` when given), ``.csv`` and ``.tex`` of a table, by file name."""
    md = to_markdown(table, precision, with_reference)
    return {f"{name}.md": f"# {title}\n\n{md}" if title else md, f"{name}.csv": to_csv(table),
            f"{name}.tex": to_latex(table, precision, with_reference)}
