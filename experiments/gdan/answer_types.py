"""Answer-type distribution of an extractor on the real-data mini's unlabelled paragraphs, beside SQuAD's
(Rajpurkar et al. 2016, Table 2): every candidate chunk, and the 5 per paragraph that type-weighted sampling keeps.

    python experiments/gdan/answer_types.py [--extractor heuristic|spacy] [--spacy-model en_core_web_sm]
        [--mini wiki|synthetic]
"""

from __future__ import annotations

import argparse
from collections import Counter

import numpy as np

from genlab.data.qa.answers import SQUAD_TYPE_PERCENT, HeuristicExtractor, read_unlabeled, sample_answers
from genlab.data.qa.datamodule import SemiSupervisedSquadDataModule


def percent(counts: Counter) -> str:
    total = sum(counts.values())
    return ", ".join(f"{t} {100 * n / total:.1f}" for t, n in counts.most_common()) + f" (n = {total})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--extractor", choices=["heuristic", "spacy"], default="heuristic")
    ap.add_argument("--spacy-model", default="en_core_web_sm")
    ap.add_argument("--mini", choices=["wiki", "synthetic"], default="wiki")
    args = ap.parse_args()
    if args.extractor == "spacy":
        from genlab.data.qa.tagged_answers import SpacyExtractor

        extract = SpacyExtractor(args.spacy_model)
    else:
        extract = HeuristicExtractor()
    rows = read_unlabeled(SemiSupervisedSquadDataModule(source="mini", mini=args.mini)._root() / "unlabeled.jsonl")
    rng = np.random.default_rng(0)
    every, kept = Counter(), Counter()
    for row in rows:
        chunks = extract(row.context)
        every.update(a.type for a in chunks)
        kept.update(a.type for a in sample_answers(chunks, 5, rng))
    print(f"{args.extractor} on {len(rows)} paragraphs, percent per type")
    print(f"  every chunk: {percent(every)}")
    print(f"  5 sampled per paragraph: {percent(kept)}")
    print(f"  SQuAD: {', '.join(f'{t} {p}' for t, p in SQUAD_TYPE_PERCENT.items())}")


if __name__ == "__main__":
    main()
