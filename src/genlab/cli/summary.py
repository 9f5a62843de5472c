"""The summary a run prints last and keeps as summary.txt: its metrics and every file it wrote, read from the run
dir itself, so nothing the run produced (predictions, sample grids, plots) goes unmentioned and nothing is claimed
that is not there."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from genlab.report.plot import plot_run_curves_safely

SUMMARY_FILE = "summary.txt"
# What a new user needs to know about the usual entries of a run dir; anything else is listed by name.
DESCRIPTIONS = {
    "checkpoints": "checkpoints",
    "metrics.json": "final metrics and status",
    "config.yaml": "the resolved config",
    "overrides.yaml": "the command-line overrides",
    "run.json": "run identity (start, resumes, monitor)",
    "csv": "per-step logs (csv/*/metrics.csv)",
    "curves.png": "loss, metric and throughput curves",
    "predictions": "predictions",
    "images": "sample grids",
    "wandb": "offline W&B run (wandb sync to upload)",
    "train.log": "genlab's log lines",
    "eval.log": "genlab's log lines",
    "tokenizer": "the tokenizer the model was trained with",
    SUMMARY_FILE: "this summary",
}
HIDDEN = {"wandb_id"}  # and dot files: .hydra, the run lock, temporary files
MAX_LISTED = 4  # files named inside a folder before "... and N more"


def _checkpoints(folder: Path, best: str | None) -> str:
    names = sorted(p.name for p in folder.iterdir())
    if not names:
        return "(none saved)"
    shown = [f"{Path(best).name} (best)"] if best and Path(best).name in names else []
    shown += [n for n in names if not (best and n == Path(best).name)]
    return ", ".join(shown)


def _entry(path: Path, best: str | None) -> str | None:
    if path.name in HIDDEN or path.name.startswith(".") or (path.is_file() and path.stat().st_size == 0):
        return None
    what = DESCRIPTIONS.get(path.name, "")
    if path.is_dir():
        if path.name == "checkpoints":
            return f"{path.name}/: {_checkpoints(path, best)}"
        if path.name in ("csv", "wandb"):
            return f"{path.name}/: {what}"
        files = sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())
        if not files:
            return None
        more = f" ... and {len(files) - MAX_LISTED} more" if len(files) > MAX_LISTED else ""
        return f"{path.name}/: " + (f"{what}: " if what else "") + ", ".join(files[:MAX_LISTED]) + more
    return f"{path.name}" + (f": {what}" if what else "")


def written_files(out: Path, best: str | None = None) -> list[str]:
    """One line per thing in the run dir (folders with the files they hold)."""
    lines = [_entry(p, best) for p in sorted(Path(out).iterdir())] if Path(out).is_dir() else []
    if not (Path(out) / SUMMARY_FILE).exists():
        lines.append(f"{SUMMARY_FILE}: {DESCRIPTIONS[SUMMARY_FILE]}")
    return [line for line in lines if line]


def format_summary(title: str, metrics: Mapping[str, float], out: Path, best: str | None = None,
                   prefixes: tuple[str, ...] = ("valid/", "test/")) -> str:
    shown = {k: v for k, v in sorted(metrics.items()) if k.startswith(prefixes)}
    lines = [f"{title}"] + [f"{k:>16s} = {v:.4f}" for k, v in shown.items()]
    lines.append(f"{'run dir':>16s} = {out}")
    lines += [f"{'':>16s}   {line}" for line in written_files(out, best)]
    return "\n".join(lines)


def print_summary(title: str, metrics: Mapping[str, float], out: str | Path, best: str | None = None,
                  prefixes: tuple[str, ...] = ("valid/", "test/"), plot: bool = True) -> str:
    """Plot the curves (``plot``), print the summary and keep it as ``summary.txt`` in the run dir."""
    out = Path(out)
    if plot:
        plot_run_curves_safely(out)  # now, so the summary can name curves.png
    text = format_summary(title, metrics, out, best, prefixes)
    (out / SUMMARY_FILE).write_text(text + "\n")
    print("\n" + text, flush=True)
    return text
