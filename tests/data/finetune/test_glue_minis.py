"""The offline GLUE minis: each is written in its task's real TSV layout and parsed by the real readers, is
deterministic and balanced, and its generated labels follow the documented rule."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from genlab.data.finetune import glue
from genlab.data.finetune.datamodule import MINIS, ClassificationDataModule
from genlab.data.finetune.glue_minis import (
    GLUE_MINIS,
    N_EVAL,
    N_TRAIN,
    STSB_TRAIN,
    question,
)

TASKS = sorted(GLUE_MINIS)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    out = {}
    for task, spec in GLUE_MINIS.items():
        root = tmp_path_factory.mktemp(task)
        spec.build_mini(root)
        out[task] = root
    return out


def read_all(task: str, root: Path) -> dict[str, list[glue.Example]]:
    t = glue.get_task(task)
    splits = {"train": glue.read_split(t, root, t.train)}
    splits.update({n: glue.read_split(t, root, s) for n, s in t.dev.items()})
    splits.update({n: glue.read_split(t, root, s) for n, s in t.test.items()})
    return splits


def test_every_glue_task_has_its_own_mini():
    assert set(GLUE_MINIS) | {"sst2"} == set(glue.TASKS)
    assert all(MINIS[t] is GLUE_MINIS[t] for t in GLUE_MINIS)


@pytest.mark.parametrize("task", TASKS)
def test_readers_parse_each_mini_in_its_real_layout(built, task):
    t = glue.get_task(task)
    splits = read_all(task, built[task])
    sizes = {n: len(v) for n, v in splits.items()}
    assert sizes["train"] == (STSB_TRAIN if task == "stsb" else N_TRAIN) and all(sizes[n] == N_EVAL for n in sizes if n != "train")
    for name in [*t.test]:  # unlabelled test files carry the GLUE index column
        assert all(e.label is None for e in splits[name]) and splits[name][0].guid == "0"
    labelled = [splits["train"], *(splits[n] for n in t.dev)]
    pair = t.train.b is not None
    for examples in labelled:
        assert all(e.text_a and (e.text_b is not None) == pair for e in examples)
        if t.is_regression:
            assert all(0.0 <= e.label <= 5.0 for e in examples)
        else:  # balanced: the majority-class baseline is 1 / n_classes
            counts = [sum(e.label == c for e in examples) for c in t.labels]
            assert max(counts) - min(counts) <= 1, counts


def test_headers_and_column_counts_are_the_real_ones(built):
    first = {task: (built[task] / "train.tsv").read_text().splitlines()[0] for task in TASKS}
    assert len(first["cola"].split("\t")) == 4 and first["cola"].split("\t")[2] in ("", "*")  # headerless
    assert first["mrpc"] == "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
    assert first["qqp"] == "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate"
    assert first["stsb"].split("\t")[-3:] == ["sentence1", "sentence2", "score"]
    assert first["mnli"].split("\t")[8:] == ["sentence1", "sentence2", "label1", "gold_label"]
    assert first["qnli"] == "index\tquestion\tsentence\tlabel"
    assert first["rte"] == first["wnli"] == "index\tsentence1\tsentence2\tlabel"
    dev_m = (built["mnli"] / "dev_matched.tsv").read_text().splitlines()[0].split("\t")
    assert len(dev_m) == 16 and dev_m[10:] == [f"label{i}" for i in range(1, 6)] + ["gold_label"]
    assert (built["mnli"] / "diagnostic" / "diagnostic.tsv").read_text().startswith("index\tsentence1\tsentence2\n")


def test_minis_are_deterministic(built, tmp_path):
    for task in ("mnli", "stsb"):
        GLUE_MINIS[task].build_mini(tmp_path / task)
        for f in sorted((built[task]).rglob("*.tsv")):
            assert (tmp_path / task / f.relative_to(built[task])).read_bytes() == f.read_bytes(), f


def _words(s: str) -> str:
    return " ".join(s.rstrip(".").split()).lower()


def test_generated_labels_follow_their_rules(built):
    ex = read_all("mnli", built["mnli"])
    for e in ex["train"][:300]:
        inside = _words(e.text_b) in _words(e.text_a)
        if e.label == "entailment":
            assert inside
        elif e.label == "contradiction":
            assert re.search(r"\b(not|never)\b", e.text_b)
    cola = read_all("cola", built["cola"])["train"]
    by_words = {}
    for e in cola:
        by_words.setdefault(e.label, []).append(e.text_a)
    assert all(s.split() != sorted(s.split()) or len(s.split()) < 2 for s in by_words["0"][:5])
    stsb = read_all("stsb", built["stsb"])["train"]
    kept = [np.mean([a == b for a, b in zip(e.text_a.split(), e.text_b.split())]) for e in stsb]
    assert np.corrcoef(kept, [e.label for e in stsb])[0, 1] > 0.95
    assert {e.label for e in stsb if e.text_a == e.text_b} == {5.0}
    qnli = read_all("qnli", built["qnli"])["train"]
    assert all(question(e.text_b) == e.text_a for e in qnli if e.label == "entailment")
    mrpc = read_all("mrpc", built["mrpc"])["train"]
    overlap = {y: np.mean([len(set(e.text_a.split()) & set(e.text_b.split())) / len(set(e.text_a.split()))
                           for e in mrpc if e.label == y]) for y in ("0", "1")}
    assert overlap["1"] > 0.8 > 0.3 > overlap["0"], overlap


def test_mnli_mismatched_dev_comes_from_held_out_articles(built):
    ex = read_all("mnli", built["mnli"])
    genres = {}
    for name in ("train.tsv", "dev_matched.tsv", "dev_mismatched.tsv"):
        rows = (built["mnli"] / name).read_text().splitlines()[1:]
        genres[name] = {r.split("\t")[3] for r in rows}
    assert genres["dev_matched.tsv"] <= genres["train.tsv"]
    assert not genres["dev_mismatched.tsv"] & genres["train.tsv"]
    assert len(ex["AX"]) == N_EVAL


@pytest.mark.parametrize("task", ["mnli", "stsb"])
def test_datamodule_reads_the_mini_through_the_cache(tmp_path, task):
    dm = ClassificationDataModule(task, source="mini", cache_dir=str(tmp_path), vocab_size=500, max_seq_len=48)
    dm.setup("fit")
    assert (tmp_path / "mini" / f"glue_{task}_mini-v{GLUE_MINIS[task].mini_version}").is_dir()
    if task == "mnli":
        assert dm.dev_splits == ["dev_matched", "dev_mismatched"] and dm.predict_splits == ["MNLI-m", "MNLI-mm", "AX"]
        assert set(dm.splits["train"].labels.tolist()) == {0, 1, 2}
    else:
        assert dm.is_regression and dm.splits["dev"].labels.dtype == np.float32
