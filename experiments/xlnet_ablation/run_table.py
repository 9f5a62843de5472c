"""XLNet ablation table ([XLNet v1 Table 6]), pretraining to table in one command.

For each ablation row: pretrain the row's preset (``python train.py``), then finetune its ``checkpoints/last.ckpt``
on RACE, SQuAD 2.0, MNLI and SST-2 (one ``train.py -m`` sweep over the four presets and the seeds, on the
checkpoint's own tokenizer), then build the table with genlab.report: rows = the ablation rows, columns = the
finetuned scores (median over the finetuning seeds, as the paper), the paper's number in parentheses.

    python experiments/xlnet_ablation/run_table.py --out outputs/xlnet_ablation_mini            # mini, all rows
    python experiments/xlnet_ablation/run_table.py --scale full --out /runs/ablation \\
        --pretrain-overrides "data.path=/data/bookswiki trainer.devices=8" --finetune-overrides "..."

Stages whose run directory already holds a finished result are skipped (an interrupted pretraining continues from
its last.ckpt), so the same command resumes, and run again it only rebuilds the table. Row 1 (BERT) finetunes with
the BERT presets (``bert_<task>``), rows 2-8 with the XLNet ones (``xlnet_<task>``), on the row's own model config.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from genlab.report import ReportError, Table, build_table, collect_runs, table_files
from genlab.report.plot import plot_table
from genlab.report.table import Cell
from genlab.runs import read_json
from genlab.utils import atomic_write

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
REFERENCE = HERE / "reference.yaml"
TASKS = ("race", "squad2", "mnli", "sst2")
SUFFIX = {"mini": "_mini", "midi": "_midi", "full": ""}  # preset name suffix of each --scale


@dataclass(frozen=True)
class Column:
    label: str  # the table's header, also the paper column of reference.yaml
    task: str
    metric: str  # in the finetuning run's metrics.json
    scale: float  # to percent, as the paper prints


COLUMNS = (
    Column("RACE", "race", "test/acc", 100.0),
    Column("SQuAD2.0_F1", "squad2", "test/best_f1", 1.0),  # F1/EM at the no-answer threshold searched on dev
    Column("SQuAD2.0_EM", "squad2", "test/best_exact", 1.0),
    Column("MNLI_m", "mnli", "test/acc", 100.0),
    Column("MNLI_mm", "mnli", "test/mm/acc", 100.0),
    Column("SST-2", "sst2", "test/acc", 100.0),
)


@dataclass(frozen=True)
class Row:
    number: int
    model: str  # the paper's name of the row
    preset: str  # the pretraining preset at this scale
    paper: dict

    @property
    def family(self) -> str:
        """Which finetuning presets read this checkpoint: BERT's for the BERT row, XLNet's for the others (the DAE
        row is an XLNet backbone too)."""
        return "bert" if self.preset.startswith("bert") else "xlnet"

    def finetune_preset(self, task: str, scale: str) -> str:
        return f"{self.family}_{task}" + SUFFIX[scale]

    @property
    def label(self) -> str:
        return f"{self.number} {self.model}"


def usage_error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def load_rows(scale: str) -> list[Row]:
    paper = yaml.safe_load(REFERENCE.read_text())["paper"]["rows"]
    return [Row(r["row"], r["model"], r["experiment"] + SUFFIX[scale], r) for r in paper]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", required=True, help="root of the runs: <out>/row<k>_<preset>/{pretrain,finetune}")
    p.add_argument("--scale", choices=tuple(SUFFIX), default="mini",
                   help="mini: the *_mini presets on the offline minis (default); midi: the *_midi presets (4 x 256\n"
                        "on the Wikipedia mini; MNLI and SST-2: README's midi table); full: the paper presets")
    p.add_argument("--rows", default="1,2,3,4,5,6,7,8", help="ablation rows to run, e.g. 1,4 (default: all 8)")
    p.add_argument("--tasks", default=",".join(TASKS), help=f"finetuning tasks (default: all, {','.join(TASKS)})")
    p.add_argument("--seeds", default="1,2,3,4,5", help="finetuning seeds; cells are their median (default 1-5)")
    p.add_argument("--pretrain-seed", type=int, default=1, help="seed of each row's one pretraining run")
    p.add_argument("--pretrain-steps", type=int, help="trainer.max_steps of the pretraining (default: the preset's)")
    p.add_argument("--pretrain-overrides", default="", help="extra train.py overrides for every pretraining")
    p.add_argument("--finetune-overrides", default="",
                   help="extra train.py overrides for every finetuning run; a key that train.yaml's default\n"
                        "experiment lacks needs ++ (++task.layer_decay=0.9): Hydra checks a sweep's fixed\n"
                        "overrides against it")
    p.add_argument("--table-dir", help="where table.{md,csv,tex,png} go (default: --out)")
    p.add_argument("--table-only", action="store_true", help="run nothing; build the table from what exists")
    p.add_argument("--dry-run", action="store_true", help="print the train.py commands of the missing stages")
    args = p.parse_args(argv)
    try:
        args.row_numbers = [int(r) for r in args.rows.split(",") if r.strip()]
        args.seed_list = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        usage_error(f"--rows {args.rows!r} and --seeds {args.seeds!r} must be comma-separated integers, e.g. 1,4")
    args.task_list = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if set(args.task_list) - set(TASKS) or not args.task_list:
        usage_error(f"--tasks {args.tasks!r}: name one or more of {','.join(TASKS)}")
    if not args.row_numbers or not args.seed_list:
        usage_error("--rows and --seeds need at least one number each")
    if args.pretrain_steps is not None and args.pretrain_steps < 1:
        usage_error(f"--pretrain-steps {args.pretrain_steps} must be at least 1")
    return args


# ---- what the presets compose to -----------------------------------------------------------------------------------


def compose(overrides: list[str], flag: str):
    """train.py's config for ``overrides`` (with the hydra node, for the group choices); an override that does not
    compose is a usage error naming ``flag``, the option that passed it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from genlab.cli.resolvers import register

    register()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            return hydra_compose(config_name="train", overrides=overrides, return_hydra_config=True)
    except Exception as err:  # noqa: BLE001 - Hydra's and OmegaConf's override errors share no base class
        cause = f"{err} ({err.__cause__})" if err.__cause__ else str(err)
        usage_error(f"{flag}: {' '.join(overrides)} does not compose: {cause}. Fix the override (a key of the "
                    "preset, e.g. trainer.max_steps=100)")


