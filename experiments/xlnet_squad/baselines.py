"""Trivial and heuristic scores on the cloze SQuAD minis' dev sets, to read the mini table against.

* no answer: every question answered "" (SQuAD 2.0: EM = F1 = the share of unanswerable questions);
* first word: the paragraph's first word, always answering;
* longest word: the paragraph's longest word (of 5+ letters), always answering, without reading the question. The
  cloze answer is the longest word of its sentence, and each paragraph's longest word answers one of its questions;
* string match: the question is a paragraph sentence with one word blanked, so matching the text around the
  blank finds the answer; no match -> no answer. What reading the paragraph literally reaches (a ceiling, not a
  model).

With ``--runs``, finished runs on the 2.0 mini are read back from their prediction files: EM/F1 of the best
non-null span on the answerable questions only (span quality without the null decision) and the AUC of the null
score for telling unanswerable from answerable questions (0.5 = chance).

    python experiments/xlnet_squad/baselines.py [--runs <run dir> ...]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from genlab.data.finetune.minis import SQUAD1_MINI, SQUAD2_MINI
from genlab.data.finetune.squad import SquadExample, read_squad
from genlab.data.sources.tiers import locate
from genlab.metrics.squad_eval import evaluate_v1, evaluate_v2, raw_scores


def first_word(ex: SquadExample) -> str:
    return ex.context.split()[0]


def longest_word(ex: SquadExample) -> str:
    words = re.findall(r"[A-Za-z]{5,}", ex.context)
    return max(words, key=len) if words else ""


def string_match(ex: SquadExample) -> str:
    before, _, after = ex.question.partition("_")
    hit = re.search(re.escape(before) + r"(\w+)" + re.escape(after), ex.context)
    return hit.group(1) if hit else ""


def scores(data: list[dict], examples: list[SquadExample], version: str) -> dict[str, dict[str, float]]:
    rules = {"no answer": lambda ex: "", "first word": first_word, "longest word": longest_word,
             "string match": string_match}
    evaluate = evaluate_v2 if version == "2.0" else evaluate_v1  # each version's official semantics
    return {name: evaluate(data, {ex.qid: rule(ex) for ex in examples}) for name, rule in rules.items()}


def null_auc(null_odds: dict[str, float], unanswerable: dict[str, bool]) -> float:
    """Probability that an unanswerable question gets a higher null score than an answerable one (ties count half)."""
    pos = [v for q, v in null_odds.items() if unanswerable[q]]
    neg = [v for q, v in null_odds.items() if not unanswerable[q]]
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def run_diagnostics(run: Path, data: list[dict], examples: list[SquadExample]) -> str:
    folder = next(run.glob("**/predictions/null_odds.json")).parent
    preds = json.loads((folder / "predictions.json").read_text())
    ex, f1, has = raw_scores(data, preds)
    answerable = [q for q in ex if has[q]]
    em_a = 100 * sum(ex[q] for q in answerable) / len(answerable)
    f1_a = 100 * sum(f1[q] for q in answerable) / len(answerable)
    auc = null_auc(json.loads((folder / "null_odds.json").read_text()), {e.qid: e.is_impossible for e in examples})
    return f"{run}: answerable EM {em_a:5.1f}  F1 {f1_a:5.1f} | null-score AUC {auc:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache-dir", default=None, help="genlab cache (default: ~/.cache/genlab)")
    ap.add_argument("--runs", nargs="*", default=[], help="finished run directories on the cloze 2.0 mini")
    args = ap.parse_args()
    for label, spec, version in (("SQuAD 2.0 mini dev", SQUAD2_MINI, "2.0"),
                                 ("SQuAD 1.1 mini dev", SQUAD1_MINI, "1.1")):
        data, examples = read_squad(locate(spec, "mini", cache_dir=args.cache_dir) / f"dev-v{version}.json")
        n_null = sum(ex.is_impossible for ex in examples)
        print(f"{label}: {len(examples)} questions, {n_null} unanswerable")
        for name, out in scores(data, examples, version).items():
            print(f"  {name:12s} EM {out['exact']:5.1f}  F1 {out['f1']:5.1f}")
    if args.runs:
        data, examples = read_squad(locate(SQUAD2_MINI, "mini", cache_dir=args.cache_dir) / "dev-v2.0.json")
        for run in args.runs:
            print(run_diagnostics(Path(run), data, examples))


if __name__ == "__main__":
    main()
