"""Plot a table: a line per column value when the row key is numeric (e.g. memory length), else grouped bars."""

from __future__ import annotations

import logging
import math
from pathlib import Path

from genlab.report.table import Table, _sort_key

log = logging.getLogger("genlab")


def _numeric(values: list[tuple[str, ...]]) -> bool:
    return all(len(v) == 1 and _sort_key(v[0])[0] == 0 for v in values)


def plot_table(table: Table, path: str | Path, with_reference: bool = False) -> Path:
    """Write a PNG of the table: centre = mean (or median), error bars = std over seeds, x marks = the paper."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, ax = plt.subplots(figsize=(max(7.0, 0.9 * len(table.rows) * max(1, len(table.cols)) ** 0.5 + 4), 5.0))
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
        ax.legend(fontsize=9)
    ax.set_title(table.experiment or "", fontsize=12)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def read_run_series(run_dir: str | Path) -> dict[str, list[tuple[float, float]]]:
    """Every logged scalar of a run by step, from all its CSV logs (a resumed run adds csv/version_N/), in order;
    a step logged twice (the same step re-run after a resume) keeps its latest value."""
    import csv

    series: dict[str, dict[float, float]] = {}
    logs = sorted(Path(run_dir).glob("csv/**/metrics.csv"), key=lambda p: (len(p.parts), str(p)))
    for log in logs:
        with open(log) as f:
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
                        series.setdefault(k, {})[float(step)] = val
    return {k: sorted(points.items()) for k, points in series.items()}


def _is_perf(key: str) -> bool:
    return key.startswith(("perf/", "lr")) or "per_sec" in key or "throughput" in key or "mfu" in key.lower()


def curve_panels(keys: list[str]) -> list[tuple[str, list[str]]]:
    """Which logged keys share axes: losses; perplexity/bpc (hundreds would flatten a loss); the task's own metrics
    (accuracy, error, F1, KL ...); learning rate; throughput; MFU (a fraction, on its own 0-1 axis)."""
    loss = [k for k in keys if k.endswith("loss")]
    ppl = [k for k in keys if k.endswith(("/ppl", "/bpc"))]
    mfu = [k for k in keys if "mfu" in k.lower()]
    lr = [k for k in keys if k.startswith("lr")]
    speed = [k for k in keys if _is_perf(k) and k not in mfu and k not in lr and "mem" not in k]
    task = [k for k in keys if k not in loss + ppl and not _is_perf(k)]
    panels = [("loss", loss), ("perplexity / bits per character", ppl), ("task metrics", task),
              ("learning rate", lr), ("throughput", speed), ("MFU (model FLOPs utilisation)", mfu)]
    return [(title, sorted(ks)) for title, ks in panels if ks]


def shown_values(panel: str, values: tuple[float, ...] | list[float]) -> list[float]:
    """MFU is a fraction of the device's peak: above 1 means the peak was mis-measured (a shared CPU's timed GEMM),
    not a faster model, so the plot caps it at 1."""
    return [min(v, 1.0) for v in values] if panel.startswith("MFU") else list(values)


def plot_run_curves(run_dir: str | Path, out: str | Path | None = None) -> Path | None:
    """curves.png of one run from its CSV logs: one panel per kind of quantity (see :func:`curve_panels`), every
    logged point (sparse series such as validation get markers), at a size readable without zooming."""
    run_dir = Path(run_dir)
    series = read_run_series(run_dir)
    panels = curve_panels(list(series))
    if not panels:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.0 * cols, 4.5 * rows), squeeze=False)
    for ax, (title, keys) in zip(axes.flat, panels):
        for k in keys:
            steps, values = zip(*series[k])
            values = shown_values(title, values)
            ax.plot(steps, values, label=k, marker="o" if len(steps) < 50 else None, markersize=4)
        if title.startswith("MFU"):
            ax.set_ylim(0, 1)
        elif title.startswith("perplexity"):
            low = min(v for k in keys for _, v in series[k])
            high = max(v for k in keys for _, v in series[k])
            if low > 0 and high / low > 10:
                ax.set_yscale("log")
        ax.set_title(title, fontsize=12)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=9)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    out = Path(out) if out else run_dir / "curves.png"
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def plot_run_curves_safely(run_dir: str | Path, only_if_stale: bool = False) -> None:
    """curves.png of a finished run; a plot never fails a run. ``only_if_stale``: skip when curves.png is already
    newer than every CSV log (train.py's summary drew it moments ago; the Hydra callback would draw it again)."""
    run_dir = Path(run_dir)
    png = run_dir / "curves.png"
    if only_if_stale and png.exists():
        logs = list(run_dir.glob("csv/**/metrics.csv"))
        if all(p.stat().st_mtime_ns <= png.stat().st_mtime_ns for p in logs):
            return
    try:
        plot_run_curves(run_dir)
    except Exception as err:  # noqa: BLE001
        log.warning("could not plot the curves of %s: %s", run_dir, err)
