"""The GPT mini's acceptance check G2 (experiments/gpt/README.md) from a cross-validation sweep: the k-fold accuracy
of every setting (one number per seed: the mean of ``test/score`` over the ``data.fold`` runs of that seed, = accuracy
over the whole set for equal folds), mean ± std over seeds, and both criteria for each pair of settings that differ
only in ``task.init_from_pretrained`` (and ``task.init_from``: a run from random init reads only the checkpoint's
tokenizer, so it pairs with every checkpoint): ahead by more than the larger of the two spreads over seeds (issue
#25), and the G2 acceptance bars (pretrained >= 0.75, at least 0.2 above random init).

    python experiments/gpt/g2_cv.py outputs/gpt_minis/imdb_cv [more sweep directories: their runs are merged]

A seed missing any of its folds (or a run that did not finish) is reported and left out of the means.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

SKIP = ("experiment=", "seed=", "data.fold=", "paths.", "logger", "trainer.enable_progress_bar", "hydra.", "callbacks.")
PRETRAINED = "task.init_from_pretrained="
INIT = ("task.init_from=", PRETRAINED)  # what a pair may differ in (random init uses only the checkpoint's tokenizer)
GATE_MIN, GATE_GAP = 0.75, 0.2  # the G2 acceptance bars


def _canonical(override: str) -> str:
    """``x=True`` (how a Hydra sweep over ``true,false`` records it) as ``x=true``."""
    name, eq, value = override.partition("=")
    return f"{name}={value.lower()}" if eq and value in ("True", "False") else override


def fold_scores(root: Path) -> tuple[dict[tuple[str, ...], dict[str, dict[int, float]]], list[str]]:
    """setting -> seed -> fold -> test/score, over every finished run under ``root``; and the unfinished runs."""
    out: dict[tuple[str, ...], dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    unfinished = []
    for info_file in sorted(root.rglob("run.json")):
        overrides = json.loads(info_file.read_text()).get("overrides", [])
        metrics_file = info_file.parent / "metrics.json"
        metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else {}
        if metrics.get("status") != "finished" or "test/score" not in metrics.get("metrics", {}):
            unfinished.append(str(info_file.parent))
            continue
        overrides = [_canonical(o) for o in overrides]
        value = dict(o.split("=", 1) for o in overrides if "=" in o)
        key = tuple(o for o in overrides if not o.startswith(SKIP))
        out[key][value.get("seed", "?")][int(value.get("data.fold", 0))] = float(metrics["metrics"]["test/score"])
    return out, unfinished


def summarise(scores: dict[str, dict[int, float]], n_folds: int) -> tuple[list[float], list[str]]:
    """(one k-fold accuracy per complete seed, the incomplete seeds)."""
    complete, incomplete = [], []
    for seed, folds in sorted(scores.items()):
        if sorted(folds) == list(range(n_folds)):
            complete.append(statistics.fmean(folds.values()))
        else:
            incomplete.append(f"seed {seed}: folds {sorted(folds)}")
    return complete, incomplete


def _std(v: list[float]) -> float:
    return statistics.stdev(v) if len(v) > 1 else 0.0


def main(argv: list[str]) -> dict[tuple[str, ...], list[float]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", help="sweep directories (searched recursively)")
    parser.add_argument("--n-folds", type=int, default=5)
    args = parser.parse_args(argv)
    rows: dict[tuple[str, ...], list[float]] = {}
    notes = []
    scores: dict[tuple[str, ...], dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for p in args.paths:  # one setting's seeds and folds may come from several sweeps
        found, unfinished = fold_scores(Path(p))
        notes += [f"unfinished: {u}" for u in unfinished]
        for key, by_seed in found.items():
            for seed, folds in by_seed.items():
                scores[key][seed].update(folds)
    for key, by_seed in scores.items():
        rows[key], incomplete = summarise(by_seed, args.n_folds)
        notes += [f"{' '.join(key)}: incomplete {i}" for i in incomplete]
    print(f"| setting | seeds | {args.n_folds}-fold accuracy per seed | mean ± std |\n|---|---|---|---|")
    for key, v in sorted(rows.items()):
        per_seed = ", ".join(f"{x:.3f}" for x in v)
        mean = f"{statistics.fmean(v):.3f} ± {_std(v):.3f}" if v else "-"
        print(f"| {' '.join(key) or '(preset)'} | {len(v)} | {per_seed} | {mean} |")
    for key, pre in sorted(rows.items()):
        if f"{PRETRAINED}false" in key or not pre:
            continue
        base = tuple(o for o in key if not o.startswith(INIT))
        rand = next((v for k, v in rows.items() if f"{PRETRAINED}false" in k
                     and tuple(o for o in k if not o.startswith(INIT)) == base), None)
        if not rand:
            continue
        gap, spread = statistics.fmean(pre) - statistics.fmean(rand), max(_std(pre), _std(rand))
        bars = statistics.fmean(pre) >= GATE_MIN and gap >= GATE_GAP
        print(f"G2 {' '.join(o for o in key if not o.startswith(PRETRAINED)) or '(preset)'}: pretrained "
              f"{statistics.fmean(pre):.3f} vs random {statistics.fmean(rand):.3f}: gap {gap:+.3f}, spread {spread:.3f}"
              f" -> gap > spread: {'yes' if gap > spread else 'NO'}; G2 bars (>= {GATE_MIN}, >= +{GATE_GAP}): "
              f"{'yes' if bars else 'NO'}")
    for n in notes:
        print(n)
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