def model_choice(preset: str, overrides: list[str]) -> str:
    """The model= preset the row pretrains: its finetuning must build the same model (task.init_from loads
    strictly), while the finetuning presets default to their own (XLNet-Large / BERT-Large at full scale)."""
    return str(compose([f"experiment={preset}", *overrides], "--pretrain-overrides").hydra.runtime.choices.model)


def longest_finetuning_input(row: Row, scale: str, tasks: list[str], finetune_overrides: list[str]) -> int:
    """The longest data.max_seq_len of the row's finetuning presets (composing them also checks the overrides).
    BERT's absolute position table must cover it (RACE: 192 pieces on the mini, while the mini pretrains at T=64);
    pretraining and finetuning then build the same table, so the load is strict. Positions past the pretraining
    length start from their initialisation."""
    return max(int(compose([f"experiment={row.finetune_preset(t, scale)}", *finetune_overrides],
                           "--finetune-overrides").data.max_seq_len) for t in tasks)


def pretraining_length(preset: str, overrides: list[str]) -> int:
    return int(compose([f"experiment={preset}", *overrides], "--pretrain-overrides").data.seq_len)


# ---- stages --------------------------------------------------------------------------------------------------------


def finished(run_dir: Path) -> bool:
    return read_json(run_dir / "metrics.json").get("status") == "finished"


