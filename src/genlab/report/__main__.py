"""``genlab-report`` / ``python -m genlab.report``: build an ablation table from sweep directories or a W&B group.

Examples:
    python -m genlab.report outputs/txl_ptb_mini/multirun_2026-* --rows model.mem_len --cols model.n_layer
    python -m genlab.report outputs/... --reference experiments/txl_ablation/reference.yaml   # keys from the YAML
    python -m genlab.report --summary outputs/txl_ptb_mini/multirun_2026-*   # (re)write multirun_summary.*
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from genlab.report.collect import ReportError, RunResult, collect_runs, write_multirun_summary
from genlab.report.plot import plot_table
from genlab.report.table import (
    AGGREGATES,
    attach_reference,
    build_table,
    load_reference,
    table_files,
    to_csv,
    to_markdown,
)
from genlab.utils import atomic_write


def _keys(text: str | None) -> list[str] | None:
    return None if text is None else [k.strip() for k in text.split(",") if k.strip()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="genlab-report", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("paths", nargs="*", help="run or sweep directories (searched recursively)")
    p.add_argument("--rows", help="comma-separated config keys for the rows (e.g. model.mem_len)")
    p.add_argument("--cols", help="comma-separated config keys for the columns")
    p.add_argument("--metric", help="metric to tabulate (default: the runs' monitor, or the reference's metric)")
    p.add_argument("--agg", choices=AGGREGATES, help="aggregate seeds as mean ± std (default) or median")
    p.add_argument("--experiment", help="keep only this experiment's runs")
    p.add_argument("--seed-key", default="seed", help="the key that varies across repeats (default: seed)")
    p.add_argument("--reference", help="reference.yaml with the paper's numbers (and default rows/cols/metric)")
    p.add_argument("--out", help="output folder (default: the reference's folder, else the first path)")
    p.add_argument("--name", default="table", help="output file stem (default: table -> table.md/.csv/.tex/.png)")
    p.add_argument("--precision", type=int, help="decimals (default 2, or the reference's)")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG")
    p.add_argument("--summary", action="store_true", help="only write multirun_summary.json/md in each path")
    p.add_argument("--wandb-group", help="read runs of this W&B group instead of directories (needs login)")
    p.add_argument("--wandb-project", default="genlab", help="W&B project (entity/project) for --wandb-group")
    p.add_argument("--best-over", help="reduce the runs that differ only in this key (e.g. eval.mem_len of an eval.py -m\n"
                   "sweep) to the best metric; also writes <name>_best_at.* with the shortest setting reaching it")
    p.add_argument("--best-mode", default="min", choices=("min", "max"), help="best = smallest (default) or largest")
    p.add_argument("--best-tol", type=float, default=0.0, help="settings within this of the best count as reaching it")
    p.add_argument("--wandb", action="store_true",
                   help="also log the table (wandb.Table) and its plot into the runs' W&B group (offline unless\n"
                        "logged in; the group is --wandb-group, else the one the training runs logged into)")
    return p.parse_args(argv)


def collect_wandb(project: str, group: str) -> list[RunResult]:
    """Runs of one W&B group as RunResults (config is the flat config our logger stores; tags carry overrides)."""
    from genlab.callbacks.wandb import MAX_TAG_LEN, is_logged_in

    if not is_logged_in():
        raise ReportError("--wandb-group needs a W&B login (`wandb login`); or pass the local sweep directories")
    import wandb

    states = {"finished": "finished", "failed": "failed", "crashed": "failed", "killed": "failed"}
    out = []
    for run in wandb.Api(timeout=60).runs(project, filters={"group": group}):
        # A tag at W&B's length limit may have been cut: its value then comes from the flat config instead.
        tags = [t.split("=", 1) for t in run.tags if "=" in t and len(t) < MAX_TAG_LEN]
        overrides = {k: v for k, v in tags if k != "experiment"}
        summary = {k: v for k, v in run.summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        r = RunResult(
            dir=Path(run.path[-1] if isinstance(run.path, list) else str(run.id)),
            experiment=dict(tags).get("experiment"),
            overrides=overrides,
            status=states.get(run.state, "incomplete"),
            metrics={k: float(v) for k, v in summary.items()},
            monitor=run.config.get("task.monitor"),
        )
        r._config = dict(run.config)
        out.append(r)
    if not out:
        raise ReportError(
            f"W&B group {group!r} in project {project!r} has no runs; check the group name (<experiment>-<sweep dir "
            "name>) and --wandb-project <entity>/<project>"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return _run(args)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.summary:
        if not args.paths:
            raise ReportError("--summary needs the sweep directories")
        for p in args.paths:
            s = write_multirun_summary(p)
            print(f"{p}: {s['n_trials']} trials, {s['n_finished']} finished, {s['n_failed']} failed "
                  f"-> {Path(p) / 'multirun_summary.md'}")
        return 0
    ref = load_reference(args.reference) if args.reference else {}
    if args.wandb_group:
        runs = collect_wandb(args.wandb_project, args.wandb_group)
    elif args.paths:
        runs = collect_runs(args.paths)
    else:
        raise ReportError("pass sweep/run directories, or --wandb-group <group>")
    metric = args.metric or ref.get("metric")
    if args.best_over:
        from genlab.report.best_of import reduce_best

        if not metric:
            raise ReportError("--best-over needs --metric (or a reference's metric) to pick the best by")
        runs = reduce_best(runs, args.best_over, metric, args.best_mode, args.best_tol)
    rows = _keys(args.rows) if args.rows is not None else list(ref.get("rows", []))
    cols = _keys(args.cols) if args.cols is not None else list(ref.get("cols", []))
    table = build_table(
        runs,
        rows=rows,
        cols=cols,
        metric=metric,
        aggregate=args.agg or ref.get("aggregate", "mean_std"),
        experiment=args.experiment or ref.get("experiment"),
        seed_key=args.seed_key,
    )
    with_ref = bool(ref)
    if with_ref and attach_reference(table, ref) == 0:
        table.notes.append(f"no reference value of {args.reference} matched a cell (check its keys and values)")
    precision = args.precision if args.precision is not None else int(ref.get("precision", 2))
    out = Path(args.out) if args.out else (Path(args.reference).parent if args.reference else Path(args.paths[0]))
    files = table_files(table, args.name, precision, with_ref, ref.get("title"))
    md = files[f"{args.name}.md"]
    if args.best_over:
        from genlab.report.best_of import best_key

        at = build_table(runs, rows=rows, cols=cols, metric=best_key(args.best_over), aggregate="median",
                         experiment=args.experiment or ref.get("experiment"), seed_key=args.seed_key)
        files[f"{args.name}_best_at.md"] = f"Setting of {args.best_over} reaching {metric}'s best\n\n" + to_markdown(at, 0)
        files[f"{args.name}_best_at.csv"] = to_csv(at)
    for name, text in files.items():
        with atomic_write(out / name, "w") as f:
            f.write(text)
    if not args.no_plot:
        plot_table(table, out / f"{args.name}.png", with_ref)
    if args.wandb:
        from genlab.report.wandb_log import log_table, sweep_group

        group = args.wandb_group or sweep_group(runs)
        plot = None if args.no_plot else out / f"{args.name}.png"
        # The W&B run folder goes beside the runs (the sweep), not into experiments/<table>/.
        folder = log_table(table, args.name, group, args.wandb_project, Path(args.paths[0]) if args.paths else out,
                           plot, md)
        print(f"logged {args.name} to W&B group {group} ({folder})")
    print(md)
    print(f"wrote {', '.join(str(out / n) for n in files)}" + ("" if args.no_plot else f", {out / args.name}.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
