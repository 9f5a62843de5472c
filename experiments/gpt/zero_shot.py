"""Figure 2 (right) of Radford et al. (2018): zero-shot task performance of GPT pretraining checkpoints over pretraining updates.

    python experiments/gpt/zero_shot.py outputs/gpt_books_mini/<run>/checkpoints --source mini --out experiments/gpt
    python experiments/gpt/zero_shot.py <ckpts...> --source path --sst2 glue/SST-2 --cola glue/CoLA --race RACE \
        --story-cloze story_cloze

Every ``.ckpt`` under the given paths is scored (one row per checkpoint step and task); the heuristics are in
``genlab.analysis.gpt_zero_shot``. Writes ``zero_shot.csv`` and ``zero_shot.md`` into ``--out``. The normalised
score is (score − chance) / (reference − chance) with ``--reference`` (default: the previous best results quoted in
Radford et al. (2018) Tables 3-4, as the figure normalises by the state of the art; at mini scale only the trend means anything).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from genlab import checkpoints
from genlab.analysis import gpt_zero_shot as zs
from genlab.cli.errors import run_script
from genlab.data.finetune import glue
from genlab.data.finetune import story_cloze as sc
from genlab.data.finetune.datamodule import MINIS
from genlab.data.finetune.race import read_race
from genlab.data.finetune.race_mini import RACE_MINI
from genlab.data.sources.tiers import locate

PREVIOUS_BEST = {"sst2": 0.932, "cola": 0.350, "race": 0.533, "story_cloze": 0.776}  # Radford et al. (2018) Tables 3-4
TASKS = ("sst2", "cola", "race", "story_cloze")


def checkpoint_files(paths: list[str]) -> list[Path]:
    found = []
    for p in map(Path, paths):
        found += sorted(p.rglob("*.ckpt")) if p.is_dir() else [p]
    by_step: dict[int, Path] = {}
    for f in found:  # last.ckpt repeats a step already saved under its own name
        step = int(checkpoints.load(f, mmap=True).get("global_step", 0))
        by_step.setdefault(step, f)
    return [by_step[s] for s in sorted(by_step)]


def task_root(args: argparse.Namespace, task: str) -> Path:
    if args.source == "mini":
        spec = {"sst2": MINIS["sst2"], "cola": MINIS["cola"], "race": RACE_MINI, "story_cloze": sc.STORY_CLOZE_MINI}
        return locate(spec[task], "mini", cache_dir=args.cache_dir)
    return Path(getattr(args, task))


def score(task: str, model, tok, root: Path, limit: int) -> tuple[str, float]:
    if task == "sst2":
        t = glue.get_task("sst2")
        dev = glue.read_split(t, root, t.dev["dev"])[:limit]
        return "acc", zs.sst2(model, tok, [e.text_a for e in dev], [int(e.label) for e in dev])
    if task == "cola":
        t = glue.get_task("cola")
        train, dev = glue.read_split(t, root, t.train)[:limit], glue.read_split(t, root, t.dev["dev"])[:limit]
        pair = lambda exs: ([e.text_a for e in exs], [int(e.label) for e in exs])
        return "mcc", zs.cola(model, tok, pair(train), pair(dev))
    if task == "race":
        qs = read_race(root, "dev")[:limit]
        return "acc", zs.multiple_choice(model, tok, [f"{q.article} {q.question}" for q in qs],
                                         [q.options for q in qs], [q.label for q in qs])
    stories = sc.read_stories(root / sc.TEST_FILE)[:limit]
    return "acc", zs.multiple_choice(model, tok, [s.context for s in stories], [s.endings for s in stories],
                                     [s.label for s in stories])


def main(argv: list[str] | None = None) -> list[zs.ZeroShotRow]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="+", help="GPT pretraining .ckpt files or folders holding them")
    p.add_argument("--tasks", default=",".join(TASKS))
    p.add_argument("--source", choices=("mini", "path"), default="mini")
    p.add_argument("--cache-dir", default=None)
    for t in TASKS:
        p.add_argument(f"--{t.replace('_', '-')}", dest=t, help=f"{t} folder (with --source path)")
    p.add_argument("--limit", type=int, default=400, help="examples per task and split (CPU budget)")
    p.add_argument("--reference", default=",".join(f"{k}={v}" for k, v in PREVIOUS_BEST.items()))
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    reference = {k: float(v) for k, v in (kv.split("=") for kv in args.reference.split(",") if kv)}
    tasks = [t for t in args.tasks.split(",") if t]
    rows = []
    for ckpt in checkpoint_files(args.paths):
        model, tok, step = zs.load_lm(ckpt)
        for task in tasks:
            metric, value = score(task, model, tok, task_root(args, task), args.limit)
            rows.append(zs.ZeroShotRow(str(ckpt), step, task, metric, value,
                                       zs.normalise(task, value, reference.get(task))))
            print(f"step {step:>7d}  {task:<12s} {metric} {value:.4f}", flush=True)
    if args.out:
        write(rows, Path(args.out))
    return rows


def write(rows: list[zs.ZeroShotRow], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "zero_shot.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "task", "metric", "score", "normalised", "checkpoint"])
        w.writerows([r.step, r.task, r.metric, f"{r.score:.4f}",
                     "" if r.normalised is None else f"{r.normalised:.3f}", r.checkpoint] for r in rows)
    tasks = list(dict.fromkeys(r.task for r in rows))
    steps = sorted({r.step for r in rows})
    cell = {(r.step, r.task): r for r in rows}
    lines = ["Zero-shot score (normalised: 0 = chance, 1 = reference) by pretraining step.", "",
             "| step | " + " | ".join(tasks) + " |", "|---|" + "---|" * len(tasks)]
    for s in steps:
        vals = [cell.get((s, t)) for t in tasks]
        lines.append(f"| {s} | " + " | ".join("" if v is None else f"{v.score:.3f} ({v.normalised:.2f})"
                                               if v.normalised is not None else f"{v.score:.3f}" for v in vals) + " |")
    (out / "zero_shot.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    run_script(main)