def run_logged(cmd: list[str], log: Path, dry_run: bool) -> bool:
    """Run ``python <cmd>`` from the repository root, output appended to ``log``; True if it exited 0."""
    line = " ".join(shlex.quote(c) for c in ["python", *cmd])
    print(line, flush=True)
    if dry_run:
        return True
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as f:
        f.write(f"\n$ {line}\n")
        f.flush()
        code = subprocess.run([sys.executable, *cmd], cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, check=False).returncode
    if code != 0:  # the end of the log holds train.py's message (a bad override names the key and the fix)
        tail = "\n".join("    " + line for line in log.read_text().splitlines()[-6:])
        print(f"  exited {code}; the end of {log}:\n{tail}", file=sys.stderr, flush=True)
    return code == 0


def pretrain(row: Row, row_dir: Path, args: argparse.Namespace, extra: list[str]) -> Path | None:
    """The row's pretraining run (skipped when finished, continued from last.ckpt when interrupted); returns its
    last checkpoint, or None when the pretraining failed."""
    run_dir = row_dir / "pretrain"
    last = run_dir / "checkpoints" / "last.ckpt"
    if finished(run_dir) and last.is_file():
        print(f"row {row.number}: pretraining finished in {run_dir}, skipped", flush=True)
        return last
    cmd = ["train.py", f"experiment={row.preset}", f"seed={args.pretrain_seed}", "trainer.enable_progress_bar=false",
           *extra, *shlex.split(args.pretrain_overrides), f"hydra.run.dir={run_dir}"]
    if args.pretrain_steps is not None:
        cmd.insert(3, f"trainer.max_steps={args.pretrain_steps}")
    if last.is_file():
        cmd.append("ckpt_path=last")  # continue the interrupted run in its own directory
    ok = run_logged(cmd, row_dir / "pretrain.log", args.dry_run)
    if args.dry_run:
        return last
    return last if ok and finished(run_dir) and last.is_file() else None


def done(trial: Path, ckpt: Path) -> bool:
    """The trial finished, from the row's current checkpoint: one older than a re-run pretraining is stale."""
    if not finished(trial):
        return False
    return not ckpt.is_file() or (trial / "metrics.json").stat().st_mtime >= ckpt.stat().st_mtime


def finetune(row: Row, row_dir: Path, ckpt: Path, args: argparse.Namespace, extra: list[str]) -> bool:
    """The four finetuning presets x the seeds from ``ckpt``, as train.py sweeps; trials already done are kept,
    unfinished or stale ones are removed and run again. One sweep per set of missing seeds."""
    sweep = row_dir / "finetune"
    missing: dict[tuple[int, ...], list[str]] = {}
    for task in args.task_list:
        preset = row.finetune_preset(task, args.scale)
        seeds = []
        for seed in args.seed_list:
            trial = sweep / f"{preset}_seed{seed}"
            if done(trial, ckpt):
                continue
            if trial.exists() and not args.dry_run:
                print(f"  removing the unfinished or stale trial {trial}", flush=True)
                shutil.rmtree(trial)
            seeds.append(seed)
        if seeds:
            missing.setdefault(tuple(seeds), []).append(preset)
    if not missing:
        print(f"row {row.number}: finetuning finished in {sweep}, skipped", flush=True)
    ok = True
    for seeds, presets in missing.items():
        # The checkpoint's own tokenizer (a .ckpt stands for it): the minis would otherwise train their own. `++`:
        # Hydra checks a sweep's fixed overrides against train.yaml's default experiment, which lacks these keys.
        cmd = ["train.py", "-m", f"experiment={','.join(presets)}", f"seed={','.join(map(str, seeds))}",
               f"++task.init_from={ckpt}", f"++data.tokenizer={ckpt}", "trainer.enable_progress_bar=false", *extra,
               *shlex.split(args.finetune_overrides), f"hydra.sweep.dir={sweep}",
               "hydra.sweep.subdir=${hydra.runtime.choices.experiment}_seed${seed}"]
        ok &= run_logged(cmd, row_dir / "finetune.log", args.dry_run)
    return ok


# ---- the table -----------------------------------------------------------------------------------------------------


