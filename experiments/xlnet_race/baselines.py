"""Trivial and options-only scores on the cloze RACE mini (dev and test; all / middle / high), to read the mini
table against. Each scorer gives every option a number without looking at the other options (as the models do:
options are encoded separately) and answers the highest, ties -> the first letter.

* majority letter: the split's own most frequent answer letter (an upper bound for a constant letter);
* fewest pieces: the option that the mini's SentencePiece model (vocabulary 2,000, the presets' tokenizer) cuts
  into the fewest pieces. Needs no article or question: it measures how far surface form alone goes;
* in article: the option that occurs in the article (what reading literally reaches, a ceiling).

    python experiments/xlnet_race/baselines.py [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
from collections import Counter

from genlab.data.finetune.race import RaceDataModule, RaceQuestion, read_race
from genlab.data.finetune.race_mini import RACE_MINI
from genlab.data.sources.tiers import locate

LEVELS = (("all", None), ("middle", 0), ("high", 1))


def accuracy(questions: list[RaceQuestion], score) -> float:
    right = 0
    for q in questions:
        scores = [score(q, o) for o in q.options]
        right += scores.index(max(scores)) == q.label
    return right / len(questions)


def majority_letter(questions: list[RaceQuestion]) -> float:
    return Counter(q.label for q in questions).most_common(1)[0][1] / len(questions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache-dir", default=None)
    args = parser.parse_args()
    dm = RaceDataModule(source="mini", cache_dir=args.cache_dir, vocab_size=2000)  # data=race_mini's tokenizer
    dm.setup("test")
    tok = dm.tokenizer
    scorers = {"fewest pieces": lambda q, o: -len(tok.encode(o)),
               "in article": lambda q, o: o.lower() in q.article.lower()}
    root = locate(RACE_MINI, "mini", None, args.cache_dir)
    print("| split | baseline | all | middle | high |\n|---|---|---|---|---|")
    for split in ("dev", "test"):
        questions = read_race(root, split)
        subsets = [[q for q in questions if level is None or q.level == level] for _, level in LEVELS]
        print(f"| {split} | majority letter | " + " | ".join(f"{majority_letter(s):.4f}" for s in subsets) + " |")
        for name, score in scorers.items():
            print(f"| {split} | {name} | " + " | ".join(f"{accuracy(s, score):.4f}" for s in subsets) + " |")


if __name__ == "__main__":
    main()
