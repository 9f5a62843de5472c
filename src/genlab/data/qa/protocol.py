"""The thesis' SQuAD protocol (Yang thesis §3.2.5): the hidden test set is replaced by 10 % of the
training *articles*; the official dev set is the development set (model selection on its F1); the labelling rate is a
fraction of the *original* training-set size, so 0.9 is the largest and uses every training question left after the
test articles are removed.

SQuAD files are read with the finetuning suite's reader (genlab.data.finetune.squad.squad_articles, streamed).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from genlab.data.finetune.squad import squad_articles
from genlab.errors import ConfigError

MAX_LABEL_RATE = 0.9


@dataclass
class QAExample:
    qid: str
    question: str
    context: str
    answers: list[dict]  # [{"text", "answer_start"}], as in the file
    title: str


def read_articles(path: Path) -> list[tuple[str, list[QAExample]]]:
    """(title, questions) per article of a SQuAD v1.1 file, in file order (streamed, one article at a time)."""
    out = []
    for a, (article, examples) in enumerate(squad_articles(path)):
        title = str(article.get("title", f"article{a}"))
        out.append((title, [QAExample(str(e.qid), str(e.question), e.context, list(e.answers or []), title)
                            for e in examples]))
    return out


def split_by_article(articles: list[tuple[str, list[QAExample]]], test_fraction: float = 0.1,
                     seed: int = 0) -> tuple[list[QAExample], list[QAExample]]:
    """(train, test): articles shuffled with ``seed`` go to test until they hold >= ``test_fraction`` of the
    questions; every paragraph of an article stays on one side."""
    total = sum(len(qs) for _, qs in articles)
    order = np.random.default_rng(seed).permutation(len(articles))
    test_ids, covered = set(), 0
    for i in order.tolist():
        if covered >= test_fraction * total:
            break
        test_ids.add(i)
        covered += len(articles[i][1])
    train = [q for i, (_, qs) in enumerate(articles) if i not in test_ids for q in qs]
    test = [q for i, (_, qs) in enumerate(articles) if i in test_ids for q in qs]
    return train, test


def check_label_rate(rate: float) -> None:
    if not 0.0 < rate <= MAX_LABEL_RATE:
        raise ConfigError(f"data.label_rate={rate}: the labelling rate is a fraction of the original SQuAD training "
                          f"set and must lie in (0, {MAX_LABEL_RATE}] -- 10 % of the training articles are the test "
                          "set (Table 3.4 uses 0.1, 0.2, 0.5, 0.9).")


def labeled_size(rate: float, n_original: int) -> int:
    """``round(rate × N_train_original)``."""
    check_label_rate(rate)
    return round(rate * n_original)


def labeled_subset(n_usable: int, rate: float, n_original: int, seed: int) -> np.ndarray:
    """Indices (sorted) of L among the usable training questions: a uniform sample of ``labeled_size`` of them, or
    all of them when that many are not left (rate 0.9)."""
    n = labeled_size(rate, n_original)
    if n >= n_usable:
        return np.arange(n_usable)
    return np.sort(np.random.default_rng(seed).choice(n_usable, size=max(n, 1), replace=False))