def cell_of(row: Row, row_dir: Path, col: Column, scale: str, notes: list[str]) -> Cell:
    """Median over the finished finetuning seeds of (row, column), in percent, with the paper's number; a cell with
    no result says why in ``notes``."""
    preset = row.finetune_preset(col.task, scale)
    sweep = row_dir / "finetune"
    runs = [r for r in collect_runs([sweep]) if r.experiment == preset] if sweep.is_dir() else []
    paper = row.paper.get(col.label)
    if not runs:
        notes.append(f"row {row.number} {col.label}: no {preset} run in {sweep}"
                     + ("" if (row_dir / "pretrain" / "checkpoints" / "last.ckpt").is_file()
                        else f" (pretraining did not finish: see {row_dir / 'pretrain.log'})"))
        return Cell([], failed=1, reference=paper)
    try:
        built = build_table(runs, rows=["experiment"], metric=col.metric, aggregate="median")
    except ReportError as err:
        notes.append(f"row {row.number} {col.label}: {err} (runs in {sweep}, log {row_dir / 'finetune.log'})")
        return Cell([], failed=len(runs), reference=paper)
    (cell,) = built.cells.values()
    return Cell([v * col.scale for v in cell.values], failed=cell.failed, reference=paper)


def build_ablation_table(rows: list[Row], out: Path, scale: str, tasks: list[str]) -> Table:
    notes: list[str] = []
    columns = [c for c in COLUMNS if c.task in tasks]
    cells = {((r.label,), (c.label,)): cell_of(r, row_directory(out, r), c, scale, notes) for r in rows for c in columns}
    table = Table(metric=f"finetuned score in %, {scale} scale", aggregate="median",
                  row_keys=["row"], col_keys=["column"], rows=[(r.label,) for r in rows],
                  cols=[(c.label,) for c in columns], cells=cells, experiment="the XLNet ablation rows",
                  n_runs=sum(c.n + c.failed for c in cells.values()), n_failed=sum(c.failed for c in cells.values()),
                  notes=notes)
    counts = sorted({c.n for c in cells.values() if c.n})
    if len(counts) > 1:
        notes.append(f"cells aggregate different numbers of seeds ({counts}); see n in the CSV")
    return table


def write_table(table: Table, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    files = table_files(table, "table", precision=2, with_reference=True,
                        title="XLNet ablation ([XLNet v1 Table 6]): our finetuned scores, the paper's in parentheses")
    for name, text in files.items():
        with atomic_write(folder / name, "w") as f:
            f.write(text)
    plot_table(table, folder / "table.png", with_reference=True)
    print(files["table.md"])
    print(f"wrote {folder / 'table.md'}, .csv, .tex, .png")


def row_directory(out: Path, row: Row) -> Path:
    return out / f"row{row.number}_{row.preset}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    known = {r.number: r for r in load_rows(args.scale)}
    unknown = sorted(set(args.row_numbers) - set(known))
    if unknown:
        usage_error(f"--rows {args.rows}: no ablation row {unknown}; the rows are {sorted(known)} ({REFERENCE})")
    rows = [known[n] for n in args.row_numbers]
    out = Path(args.out).absolute()
    ok = True
    for row in [] if args.table_only else rows:
        row_dir = row_directory(out, row)
        pre_extra = shlex.split(args.pretrain_overrides)
        fine_extra = shlex.split(args.finetune_overrides)
        shared = [f"model={model_choice(row.preset, pre_extra)}"]
        if row.family == "bert":  # the table covers the pretraining and every finetuning input
            longest = max(longest_finetuning_input(row, args.scale, args.task_list, fine_extra),
                          pretraining_length(row.preset, pre_extra))
            shared.append(f"++model.max_position={longest}")
        ckpt = pretrain(row, row_dir, args, [o.lstrip("+") for o in shared[1:]])
        if ckpt is None:
            print(f"row {row.number}: pretraining failed (see {row_dir / 'pretrain.log'}); its cells stay empty")
            ok = False
            continue
        ok &= finetune(row, row_dir, ckpt, args, shared)
    if args.dry_run:
        return 0
    table = build_ablation_table(rows, out, args.scale, args.task_list)
    write_table(table, Path(args.table_dir) if args.table_dir else out)
    return 0 if ok and not table.n_failed else 1


if __name__ == "__main__":
    sys.exit(main())
