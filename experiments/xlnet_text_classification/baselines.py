"""Baselines to read the mini table against: test error (%) of the majority class and of scikit-learn's default
logistic regression on tf-idf bags of the SentencePiece pieces the minis' models see (the training text's
tokenizer, the first ``max_seq_len - 2`` pieces; unigrams and bigrams). Deterministic; a few seconds per mini.

    python experiments/xlnet_text_classification/baselines.py [--out experiments/xlnet_text_classification]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

from genlab.data.finetune.datamodule import ClassificationDataModule

MINIS = ("imdb", "yelp2", "yelp5", "dbpedia", "ag_news", "amazon2", "amazon5")


def pieces_seen(split) -> list[str]:
    """Each example's real piece ids (attention mask 1, special ids 3/4 removed) as a space-separated string."""
    return [" ".join(str(t) for t, m in zip(ids, mask) if m and t not in (3, 4))
            for ids, mask in zip(split.input_ids, split.attention_mask)]


def scores(task: str, cache: str) -> dict[str, float]:
    dm = ClassificationDataModule(task, source="mini", cache_dir=cache, vocab_size=2000, max_seq_len=96)
    dm.setup("fit")
    train, test = dm.splits["train"], dm.splits["test"]
    majority = np.bincount(train.labels).argmax()
    bag = TfidfVectorizer(token_pattern=r"\S+", ngram_range=(1, 2))
    clf = LogisticRegression(max_iter=5000).fit(bag.fit_transform(pieces_seen(train)), train.labels)
    predicted = clf.predict(bag.transform(pieces_seen(test)))
    return {"classes": dm.n_labels, "train": len(train), "test": len(test),
            "majority": 100 * float(np.mean(test.labels != majority)),
            "tfidf_lr": 100 * float(np.mean(test.labels != predicted))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None, help="write baselines.md here")
    args = parser.parse_args()
    lines = ["| mini | classes | train / test | majority class | tf-idf + LR on the pieces seen |",
             "|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as cache:  # the tokenizers are rebuilt; nothing lands in the checkout
        for task in MINIS:
            s = scores(task, cache)
            lines.append(f"| {task}_mini | {s['classes']} | {s['train']} / {s['test']} | {s['majority']:.2f} | "
                         f"{s['tfidf_lr']:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out is not None:
        (args.out / "baselines.md").write_text("Test error (%) of the baselines, `python experiments/"
                                               "xlnet_text_classification/baselines.py`.\n\n" + text)


if __name__ == "__main__":
    main()
