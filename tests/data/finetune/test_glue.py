"""GLUE readers on fixtures in each task's real TSV layout, bad rows, submission format, input layouts (XLNet's
and BERT's)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from genlab.data.finetune import glue
from genlab.data.finetune.datamodule import CLS_ID, SEP_ID, encode_pair, truncate_pair
from genlab.errors import DataError

# one header + rows per task, columns exactly as in the GLUE download
FIXTURES = {
    "cola": ("train.tsv", None, "gj04\t1\t\tThe sailors rode the breeze clear of the rocks.\n"
                                "gj04\t0\t*\tThe more we study verbs, the crazier they get get.\n"),
    "sst2": ("train.tsv", "sentence\tlabel", "a gorgeous film \t1\nflat and dull \t0\n"),
    "mrpc": ("train.tsv", "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String",
             "1\t702876\t702977\tAmrozi accused his brother.\tReferring to him, Amrozi accused.\n"),
    "stsb": ("train.tsv", "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore",
             "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane is taking off.\tAn air plane is taking off.\t5.000\n"),
    "qqp": ("train.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
            "133273\t213221\t213222\tHow is the life of a math student?\tWhich level of prepration is enough?\t0\n"),
    "mnli": ("train.tsv", "\t".join(["index", "promptID", "pairID", "genre", "s1bp", "s2bp", "s1p", "s2p",
                                      "sentence1", "sentence2", "label1", "gold_label"]),
             "0\t31193\t31193n\tgovernment\t(..)\t(..)\t(..)\t(..)\tConceptually cream skimming has two dimensions.\t"
             "Product and geography are what make cream skimming work.\tneutral\tneutral\n"),
    "qnli": ("train.tsv", "index\tquestion\tsentence\tlabel",
             "0\tWhen did the third Digimon series begin?\tUnlike the two seasons before it.\tnot_entailment\n"),
    "rte": ("train.tsv", "index\tsentence1\tsentence2\tlabel",
            "0\tNo Weapons of Mass Destruction Found in Iraq Yet.\tWeapons of Mass Destruction Found in Iraq.\tnot_entailment\n"),
    "wnli": ("train.tsv", "index\tsentence1\tsentence2\tlabel",
             "0\tI stuck a pin through a carrot.\tThe carrot had a hole.\t1\n"),
}
EXPECTED = {
    "cola": ("The sailors rode the breeze clear of the rocks.", None, "1"),
    "sst2": ("a gorgeous film ", None, "1"),
    "mrpc": ("Amrozi accused his brother.", "Referring to him, Amrozi accused.", "1"),
    "stsb": ("A plane is taking off.", "An air plane is taking off.", 5.0),
    "qqp": ("How is the life of a math student?", "Which level of prepration is enough?", "0"),
    "mnli": ("Conceptually cream skimming has two dimensions.",
             "Product and geography are what make cream skimming work.", "neutral"),
    "qnli": ("When did the third Digimon series begin?", "Unlike the two seasons before it.", "not_entailment"),
    "rte": ("No Weapons of Mass Destruction Found in Iraq Yet.", "Weapons of Mass Destruction Found in Iraq.",
            "not_entailment"),
    "wnli": ("I stuck a pin through a carrot.", "The carrot had a hole.", "1"),
}


def write(root: Path, name: str, header: str | None, body: str) -> None:
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    (root / name).write_text((header + "\n" if header else "") + body, encoding="utf-8")


@pytest.mark.parametrize("task", sorted(FIXTURES))
def test_reader_uses_each_tasks_real_columns(tmp_path, task):
    name, header, body = FIXTURES[task]
    write(tmp_path, name, header, body)
    t = glue.get_task(task)
    ex = glue.read_split(t, tmp_path, t.train)
    assert (ex[0].text_a, ex[0].text_b, ex[0].label) == EXPECTED[task]


def test_every_glue_task_and_the_diagnostic_are_covered():
    assert set(glue.TASKS) == {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli"}
    assert set(glue.get_task("MNLI").test) == {"MNLI-m", "MNLI-mm", "AX"}
    assert set(glue.get_task("mnli").dev) == {"dev_matched", "dev_mismatched"}
    assert glue.get_task("STS-B").is_regression


def test_test_split_is_unlabelled_with_indices(tmp_path):
    write(tmp_path, "test.tsv", "index\tquestion1\tquestion2", "0\tWhy?\tHow?\n1\tWho?\tWhom?\n")
    t = glue.get_task("qqp")
    ex = glue.read_split(t, tmp_path, t.test["QQP"])
    assert [(e.guid, e.text_a, e.text_b, e.label) for e in ex] == [("0", "Why?", "How?", None),
                                                                   ("1", "Who?", "Whom?", None)]


def test_malformed_row_names_file_and_line(tmp_path):
    write(tmp_path, "train.tsv", "index\tsentence1\tsentence2\tlabel",
          "0\ta\tb\tentailment\n1\tonly one column\n")
    t = glue.get_task("rte")
    with pytest.raises(DataError, match=r"train.tsv, line 3"):
        glue.read_split(t, tmp_path, t.train)


def test_label_outside_the_label_set(tmp_path):
    write(tmp_path, "train.tsv", "sentence\tlabel", "fine\t1\nbad\t2\n")
    t = glue.get_task("sst2")
    with pytest.raises(DataError, match=r"line 3: label '2' is not one of \['0', '1'\]"):
        glue.read_split(t, tmp_path, t.train)


def test_stsb_score_must_be_a_number(tmp_path):
    name, header, body = FIXTURES["stsb"]
    write(tmp_path, name, header, body.replace("5.000", "high"))
    t = glue.get_task("stsb")
    with pytest.raises(DataError, match="not a number"):
        glue.read_split(t, tmp_path, t.train)


def test_missing_file_and_unknown_task(tmp_path):
    t = glue.get_task("rte")
    with pytest.raises(DataError, match="does not exist"):
        glue.read_split(t, tmp_path, t.train)
    with pytest.raises(DataError, match="unknown"):
        glue.get_task("squad")


def test_submission_format(tmp_path):
    glue.write_submission(tmp_path / "MNLI-m.tsv", glue.get_task("mnli"), ["0", "1"], [2, 0])
    assert (tmp_path / "MNLI-m.tsv").read_text() == "index\tprediction\n0\tneutral\n1\tcontradiction\n"
    glue.write_submission(tmp_path / "STS-B.tsv", glue.get_task("stsb"), ["0"], [3.14159])
    assert (tmp_path / "STS-B.tsv").read_text() == "index\tprediction\n0\t3.142\n"


# ---- input layouts -----------------------------------------------------------------------------------------------
def test_c21_xlnet_layout_left_padding_cls_last_segments():
    ids, seg, mask = encode_pair([11, 12, 13], [21, 22], 10, "xlnet")
    assert ids.tolist() == [0, 0, 11, 12, 13, SEP_ID, 21, 22, SEP_ID, CLS_ID]
    assert seg.tolist() == [4, 4, 0, 0, 0, 0, 1, 1, 1, 2]
    assert mask.tolist() == [0, 0, 1, 1, 1, 1, 1, 1, 1, 1]
    ids, seg, mask = encode_pair([11, 12], None, 5, "xlnet")  # single sentence: no B, no second <sep>
    assert ids.tolist() == [0, 11, 12, SEP_ID, CLS_ID] and seg.tolist() == [4, 0, 0, 0, 2]


def test_bert_layout_cls_first_right_padding():
    ids, seg, mask = encode_pair([11, 12], [21], 8, "bert")
    assert ids.tolist() == [CLS_ID, 11, 12, SEP_ID, 21, SEP_ID, 0, 0]
    assert seg.tolist() == [0, 0, 0, 0, 1, 1, 0, 0]
    assert mask.tolist() == [1, 1, 1, 1, 1, 1, 0, 0]


def test_pair_truncation_drops_from_the_longer_sequence():
    a, b = truncate_pair(list(range(10)), [100, 101, 102], 8)
    assert a == [0, 1, 2, 3, 4] and b == [100, 101, 102]
    a, b = truncate_pair([1, 2], [5, 6, 7, 8, 9], 4)
    assert a == [1, 2] and b == [5, 6]
    ids, _, mask = encode_pair(list(range(5, 30)), None, 8, "xlnet")
    assert ids.tolist() == [5, 6, 7, 8, 9, 10, SEP_ID, CLS_ID] and np.all(mask == 1)


def test_a_file_that_is_not_utf8_is_named(tmp_path):
    (tmp_path / "train.tsv").write_bytes(b"sentence\tlabel\n\xff\xfe fine\t1\n")
    t = glue.get_task("sst2")
    with pytest.raises(DataError, match=r"train.tsv is not valid UTF-8 text \(byte offset 15"):
        glue.read_split(t, tmp_path, t.train)
