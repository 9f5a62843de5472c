"""Story Cloze: the official CSV reader, the release's 1,497 / 374 split and the generated mini."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from genlab.data.finetune import story_cloze as sc
from genlab.data.sources.tiers import locate
from genlab.errors import DataError


def write(path, rows, header=sc.HEADER):
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def test_reader_joins_the_four_sentences_and_reads_the_right_ending(tmp_path):
    path = tmp_path / sc.VAL_FILE
    write(path, [("id1", "Ann woke.", "She ran.", "It rained.", "She got wet.", "She was happy.", "She dried off.",
                  "2")])
    (story,) = sc.read_stories(path)
    assert story.context == "Ann woke. She ran. It rained. She got wet."
    assert story.endings == ("She was happy.", "She dried off.") and story.label == 1
    write(path, [("id1", "a", "b", "c", "d", "e", "f", "3")])
    with pytest.raises(DataError, match="AnswerRightEnding '3'"):
        sc.read_stories(path)
    write(path, [], header=("id", "text"))
    with pytest.raises(DataError, match="header"):
        sc.read_stories(path)


def test_release_split_is_scikit_learns_train_test_split_with_the_release_seed():
    stories = [sc.Story(str(i), f"s{i}", ("a", "b"), i % 2) for i in range(1871)]
    train, dev = sc.release_split(stories)
    assert (len(train), len(dev)) == (1497, 374)
    assert sorted(s.story_id for s in train + dev) == sorted(s.story_id for s in stories)
    model_selection = pytest.importorskip("sklearn.model_selection")
    ref_train, ref_dev = model_selection.train_test_split(stories, test_size=374, random_state=sc.RELEASE_SEED)
    assert train == ref_train and dev == ref_dev


def test_mini_is_in_the_official_layout_with_a_true_and_a_foreign_ending(tmp_path):
    root = locate(sc.STORY_CLOZE_MINI, "mini", cache_dir=tmp_path)
    val, test = sc.read_stories(root / sc.VAL_FILE), sc.read_stories(root / sc.TEST_FILE)
    assert len(val) > 900 and len(test) > 350
    assert {s.story_id.split("-")[0] for s in val}.isdisjoint(s.story_id.split("-")[0] for s in test)
    labels = np.array([s.label for s in val + test])
    assert 0.4 < labels.mean() < 0.6  # the answer slot is random
