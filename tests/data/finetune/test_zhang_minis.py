"""The offline Zhang et al. CSV minis (Yelp-2/5, DBpedia, AG News, Amazon-2/5): real layout read by the real reader,
class counts, balance, determinism, and that each label is what its config says (human or generated rule)."""

from __future__ import annotations

import csv
from collections import Counter

import pytest

from genlab.data.finetune import doc_classification as docs
from genlab.data.finetune.datamodule import ClassificationDataModule
from genlab.data.finetune.minis import build_imdb_mini, newsgroup_posts
from genlab.data.finetune.zhang_minis import (
    AG_GROUPS,
    STAR_ARTICLES,
    ZHANG_MINIS,
    _article_sentences,
    section_paragraphs,
)

COLUMNS = {"yelp2": 2, "yelp5": 2, "amazon2": 3, "amazon5": 3, "dbpedia": 3, "ag_news": 3}
SIZES = {"yelp2": (140, 60), "amazon2": (140, 60), "yelp5": (500, 100), "amazon5": (500, 100),
         "dbpedia": (560, 140), "ag_news": (480, 120)}


def build(name, root):
    root.mkdir()
    ZHANG_MINIS[name].build_mini(root)
    return root


def raw_rows(path):
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.reader(f))


@pytest.mark.parametrize("name", sorted(ZHANG_MINIS))
def test_mini_is_the_real_csv_layout_balanced_and_deterministic(name, tmp_path):
    root = build(name, tmp_path / "a")
    ds = docs.get_dataset(name)
    train, test = docs.read_csv(root, "train", ds), docs.read_csv(root, "test", ds)
    assert (len(train), len(test)) == SIZES[name]
    for split in (train, test):
        counts = Counter(e.label for e in split)
        assert sorted(counts) == sorted(docs.labels_of(ds)) and len(set(counts.values())) == 1  # all, balanced
    lines = (root / "train.csv").read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(train) and all(line.startswith('"') and line.endswith('"') for line in lines)
    assert {len(r) for r in raw_rows(root / "train.csv") + raw_rows(root / "test.csv")} == {COLUMNS[name]}
    has_classes = name in ("dbpedia", "ag_news")  # as the real archives
    assert (root / "classes.txt").is_file() == has_classes
    if has_classes:
        assert len((root / "classes.txt").read_text().splitlines()) == ds.n_classes
    again = build(name, tmp_path / "b")
    for f in ZHANG_MINIS[name].files:
        assert (root / f).read_bytes() == (again / f).read_bytes(), f


@pytest.mark.parametrize("name", ["yelp2", "amazon2"])
def test_two_class_minis_keep_the_human_newsgroup_labels(name, tmp_path):
    root = build(name, tmp_path / name)
    bodies, labels, names = newsgroup_posts()
    label_of = {" ".join(b.split()): y + 1 for b, y in zip(bodies, labels)}
    rows = raw_rows(root / "train.csv") + raw_rows(root / "test.csv")
    assert len(rows) == 200
    for row in rows:
        body = " ".join(row[-1].replace("\\n", "\n").split())
        assert label_of[body] == int(row[0])
        assert not any(n in " ".join(row[1:]) for n in names)
    imdb = tmp_path / "imdb"
    imdb.mkdir()
    build_imdb_mini(imdb)
    imdb_test = {" ".join(e.text_a.split()) for e in docs.read_imdb(imdb, "test")}
    ds = docs.get_dataset(name)
    own_test = {" ".join(e.text_a.split()) for e in docs.read_csv(root, "test", ds)}
    assert len(own_test) == 60 and not own_test & imdb_test  # each mini holds out its own 30 %
    if name == "amazon2":
        titled = [r for r in rows if r[1]]
        assert len(titled) > 150 and any(r[1].startswith("Re: ") for r in titled)


def test_dbpedia_and_ag_labels_are_the_article_or_group_of_origin(tmp_path):
    paras = section_paragraphs(60, 10)
    root = build("dbpedia", tmp_path / "dbpedia")
    classes = (root / "classes.txt").read_text().splitlines()
    train, test = raw_rows(root / "train.csv"), raw_rows(root / "test.csv")
    for cls, title, content in train + test:
        assert (title, content) in paras[classes[int(cls) - 1]]
    assert not {r[2] for r in train} & {r[2] for r in test}
    paras = section_paragraphs(45, 2)
    root = build("ag_news", tmp_path / "ag")
    assert (root / "classes.txt").read_text().splitlines() == [n for n, _ in AG_GROUPS.values()]
    for cls, title, text in raw_rows(root / "train.csv") + raw_rows(root / "test.csv"):
        assert any((title, text) in paras[a] for a in AG_GROUPS[int(cls)][1])


@pytest.mark.parametrize("name", ["yelp5", "amazon5"])
def test_star_minis_label_is_one_plus_sentences_of_the_first_article(name, tmp_path):
    first, second = (set(_article_sentences(a)) for a in STAR_ARTICLES[name])
    root = build(name, tmp_path / name)
    seen = {}
    for split in ("train", "test"):
        seen[split] = set()
        for row in raw_rows(root / f"{split}.csv"):
            text = " ".join(row[1:])
            sentences_first = [s for s in first if s in text]
            sentences_second = [s for s in second if s in text]
            assert len(sentences_first) + len(sentences_second) == 4
            assert int(row[0]) == 1 + len(sentences_first)
            seen[split].update(sentences_first + sentences_second)
    assert not seen["train"] & seen["test"]  # test sentences are never trained on


@pytest.mark.parametrize("name", sorted(ZHANG_MINIS))
def test_datamodule_reads_each_mini_offline(name, tmp_path):
    dm = ClassificationDataModule(name, source="mini", cache_dir=str(tmp_path), vocab_size=2000, max_seq_len=96)
    dm.setup("fit")
    ds = docs.get_dataset(name)
    assert dm.n_labels == ds.n_classes
    assert (len(dm.splits["train"]), len(dm.splits["test"])) == SIZES[name]
    assert sorted(set(dm.splits["test"].labels.tolist())) == list(range(ds.n_classes))


@pytest.mark.parametrize("name", sorted(docs.DATASETS))
def test_each_mini_preset_pair_reads_its_own_mini_on_one_schedule(name, compose_cfg):
    xlnet, bert = (compose_cfg([f"experiment={arch}_{name}_mini"]) for arch in ("xlnet", "bert"))
    for cfg in (xlnet, bert):
        assert (cfg.data.task, cfg.data.source) == (name, "mini")
        assert cfg.task.n_labels == docs.get_dataset(name).n_classes
    schedule = ("max_steps", "val_check_interval", "gradient_clip_val")
    assert [xlnet.trainer[k] for k in schedule] == [bert.trainer[k] for k in schedule]
    assert xlnet.task.optimizer.lr == bert.task.optimizer.lr
    assert xlnet.task.scheduler.warmup_steps == bert.task.scheduler.warmup_steps
