"""k-fold cross-validation of a document-classification set (the GPT mini's G2 check: 5-fold CV over the newsgroups
mini's 200 posts): stratified folds that are disjoint, cover the set and never put a test example in training."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from genlab.data.finetune.datamodule import ClassificationDataModule
from genlab.data.finetune.folds import fold_split, stratified_folds
from genlab.data.finetune.gpt_datamodules import GPTClassificationDataModule
from genlab.errors import ConfigError, DataError


def test_folds_are_disjoint_cover_the_set_and_are_stratified():
    labels = ["a"] * 23 + ["b"] * 11 + ["c"] * 6
    tests = []
    for k in range(5):
        train, test = fold_split(labels, 5, k)
        assert not set(train) & set(test) and sorted(train + test) == list(range(len(labels)))
        assert train == sorted(train) and test == sorted(test)
        assert len(test) == 8  # 40 / 5: the deal carries over from class to class
        counts = Counter(labels[i] for i in test)
        assert counts["a"] in (4, 5) and counts["b"] in (2, 3) and counts["c"] in (1, 2)
        tests += test
    assert sorted(tests) == list(range(len(labels)))  # every example is tested exactly once


def test_fold_assignment_depends_on_the_labels_only():
    labels = [0, 1] * 50
    ids = stratified_folds(labels, 5)
    assert np.array_equal(ids, stratified_folds(list(labels), 5))
    assert not np.array_equal(ids, np.arange(100) % 5)  # shuffled within each class, not the file order
    assert not np.array_equal(ids, stratified_folds(labels, 5, seed=1))


@pytest.mark.parametrize("n_folds, fold, match", [(1, 0, "data.n_folds=1"), (5, 5, "data.fold=5"),
                                                  (5, -1, "data.fold=-1"), (2.5, 0, "data.n_folds=2.5")])
def test_bad_fold_settings_are_config_errors(n_folds, fold, match):
    with pytest.raises(ConfigError, match=match):
        ClassificationDataModule("imdb", source="mini", n_folds=n_folds, fold=fold)


def test_more_folds_than_examples():
    with pytest.raises(ConfigError, match="lower data.n_folds"):
        fold_split([0, 1, 0], 4, 0)


def test_glue_tasks_keep_their_dev_split():
    with pytest.raises(DataError, match="data.n_folds=null"):
        GPTClassificationDataModule("sst2", source="mini", n_folds=5)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("folds_cache"))


def test_newsgroups_mini_five_folds_never_leak_test_posts(cache):
    """The 200 posts in 5 folds of 40 (20 per newsgroup); a fold's test posts are in no other part of its run, not
    even in the BPE trained on its training text (its cache key names the fold)."""
    seen, tokenizers = [], set()
    for k in range(5):
        dm = GPTClassificationDataModule("imdb", source="mini", cache_dir=cache, vocab_size=300, max_seq_len=64,
                                         n_folds=5, fold=k)
        dm.prepare_data()
        dm.setup("fit")
        train, test = dm.splits["train"], dm.splits["test"]
        assert (len(train), len(test)) == (160, 40) and dm.dev_splits == ["test"]
        assert not set(train.guids) & set(test.guids)
        assert Counter(test.labels) == {0: 20, 1: 20}
        assert dm.identity()["fold"] == f"{k}/5"
        seen += test.guids
        tokenizers.add(dm.tokenizer.identity)
    assert len(seen) == len(set(seen)) == 200
    assert len(tokenizers) == 5  # one BPE per fold's training text, none shared through the cache
    own = GPTClassificationDataModule("imdb", source="mini", cache_dir=cache, vocab_size=300, max_seq_len=64)
    own.prepare_data()
    own.setup("fit")
    assert (len(own.splits["train"]), len(own.splits["test"])) == (140, 60) and "fold" not in own.identity()
    assert sorted(own.splits["train"].guids + own.splits["test"].guids) == sorted(seen)
