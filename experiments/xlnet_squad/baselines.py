"""Trivial and heuristic scores on the cloze SQuAD minis' dev sets, to read the mini table against.

* no answer: every question answered "" (SQuAD 2.0: EM = F1 = the share of unanswerable questions);
* first word: the paragraph's first word, always answering;
* string match: the question is a paragraph sentence with one word blanked, so matching the text around the
  blank finds the answer; no match -> no answer. What reading the paragraph literally reaches (a ceiling, not a
  model).

    python experiments/xlnet_squad/baselines.py
"""

from __future__ import annotations

import argparse
import re

from genlab.data.finetune_minis import SQUAD1_MINI, SQUAD2_MINI
from genlab.data.sources import locate
from genlab.data.squad import SquadExample, read_squad
from genlab.metrics.squad_eval import evaluate


def first_word(ex: SquadExample) -> str:
    return ex.context.split()[0]


def string_match(ex: SquadExample) -> str:
    before, _, after = ex.question.partition("_")
    hit = re.search(re.escape(before) + r"(\w+)" + re.escape(after), ex.context)
    return hit.group(1) if hit else ""


def scores(data: list[dict], examples: list[SquadExample]) -> dict[str, dict[str, float]]:
    rules = {"no answer": lambda ex: "", "first word": first_word, "string match": string_match}
    return {name: evaluate(data, {ex.qid: rule(ex) for ex in examples}) for name, rule in rules.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache-dir", default=None, help="genlab cache (default: ~/.cache/genlab)")
    args = ap.parse_args()
    for label, spec, version in (("SQuAD 2.0 mini dev", SQUAD2_MINI, "2.0"), ("SQuAD 1.1 mini dev", SQUAD1_MINI, "1.1")):
        data, examples = read_squad(locate(spec, "mini", cache_dir=args.cache_dir) / f"dev-v{version}.json")
        n_null = sum(ex.is_impossible for ex in examples)
        print(f"{label}: {len(examples)} questions, {n_null} unanswerable")
        for name, out in scores(data, examples).items():
            print(f"  {name:12s} EM {out['exact']:5.1f}  F1 {out['f1']:5.1f}")


if __name__ == "__main__":
    main()
