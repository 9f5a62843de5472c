"""Document-classification readers (IMDB folders, Zhang et al. CSV) and the offline SST-2 / IMDB-format minis."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from genlab.data.finetune import doc_classification as docs
from genlab.data.finetune import glue
from genlab.data.finetune.minis import (
    NEWSGROUP_GLOBALS,
    build_imdb_mini,
    build_sst2_mini,
    newsgroup_posts,
)
from genlab.errors import DataError


def test_imdb_folder_layout_and_br_tags(tmp_path):
    for split in ("train", "test"):
        for label in ("pos", "neg"):
            (tmp_path / split / label).mkdir(parents=True)
    (tmp_path / "train" / "pos" / "0_9.txt").write_text("Great film.<br /><br />Loved it.")
    (tmp_path / "train" / "neg" / "1_2.txt").write_text("Dull.")
    ex = docs.read_imdb(tmp_path, "train")
    assert sorted((e.text_a, e.label) for e in ex) == [("Dull.", "neg"), ("Great film.  Loved it.", "pos")]
    with pytest.raises(DataError, match="holds no .txt"):
        docs.read_imdb(tmp_path, "test")
    with pytest.raises(DataError, match="aclImdb"):
        docs.read_imdb(tmp_path / "nope", "train")


def test_zhang_csv_title_and_body_joined(tmp_path):
    (tmp_path / "train.csv").write_text('"3","Wall St. Bears Claw Back","Reuters - Short-sellers\\nare back."\n'
                                        '"1","Title","Body with ""quotes"""\n')
    ex = docs.read_csv(tmp_path, "train", docs.get_dataset("ag_news"))
    assert [(e.text_a, e.label) for e in ex] == [("Wall St. Bears Claw Back Reuters - Short-sellers are back.", "3"),
                                                 ('Title Body with "quotes"', "1")]


def test_yelp_two_column_csv_and_bad_label(tmp_path):
    (tmp_path / "test.csv").write_text('"5","Best tacos."\n"6","??"\n')
    with pytest.raises(DataError, match=r"test.csv, line 2: label '6' is not one of 1..5"):
        docs.read_csv(tmp_path, "test", docs.get_dataset("yelp5"))
    (tmp_path / "test.csv").write_text('"2","Fine."\n')
    assert docs.read_csv(tmp_path, "test", docs.get_dataset("yelp2"))[0].text_a == "Fine."


def test_dataset_table():
    assert {k: d.n_classes for k, d in docs.DATASETS.items()} == {
        "imdb": 2, "yelp2": 2, "yelp5": 5, "dbpedia": 14, "ag_news": 4, "amazon2": 2, "amazon5": 5}
    with pytest.raises(DataError, match="unknown"):
        docs.get_dataset("sogou")


def test_sst2_mini_is_real_sst2_layout_with_human_labels(tmp_path):
    build_sst2_mini(tmp_path)
    t = glue.get_task("sst2")
    train = glue.read_split(t, tmp_path, t.train)
    dev = glue.read_split(t, tmp_path, t.dev["dev"])
    test = glue.read_split(t, tmp_path, t.test["SST-2"])
    assert (len(train), len(dev), len(test)) == (140, 40, 20)
    assert sum(e.label == "1" for e in dev) == 20  # balanced: majority baseline = 50%
    assert ("simplistic , silly and tedious .", "0") in {(e.text_a, e.label) for e in train + dev}
    assert not {e.text_a for e in train} & {e.text_a for e in dev + test}


def test_imdb_mini_from_newsgroup_posts(tmp_path):
    build_imdb_mini(tmp_path)
    train, test = docs.read_imdb(tmp_path, "train"), docs.read_imdb(tmp_path, "test")
    assert (len(train), len(test)) == (140, 60)
    assert sum(e.label == "pos" for e in test) == 30
    text = " ".join(e.text_a for e in train + test)
    assert "alt.atheism" not in text and "sci.space" not in text and "Newsgroups:" not in text


def test_newsgroup_unpickler_allows_only_known_globals():
    bodies, labels, names = newsgroup_posts()
    assert names == ["alt.atheism", "sci.space"] and sorted(set(labels)) == [0, 1] and len(bodies) == 200
    from genlab.safe_pickle import RefusedGlobal, loads, numpy_arrays

    with pytest.raises(RefusedGlobal, match="pathlib.*PosixPath"):
        loads(pickle.dumps(Path("x"), protocol=2), {**numpy_arrays(), **NEWSGROUP_GLOBALS})
