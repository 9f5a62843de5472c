"""SNLI (jsonl) and SciTail (tsv_format) readers, their tiers and minis, and their place in ClassificationDataModule
(dev for validation, the labelled test split for test)."""

from __future__ import annotations

import json

import pytest

from genlab.data.finetune import nli
from genlab.data.finetune.datamodule import ClassificationDataModule
from genlab.data.sources.tiers import locate
from genlab.errors import DataError


def snli_line(label, a="A man sleeps.", b="A person rests.", pair="p1"):
    return json.dumps({"annotator_labels": [label], "gold_label": label, "pairID": pair, "sentence1": a,
                       "sentence2": b}) + "\n"


def test_snli_reader_keeps_gold_pairs_and_drops_unresolved_ones(tmp_path):
    path = tmp_path / "snli_1.0_dev.jsonl"
    path.write_text(snli_line("entailment") + snli_line("-", pair="p2") + "\n" + snli_line("contradiction", pair="p3"))
    out = list(nli.read_snli(path))
    assert [(e.guid, e.label) for e in out] == [("p1", "entailment"), ("p3", "contradiction")]
    assert (out[0].text_a, out[0].text_b) == ("A man sleeps.", "A person rests.")
    path.write_text(snli_line("entails"))
    with pytest.raises(DataError, match="line 1: gold_label 'entails'"):
        list(nli.read_snli(path))
    path.write_text('{"gold_label": "neutral"}\n')
    with pytest.raises(DataError, match="line 1: not an SNLI JSON line"):
        list(nli.read_snli(path))


def test_scitail_reader_reads_premise_hypothesis_label_rows(tmp_path):
    path = tmp_path / "scitail_1.0_test.tsv"
    path.write_text("Cells divide.\tCells split.\tentails\nWater boils.\tIce melts.\tneutral\n")
    assert [(e.text_a, e.text_b, e.label) for e in nli.read_scitail(path)] == [
        ("Cells divide.", "Cells split.", "entails"), ("Water boils.", "Ice melts.", "neutral")]
    path.write_text("Cells divide.\tentails\n")
    with pytest.raises(DataError, match="line 1: 2 tab-separated columns"):
        list(nli.read_scitail(path))


def test_downloads_name_the_official_archives():
    assert nli.SNLI.spec().downloads[0].sha256 == "afb3d70a5af5d8de0d9d81e2637e0fb8c22d1235c2749d83125ca43dab0dbd3e"
    assert nli.SCITAIL.spec().files == tuple(f"tsv_format/scitail_1.0_{s}.tsv" for s in ("train", "dev", "test"))


@pytest.mark.parametrize("task", ["snli", "scitail"])
def test_minis_are_in_the_official_layout_and_feed_the_classification_datamodule(task, tmp_path):
    ds = nli.DATASETS[task]
    root = locate(nli.NLI_MINIS[task], "mini", cache_dir=tmp_path)
    splits = {s: ds.read_split(root, s) for s in nli.SPLITS}
    assert len(splits["dev"]) >= 190 and len(splits["train"]) >= 3900
    for exs in splits.values():
        assert {e.label for e in exs} == set(ds.labels)
    if task == "snli":  # the real files hold unresolved '-' pairs; the mini too, and the reader drops them
        raw = (root / ds.files["train"]).read_text().splitlines()
        assert sum(json.loads(line)["gold_label"] == "-" for line in raw) == len(raw) - len(splits["train"]) > 0
    dm = ClassificationDataModule(task, source="mini", cache_dir=str(tmp_path), vocab_size=300, max_seq_len=32)
    dm.setup("fit")
    assert dm.n_labels == len(ds.labels) and dm.dev_splits == ["dev"] and dm.test_split_names() == ["test"]
    assert len(dm.test_dataloader()) == 1 and len(dm.splits["test"]) == len(splits["test"])


def test_a_premise_with_several_hypotheses_is_tokenised_and_stored_once(tmp_path, monkeypatch):
    """MNLI/SNLI pair each premise with three hypotheses, in shuffled order: every distinct premise is tokenised
    once and its ids stored in its first row, later rows point there; the pairs read back are the per-row
    tokenisation, the entry is the same with two tokenising processes, and a full digest table stores later
    premises per row (memory stays bounded) with the same values."""
    import zlib

    import genlab.data.text.encoded_texts as et

    premises = [f"Premise {k} says something." for k in range(5)]
    rows = [(premises[(7 * i) % 5], f"Hypothesis {i}.", ("entailment", "neutral", "contradiction")[i % 3], f"p{i}")
            for i in range(30)]  # each premise six times, never twice in a row
    root = tmp_path / "snli"
    root.mkdir()
    for split in nli.SPLITS:
        (root / f"snli_1.0_{split}.jsonl").write_text("".join(snli_line(y, a, b, p) for a, b, y, p in rows))
    calls = []

    class Tok:
        identity, vocab_size = "crc32 words", 1010

        def encode(self, text):
            calls.append(text)
            return [10 + zlib.crc32(w.encode()) % 1000 for w in text.split()]

    monkeypatch.setattr(ClassificationDataModule, "_load_tokenizer", lambda self, texts: Tok())
    monkeypatch.setattr(et, "PIECE_TEXTS", 4)  # 8 pieces a split: both processes really encode
    dms = [ClassificationDataModule("snli", path=str(root), cache_dir=str(tmp_path / f"c{n}"), num_proc=n)
           for n in (1, 2)]
    for dm in dms:
        dm.setup("fit")
    assert sorted(calls) == sorted(3 * (premises + [b for _, b, _, _ in rows]))  # 3 splits, one process
    for split in nli.SPLITS:
        for dm in dms:
            assert [dm.splits[split].pair(i) for i in range(30)] == [(Tok().encode(a), Tok().encode(b))
                                                                     for a, b, _, _ in rows]
    for a in (tmp_path / "c1" / "encoded").glob("*/*.npy"):
        assert a.read_bytes() == (tmp_path / "c2" / "encoded" / a.parent.name / a.name).read_bytes(), a
    from genlab.data.finetune.datamodule import share_first_texts

    examples = list(nli.read_snli(root / "snli_1.0_train.jsonl"))
    assert [s for _, s in share_first_texts(examples)][:7] == [-1, -1, -1, -1, -1, 0, 1]
    capped = [s for _, s in share_first_texts(examples, limit=2)]
    assert capped[:7] == [-1, -1, -1, -1, -1, 0, 1] and capped[7:10] == [-1, -1, -1]  # premises 2-4: never kept
