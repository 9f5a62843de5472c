"""The offline GLUE minis: each is written in its task's real TSV layout and parsed by the real readers, is
deterministic and balanced, and its generated labels follow the documented rule."""

from __future__ import annotations

import hashlib
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
    mnli_with_dev_pairs,
    question,
)
from genlab.errors import DataError

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


# sha256 of the MNLI mini's files as first published: the larger midi evaluation must leave them byte-identical
MNLI_MINI_SHA256 = {
    "dev_matched.tsv": "6be82ba43e22eb4ebecada4d7cf119084c84a4a53246e9ae70792b1ffe68933a",
    "dev_mismatched.tsv": "c927b10bceeff0040706724175b2b0cb5d65b2a6f0c385705f4242ee16e49eaa",
    "diagnostic/diagnostic.tsv": "38571d850dd9d488fd69ee364cd0800d3d2a91096510f515f35a79aeb63a4089",
    "test_matched.tsv": "5abfef6943d2466a579e44b24d3d73357f27322a20505d8e7688f185ab5153e0",
    "test_mismatched.tsv": "9fa219747c700ba944d04ab1449651eb4eafc7304d5784bebe2b9ee730ceebe7",
    "train.tsv": "b337d84f5f9c35054ea7e3c0ebdc8519ba03538bd6fce3014bcd0c9c2e5e0a4e",
}


def test_mnli_mini_bytes_are_unchanged(built):
    assert {f: hashlib.sha256((built["mnli"] / f).read_bytes()).hexdigest() for f in MNLI_MINI_SHA256} == MNLI_MINI_SHA256


def test_larger_mnli_dev_extends_the_mini_with_unused_premises(built, tmp_path):
    mnli_with_dev_pairs(2000).build_mini(tmp_path)  # matched takes 2,000; mismatched runs out at 840
    big = read_all("mnli", tmp_path)
    assert {n: len(v) for n, v in big.items() if n.startswith("dev")} == {"dev_matched": 2000, "dev_mismatched": 840}
    for name in MNLI_MINI_SHA256:
        old, new = (built["mnli"] / name).read_text().splitlines(), (tmp_path / name).read_text().splitlines()
        assert new[:len(old)] == old and (name.startswith("dev") or new == old), name

    def premises(root: Path, name: str) -> list[str]:  # promptID = 10000 + the premise's sentence
        return [r.split("\t")[1] for r in (root / name).read_text().splitlines()[1:]]
    others = {p for n in ("train", "dev_matched", "dev_mismatched", "test_matched", "test_mismatched")
              for p in premises(built["mnli"], f"{n}.tsv")}
    for name in ("dev_matched", "dev_mismatched"):
        extra = premises(tmp_path, f"{name}.tsv")[N_EVAL:]
        assert len(set(extra)) == len(extra) and not set(extra) & others, name
        counts = [sum(e.label == c for e in big[name][N_EVAL:]) for c in glue.get_task("mnli").labels]
        assert max(counts) - min(counts) <= 1, counts
    train_genres = {e.split("\t")[3] for e in (built["mnli"] / "train.tsv").read_text().splitlines()[1:]}
    assert not {r.split("\t")[3] for r in (tmp_path / "dev_mismatched.tsv").read_text().splitlines()[1:]} & train_genres


def test_mini_dev_pairs_is_the_mnli_minis_own_key(tmp_path):
    dm = ClassificationDataModule("mnli", source="mini", cache_dir=str(tmp_path), mini_dev_pairs=2000)
    assert dm._spec().name == "glue_mnli_mini_dev2000"  # its own cache entry: the mini's stays as it is
    with pytest.raises(DataError, match="data.mini_dev_pairs=2000"):
        ClassificationDataModule("sst2", source="mini", mini_dev_pairs=2000)
    with pytest.raises(DataError, match="data.mini_dev_pairs=2000"):
        ClassificationDataModule("mnli", source="path", path=str(tmp_path), mini_dev_pairs=2000)
    with pytest.raises(DataError, match="at least 200"):
        ClassificationDataModule("mnli", source="mini", mini_dev_pairs=100)._spec()
