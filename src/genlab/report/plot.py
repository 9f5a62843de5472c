"""Plot a table: a line per column value when the row key is numeric (e.g. memory length), else grouped bars."""

from __future__ import annotations

import math
from pathlib import Path

from genlab.report.table import Table, _sort_key


def _numeric(values: list[tuple[str, ...]]) -> bool:
    return all(len(v) == 1 and _sort_key(v[0])[0] == 0 for v in values)


def plot_table(table: Table, path: str | Path, with_reference: bool = False) -> Path:
    """Write a PNG of the table: centre = mean (or median), error bars = std over seeds, x marks = the paper."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, ax = plt.subplots(figsize=(max(5.0, 0.9 * len(table.rows) * max(1, len(table.cols)) ** 0.5 + 3), 3.6))
    median = table.aggregate == "median"
    numeric = _numeric(table.rows) and len(table.rows) > 1
    width = 0.8 / max(1, len(table.cols))
    for j, col in enumerate(table.cols):
        xs, ys, errs, refs = [], [], [], []
        for i, row in enumerate(table.rows):
            c = table.cell(row, col)
            x = float(row[0]) if numeric else i + (j - (len(table.cols) - 1) / 2) * width
            if c is not None and c.values:
                xs.append(x)
                ys.append(c.median if median else c.mean)
                errs.append(0.0 if median else c.std)
            if with_reference and c is not None and c.reference is not None:
                refs.append((x, c.reference))
        label = ", ".join(f"{k}={v}" for k, v in zip(table.col_keys, col)) or table.metric
        if numeric:
            line = ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3, label=label)
            color = line[0].get_color()
        else:
            bars = ax.bar(xs, ys, width=width, yerr=errs, capsize=3, label=label)
            color = bars.patches[0].get_facecolor() if bars.patches else None
        if refs:
            ax.scatter(*zip(*refs), marker="x", color=color, zorder=3, label=f"{label} (paper)")
    if not numeric:
        ax.set_xticks(range(len(table.rows)), [", ".join(r) for r in table.rows], rotation=20, ha="right")
    ax.set_xlabel(", ".join(table.row_keys))
    ax.set_ylabel(table.metric + (" (median)" if median else ""))
    ys_all = [v for c in table.cells.values() for v in c.values]
    if ys_all and min(ys_all) > 0 and max(ys_all) / min(ys_all) > 50:
        ax.set_yscale("log")  # perplexities across very different settings
    ax.grid(alpha=0.3)
    if len(table.cols) > 1 or with_reference:
        ax.legend(fontsize=8)
    ax.set_title(table.experiment or "", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_run_curves(run_dir: str | Path, out: str | Path | None = None) -> Path | None:
    """Loss, learning-rate and throughput curves of one run from its CSV log (csv/metrics.csv) into a PNG."""
    import csv

    run_dir = Path(run_dir)
    logs = sorted(run_dir.glob("csv/**/metrics.csv"))
    if not logs:
        return None
    series: dict[str, list[tuple[float, float]]] = {}
    with open(logs[-1]) as f:
        for rec in csv.DictReader(f):
            step = rec.get("step")
            if not step:
                continue
            for k, v in rec.items():
                if k in ("step", "epoch") or not v:
                    continue
                try:
                    val = float(v)
                except ValueError:
                    continue
                if math.isfinite(val):
                    series.setdefault(k, []).append((float(step), val))
    panels = [
        ("loss", [k for k in series if k.endswith("loss") or k.endswith("/ppl") or k.endswith("/bpc")]),
        ("learning rate", [k for k in series if k.startswith("lr")]),
        ("throughput", [k for k in series if "per_sec" in k or "throughput" in k or "mfu" in k.lower()]),
    ]
    panels = [(t, ks) for t, ks in panels if ks]
    if not panels:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.2), squeeze=False)
    for ax, (title, keys) in zip(axes[0], panels):
        for k in keys:
            ax.plot(*zip(*series[k]), label=k, marker="." if len(series[k]) < 20 else None)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    out = Path(out) if out else run_dir / "curves.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
