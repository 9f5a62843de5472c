"""Story Cloze Test (ROCStories, Spring 2016; GPT-1 paper §3.3, §4.2): reader, the release's train/dev split, data
tiers and the offline mini.

Official files (``data.path`` = the folder holding them; the dataset is distributed by request, so there is no
download tier): ``cloze_test_val__spring2016 - cloze_test_ALL_val.csv`` (1,871 labelled stories) and
``cloze_test_test__spring2016 - cloze_test_ALL_test.csv`` (1,871), CSV with a header ``InputStoryid,
InputSentence1..4, RandomFifthSentenceQuiz1, RandomFifthSentenceQuiz2, AnswerRightEnding`` (1 or 2).

The validation file is the only labelled training data: the release (``datasets.py``) splits it into 1,497 training
and 374 dev stories with scikit-learn's ``train_test_split(test_size=374, random_state=3535999445)``, i.e. a
permutation from NumPy's legacy ``RandomState(seed)``, dev = its first 374 entries, train = the rest in permuted
order; :func:`release_split` reproduces exactly that with NumPy alone. The test file is the reported split.

Mini (GENERATED task from REAL text: gensim's ``lee_background.cor``, 300 news documents): every window
of 5 consecutive sentences of a document gives 4 context sentences and the true 5th; the wrong ending is a random
sentence of another document; the answer slot is random. Documents are shuffled with a fixed seed and split
200 / 100 into the validation-file role and the test-file role. At the CPU scale of the minis every variant is near
chance: it checks the pipeline, not transfer.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from genlab.data.sources.tiers import DatasetSpec, package_file
from genlab.data.text.chunks import read_lines
from genlab.data.text.sentences import split_sentences
from genlab.errors import DataError

VAL_FILE = "cloze_test_val__spring2016 - cloze_test_ALL_val.csv"
TEST_FILE = "cloze_test_test__spring2016 - cloze_test_ALL_test.csv"
HEADER = ("InputStoryid", "InputSentence1", "InputSentence2", "InputSentence3", "InputSentence4",
          "RandomFifthSentenceQuiz1", "RandomFifthSentenceQuiz2", "AnswerRightEnding")
RELEASE_SEED, RELEASE_N_DEV = 3535999445, 374
LEE = ("test/test_data/lee_background.cor", "5d78d6dafd953bbf65797bef09a9ffb9ec430583381be705f8fd460000f370fb")


@dataclass(frozen=True)
class Story:
    story_id: str
    context: str              # the 4 sentences joined with spaces (the release's ``' '.join``)
    endings: tuple[str, str]
    label: int                # 0 or 1: the right ending


def iter_stories(path: Path) -> Iterator[Story]:
    """The stories of one official CSV, one row at a time."""
    if not path.is_file():
        raise DataError(f"Story Cloze file {path} does not exist; data.path must hold '{VAL_FILE}' and '{TEST_FILE}' "
                        "(the ROCStories Spring 2016 cloze test, distributed on request by its authors).")
    rows = csv.reader(read_lines(path))
    header = next(rows, None)
    if header is None or tuple(c.strip() for c in header) != HEADER:
        raise DataError(f"{path}: the header must be {','.join(HEADER)}; is this a Story Cloze csv?")
    n = 0
    for i, row in enumerate(rows, start=2):
        if len(row) != len(HEADER):
            raise DataError(f"{path}, line {i}: {len(row)} columns, a Story Cloze row has {len(HEADER)}.")
        if row[7].strip() not in ("1", "2"):
            raise DataError(f"{path}, line {i}: AnswerRightEnding {row[7]!r} is not 1 or 2.")
        n += 1
        yield Story(row[0], " ".join(s.strip() for s in row[1:5]), (row[5].strip(), row[6].strip()), int(row[7]) - 1)
    if not n:
        raise DataError(f"{path} holds no stories.")


def read_stories(path: Path) -> list[Story]:
    return list(iter_stories(path))


def release_order(n: int, n_dev: int = RELEASE_N_DEV, seed: int = RELEASE_SEED) -> tuple[np.ndarray, np.ndarray]:
    """(train, dev) positions among ``n`` stories, as the release's ``train_test_split(test_size=n_dev,
    random_state=seed)``."""
    if not 0 < n_dev < n:
        raise DataError(f"data.n_dev={n_dev} must be between 1 and {n - 1} (the validation file has {n} stories).")
    order = np.random.RandomState(seed).permutation(n)
    return order[n_dev:], order[:n_dev]


def release_split(stories: list[Story], n_dev: int = RELEASE_N_DEV, seed: int = RELEASE_SEED
                  ) -> tuple[list[Story], list[Story]]:
    """(train, dev) as the release's ``train_test_split(test_size=n_dev, random_state=seed)``."""
    train, dev = release_order(len(stories), n_dev, seed)
    return [stories[i] for i in train], [stories[i] for i in dev]


STORY_CLOZE = DatasetSpec("story_cloze", (VAL_FILE, TEST_FILE), homepage="https://cs.rochester.edu/nlp/rocstories/",
                          notes="no public download: request the Spring 2016 cloze test files from the authors")


# ------------------------------------------------------------------------------------------------ mini
def build_story_cloze_mini(root: Path, seed: int = 0) -> None:
    docs = [split_sentences(" ".join(line.split()))
            for line in package_file("gensim", *LEE).read_text(encoding="utf-8").splitlines() if line.strip()]
    docs = [d for d in docs if d]
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(docs))
    for name, part in ((VAL_FILE, order[:200]), (TEST_FILE, order[200:])):
        rows = []
        for d in part:
            sents = docs[d]
            for w in range(len(sents) - 4):
                other = int(rng.choice([k for k in part if k != d]))
                wrong = docs[other][int(rng.integers(len(docs[other])))]
                right_first = bool(rng.integers(2))
                endings = (sents[w + 4], wrong) if right_first else (wrong, sents[w + 4])
                rows.append((f"lee{d:03d}-{w}", *sents[w:w + 4], *endings, "1" if right_first else "2"))
        with open(root / name, "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(HEADER)
            writer.writerows(rows)


STORY_CLOZE_MINI = DatasetSpec("story_cloze_mini", (VAL_FILE, TEST_FILE), build_mini=build_story_cloze_mini,
                               notes="Story Cloze csv layout from gensim lee_background.cor: GENERATED endings "
                                     "(true 5th sentence vs a sentence of another document)")
