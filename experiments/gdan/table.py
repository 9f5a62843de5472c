"""GDAN mini results beside the thesis' full-scale Table 3.4 (rate 0.1, |U| = 50K): one row per method with the mini's
dev F1 (of the tested checkpoint), test F1, test EM and runtime as mean ± std over seeds, then the thesis' numbers.

    python experiments/gdan/table.py <sweep dir> [--out experiments/gdan] [--random-span]

``--random-span`` adds the F1 of a uniformly random legal span (<= 15 tokens) on the same mini test set (acceptance
check (a) of tests/tasks/test_gdan_acceptance.py); ``--unigram`` the per-token NLL of the test questions under an
add-one unigram model of L's questions (G's target ids, copy slots as <unk>), beside G's ``test/g_nll`` (G must beat
it on the real-data mini).
Runs are read with genlab.report (finished runs only; failed or unfinished ones are counted in a note).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
from pathlib import Path

import numpy as np

from genlab.report import collect_runs, load_reference

HERE = Path(__file__).resolve().parent
ORDER = ["sl", "context", "context_domain", "gen", "gen_gan", "gen_dual", "gen_domain", "gen_domain_adv"]


def runtime_s(run_dir: Path) -> float | None:
    """Wall time from run.json's start to metrics.json's end (fit + test, data set-up included)."""
    try:
        start = json.loads((run_dir / "run.json").read_text())["start_time"]
        end = json.loads((run_dir / "metrics.json").read_text())["end_time"]
    except (OSError, KeyError, json.JSONDecodeError):
        return None
    return (dt.datetime.fromisoformat(end) - dt.datetime.fromisoformat(start)).total_seconds()


def mean_std(values: list[float], precision: int = 3) -> str:
    if not values:
        return "–"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.{precision}f} ± {std:.{precision}f}"


def random_span_f1() -> float:
    from genlab.data.qa.datamodule import SemiSupervisedSquadDataModule
    from genlab.metrics.squad_eval import evaluate_v1

    dm = SemiSupervisedSquadDataModule(source="mini", mini="wiki", unlabeled=False, generator_vocab=False)
    dm.setup("fit")
    return evaluate_v1(dm.gold("test"), dm.random_span_predictions("test"))["f1"] / 100.0


def unigram_nll(seed: int = 0) -> float:
    """Per-token NLL of the test questions' G targets under an add-one unigram model of L's (seed ``seed``)."""
    from genlab.data.qa.datamodule import SemiSupervisedSquadDataModule
    from genlab.data.qa.text import UNK

    dm = SemiSupervisedSquadDataModule(source="mini", mini="wiki", unlabeled=False, seed=seed)
    dm.setup("fit")
    counts = np.ones(dm.g_vocab_size)

    def targets(items):
        ids = np.concatenate([dm._g_target(it.question, dm.passages[it.passage]) for it in items])
        return np.where(ids >= dm.g_vocab_size, UNK, ids)

    np.add.at(counts, targets(dm.labeled), 1)
    logp = np.log(counts / counts.sum())
    return float(-logp[targets(dm.splits["test"])].mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--out", default=str(HERE))
    ap.add_argument("--random-span", action="store_true")
    ap.add_argument("--unigram", action="store_true")
    ap.add_argument("--name", default="table", help="output stem: <out>/<name>.md and .json")
    ap.add_argument("--title", default="", help="extra words for the heading (e.g. a setting shared by the runs)")
    args = ap.parse_args()
    ref = {e["experiment"]: e for e in load_reference(HERE / "reference.yaml")["values"]
           if str(e["data.label_rate"]) == "0.1" and str(e["data.unlabeled_size"]) == "50000"}
    runs = collect_runs(args.paths)
    by_method: dict[str, list] = {}
    unfinished = 0
    for r in runs:
        name = (r.experiment or "").removeprefix("gdan_squad_").removesuffix("_mini")
        if r.status != "finished" or r.metric("test/f1") is None:
            unfinished += 1
            continue
        by_method.setdefault(name, []).append(r)
    head = ("| method (Table 3.4 row) | n | mini dev F1 | mini test F1 | mini test EM | selected step | runtime s | "
            "thesis dev F1 | thesis test F1 | thesis test EM |")
    intro = ("Mini: the real-data mini on gensim's Wikipedia excerpt (rule-made questions, L = 178, U = 7,892 pairs, test 183, "
             "dev 300), mean ± std over seeds; dev F1 = valid/best_f1, the dev F1 of the checkpoint that is tested, chosen "
             "among the validations after D's first update (selected step = valid/best_step). "
             "Full scale: Yang's thesis Table 3.4 (SQuAD v1.1, human questions).")
    heading = "# GDAN: real-data mini (CPU) beside the thesis' full-scale Table 3.4 (rate 0.1, |U| = 50K)"
    lines = [heading + (f" -- {args.title}" if args.title else ""), "", intro, "",
             head,
             "|---|---|---|---|---|---|---|---|---|---|"]
    summary = {}
    for m in [m for m in ORDER if m in by_method] + sorted(set(by_method) - set(ORDER)):
        rs = by_method[m]
        vals = {k: [r.metric(k) for r in rs if r.metric(k) is not None] for k in ("valid/best_f1", "test/f1",
                                                                                     "test/exact", "test/g_nll",
                                                                                     "valid/best_step")}
        times = [t for t in (runtime_s(r.dir) for r in rs) if t is not None]
        e = ref.get(f"gdan_squad_{m}", {})
        summary[m] = {**vals, "runtime_s": times, "seeds": [r.value_of("seed") for r in rs]}
        lines.append(f"| {m} ({e.get('row', '?')}) | {len(rs)} | {mean_std(vals['valid/best_f1'])} | "
                     f"{mean_std(vals['test/f1'])} | {mean_std(vals['test/exact'])} | "
                     f"{', '.join(str(int(v)) for v in vals['valid/best_step'])} | {mean_std(times, 0)} | "
                     f"{e.get('dev_f1', '–')} | {e.get('value', '–')} | {e.get('test_em', '–')} |")
    if args.random_span:
        chance = random_span_f1()
        summary["random_span_f1"] = chance
        lines += ["", f"Random legal span (<= 15 tokens) on the same mini test set: F1 = {chance:.3f}."]
    g_nll = {m: v["test/g_nll"] for m, v in summary.items() if isinstance(v, dict) and v.get("test/g_nll")}
    if g_nll:
        lines += ["", "G's per-token NLL on the test questions (test/g_nll, G after MLE with the best dev NLL, or "
                  "after REINFORCE): " + ", ".join(f"{m} {mean_std(v)}" for m, v in g_nll.items()) + "."]
    if args.unigram:
        summary["unigram_nll"] = uni = unigram_nll()
        lines += [f"Add-one unigram model of L's questions on the same test questions: {uni:.3f} nats per token."]
    if "sl" in summary:
        lines += ["", "Mean test F1 minus SL's, against the larger std over seeds of the two rows (the slow acceptance "
                  "test gates Context at > 1 std, Gen and GDAN at > 2 std on seeds 0-2):", ""]
        sl = summary["sl"]["test/f1"]
        for m in [m for m in ORDER if m in summary and m != "sl"]:
            row = summary[m]["test/f1"]
            gap = statistics.fmean(row) - statistics.fmean(sl)
            spread = max(statistics.stdev(v) if len(v) > 1 else 0.0 for v in (sl, row))
            lines.append(f"- {m}: {gap:+.3f}, std {spread:.3f} ({gap / spread:.1f} std)" if spread else
                         f"- {m}: {gap:+.3f} (one seed: no spread)")
    if unfinished:
        lines += ["", f"{unfinished} run(s) failed or unfinished, left out."]
    out = Path(args.out)
    (out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    (out / f"{args.name}.json").write_text(json.dumps(summary, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
