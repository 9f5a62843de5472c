"""curves.png: loss and perplexity on separate axes, the task's own metrics, MFU within 0-1, every validation point
(also across a resume's second CSV log), at a readable size."""

from __future__ import annotations

import os

from genlab.report.plot import (
    curve_panels,
    plot_run_curves,
    plot_run_curves_safely,
    read_run_series,
    shown_values,
)


def _write_csv(path, header, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(",".join(header) + "\n" + "\n".join(",".join(str(v) for v in r) for r in rows) + "\n")


def test_panels_separate_loss_perplexity_task_metrics_and_mfu():
    keys = ["train/loss", "valid/loss", "valid/ppl", "valid/acc", "test/f1", "train/kl", "lr-Adam",
            "perf/tokens_per_sec", "perf/mfu", "perf/peak_mem_mb"]
    panels = dict(curve_panels(keys))
    assert panels["loss"] == ["train/loss", "valid/loss"]
    assert panels["perplexity / bits per character"] == ["valid/ppl"]
    assert panels["task metrics"] == ["test/f1", "train/kl", "valid/acc"]
    assert panels["MFU (model FLOPs utilisation)"] == ["perf/mfu"]
    assert "perf/mfu" not in panels["throughput"]


def test_every_validation_point_across_resumed_logs_and_mfu_capped(tmp_path):
    header = ["epoch", "step", "train/loss", "valid/acc", "perf/mfu"]
    _write_csv(tmp_path / "csv" / "metrics.csv", header,
               [[0, s, 1.0 / s, "" if s % 20 else 0.5, 3.0] for s in range(1, 201)])
    _write_csv(tmp_path / "csv" / "version_1" / "metrics.csv", header,
               [[0, s, 1.0 / s, "" if s % 20 else 0.6, 0.4] for s in range(201, 429)])
    series = read_run_series(tmp_path)
    assert [s for s, _ in series["valid/acc"]] == [float(s) for s in range(20, 429, 20)]  # all 21 points
    out = plot_run_curves(tmp_path)
    import matplotlib.image

    height, width = matplotlib.image.imread(out).shape[:2]
    assert width >= 1400 and height >= 500  # three panels of 720x540 px


def test_mfu_is_never_shown_above_one():
    assert max(shown_values("MFU (model FLOPs utilisation)", [0.2, 3.0])) == 1.0
    assert shown_values("loss", [3.0]) == [3.0]


def test_hydra_callback_redraws_only_a_stale_plot(tmp_path):
    """train.py's summary draws curves.png; the Hydra callback then skips it unless a log is newer (a trial that
    died before the summary, or one resumed since), and a plot that cannot be drawn never raises."""
    log = tmp_path / "csv" / "metrics.csv"
    _write_csv(log, ["epoch", "step", "train/loss"], [[0, s, 1.0 / s] for s in range(1, 5)])
    png = tmp_path / "curves.png"
    png.write_bytes(b"drawn by the summary")
    os.utime(log, ns=(1_000, 1_000))
    plot_run_curves_safely(tmp_path, only_if_stale=True)
    assert png.read_bytes() == b"drawn by the summary"
    os.utime(png, ns=(500, 500))  # the log moved on since
    plot_run_curves_safely(tmp_path, only_if_stale=True)
    assert png.read_bytes().startswith(b"\x89PNG")
    (tmp_path / "csv" / "version_1").mkdir()
    (tmp_path / "csv" / "version_1" / "metrics.csv").write_text("step,train/loss\n1,oops,2\n")
    plot_run_curves_safely(tmp_path)  # a malformed row: skipped or warned, never raised
