"""RACE reader and 4-way features (the released XLNet RACE script: qa truncated to its last pieces, no cross-option
contamination)."""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest

import genlab.data.text.encoded_texts as et
from genlab.data.finetune.datamodule import CLS_ID, SEP_ID
from genlab.data.finetune.race import (
    encode_question,
    qa_text,
    read_race,
    unique_ids,
)
from genlab.data.finetune.race_mini import build_race_mini
from genlab.errors import DataError


class FakeTok:
    """One id per whitespace word (ids >= 10), enough to check layouts."""

    def __init__(self):
        self.vocab: dict[str, int] = {}

    def encode(self, text):
        return [self.vocab.setdefault(w, 10 + len(self.vocab)) for w in text.split()]


def write(root, split, level, name, obj):
    folder = root / split / level
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(obj))


def race_obj(**kw):
    obj = {"article": "Tom went to the park .", "questions": ["Where did Tom go ?", "Tom went to the _ ."],
           "options": [["park", "zoo", "school", "shop"], ["park", "zoo", "school", "shop"]],
           "answers": ["A", "A"], "id": "middle1.txt"}
    obj.update(kw)
    return obj


def test_reader_levels_and_labels(tmp_path):
    for level in ("middle", "high"):
        write(tmp_path, "dev", level, "1.txt", race_obj(answers=["A", "C"]))
    qs = read_race(tmp_path, "dev")
    assert [(q.level, q.label) for q in qs] == [(0, 0), (0, 2), (1, 0), (1, 2)]
    assert qs[1].qid == "middle1.txt-1"



def test_question_ids_must_be_unique_within_a_split(tmp_path):
    for level in ("middle", "high"):  # both files claim id middle1.txt: predictions keyed by id would collide
        write(tmp_path, "dev", level, "1.txt", race_obj())
    with pytest.raises(DataError, match="'middle1.txt-0' occurs twice"):
        list(unique_ids(read_race(tmp_path, "dev"), "dev"))
    write(tmp_path, "dev", "high", "1.txt", race_obj(id="high1.txt"))
    assert len(list(unique_ids(read_race(tmp_path, "dev"), "dev"))) == 4

def test_missing_option_and_bad_answer_name_the_file(tmp_path):
    write(tmp_path, "train", "middle", "7.txt", race_obj(options=[["a", "b", "c"], ["a", "b", "c", "d"]]))
    (tmp_path / "train" / "high").mkdir(parents=True)
    with pytest.raises(DataError, match=r"7.txt, question 0: 3 options, RACE needs exactly 4"):
        read_race(tmp_path, "train")
    write(tmp_path, "train", "middle", "7.txt", race_obj(answers=["A", "E"]))
    with pytest.raises(DataError, match="answer 'E'"):
        read_race(tmp_path, "train")
    with pytest.raises(DataError, match="does not exist"):
        read_race(tmp_path, "test")


def test_qa_text_fills_blank_or_appends():
    assert qa_text("Tom went to the _ .", "park") == "Tom went to the park ."
    assert qa_text("Where did Tom go ?", "park") == "Where did Tom go ? park"


def test_c21_four_sequences_qa_last_pieces_no_contamination(tmp_path):
    write(tmp_path, "dev", "middle", "1.txt", race_obj())
    (tmp_path / "dev" / "high").mkdir(parents=True)
    q = read_race(tmp_path, "dev")[0]
    tok = FakeTok()
    ids, seg, mask = encode_question(q, tok, max_seq_len=16, max_qa_length=4, layout="xlnet")
    assert ids.shape == (4, 16)
    article = tok.encode(q.article)
    for i, opt in enumerate(q.options):
        qa = tok.encode(qa_text(q.question, opt))[-4:]  # last 4 pieces
        real = ids[i][mask[i] == 1].tolist()
        assert real == article + [SEP_ID] + qa + [SEP_ID] + [CLS_ID]  # fresh article copy: nothing from option i-1
        assert seg[i][mask[i] == 1].tolist() == [0] * (len(article) + 1) + [1] * (len(qa) + 1) + [2]
    # a long article is cut from its end to fit T - 3 - |qa|
    ids, _, mask = encode_question(q, tok, max_seq_len=10, max_qa_length=4, layout="xlnet")
    assert np.all(mask == 1) and ids[0, :3].tolist() == article[:3]


def test_race_mini_layout_and_generated_labels(tmp_path):
    build_race_mini(tmp_path, n_paragraphs=60)
    train = read_race(tmp_path, "train")
    assert len(train) > 20 and {q.label for q in train} == {0, 1, 2, 3}
    for q in train:
        assert "_" in q.question and q.options[q.label].lower() in q.article.lower()
        assert all(o.lower() not in q.article.lower() for i, o in enumerate(q.options) if i != q.label)
    assert "generated" in (tmp_path / "README.mini").read_text()


def test_race_mini_full_build_splits_by_article_balanced_letters(tmp_path):
    """The whole mini: several questions per file, no article in two splits, dev/test large enough that one
    question is under 1 point, answer letters balanced in every split, middle and high in every split, and no
    options-only cue (longest, shortest or capitalised option) above chance + 7 points."""
    build_race_mini(tmp_path)
    articles = {}
    for split in ("train", "dev", "test"):
        qs = read_race(tmp_path, split)
        assert len(qs) >= (1500 if split == "train" else 150), (split, len(qs))
        counts = np.bincount([q.label for q in qs], minlength=4)
        assert counts.max() - counts.min() <= 1, (split, counts)
        assert {q.level for q in qs} == {0, 1}
        articles[split] = {q.article for q in qs}
        assert len(qs) > 1.2 * len(articles[split])  # several questions per article
        for cue in (len, lambda o: -len(o), lambda o: o[0].isupper()):  # the options' form says nothing
            hits = sum(max(range(4), key=lambda i: cue(q.options[i])) == q.label for q in qs)
            assert hits / len(qs) < 0.32, (split, hits / len(qs))
    assert not (articles["train"] & articles["dev"] or articles["train"] & articles["test"]
                or articles["dev"] & articles["test"])


def test_missing_option_list_null_option_or_missing_key_name_the_file(tmp_path):
    (tmp_path / "dev" / "high").mkdir(parents=True)
    write(tmp_path, "dev", "middle", "3.txt", race_obj(options=[["a", "b", "c", "d"]]))  # 2 questions, 1 option list
    with pytest.raises(DataError, match=r"3.txt: 2 questions, 1 option lists and 2 answers"):
        read_race(tmp_path, "dev")
    write(tmp_path, "dev", "middle", "3.txt", race_obj(options=[["a", None, "c", "d"], ["a", "b", "c", "d"]]))
    with pytest.raises(DataError, match=r"3.txt, question 0: option B is None"):
        read_race(tmp_path, "dev")
    obj = race_obj()
    del obj["options"]
    write(tmp_path, "dev", "middle", "3.txt", obj)
    with pytest.raises(DataError, match=r"3.txt: not a RACE JSON file.*replace it with the file from RACE.tar.gz"):
        read_race(tmp_path, "dev")
    for data, message in ((b"", r"3.txt: not a RACE JSON file.*\(the file is empty\)"),
                          (b'{"a": "\x00"}', r"3.txt is a binary file \(NUL byte at offset 7\)"),
                          (b'{"article": "caf\xe9"}', r"3.txt is not valid UTF-8 text \(byte offset 16")):
        (tmp_path / "dev" / "middle" / "3.txt").write_bytes(data)
        with pytest.raises(DataError, match=message):
            read_race(tmp_path, "dev")


def _wordpiece_folder(path):
    """A BERT-style vocab.txt whose [CLS]/[SEP]/[PAD] ids differ from XLNet's fixed ones."""
    pytest.importorskip("tokenizers", reason="WordPiece tokenisation needs the tokenizers package")
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    tokens = ["tom", "went", "to", "the", "park", "zoo", "[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]", ".", "?", "_",
              "where", "did", "go", "school", "shop", *letters, *("##" + c for c in letters)]
    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    (path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    return path


def test_bert_layout_with_a_wordpiece_checkpoint_tokenizer(tmp_path):
    from genlab.data.tokenizers.from_checkpoint import load_tokenizer

    tok = load_tokenizer(_wordpiece_folder(tmp_path / "bert"))
    q = read_race_obj(tmp_path)[1]  # "Tom went to the _ ." with options park/zoo/school/shop
    ids, seg, mask = encode_question(q, tok, max_seq_len=24, max_qa_length=8, layout="bert")
    art = tok.encode(q.article)
    for i, opt in enumerate(q.options):
        qa = tok.encode(qa_text(q.question, opt))
        row = [tok.cls_id, *art, tok.sep_id, *qa, tok.sep_id]
        assert list(ids[i, :len(row)]) == row and np.all(ids[i, len(row):] == tok.pad_id)
        assert np.all(seg[i, :len(art) + 2] == 0) and np.all(seg[i, len(art) + 2:len(row)] == 1)
        assert mask[i].sum() == len(row) and np.all(seg[i, len(row):] == 0)
    assert tok.cls_id not in (CLS_ID,) and ids[0, 0] == tok.cls_id  # the vocabulary's id, not XLNet's
    with pytest.raises(DataError, match="data.layout=bert"):
        encode_question(q, tok, max_seq_len=24, max_qa_length=8, layout="xlnet")


def read_race_obj(tmp_path):
    root = tmp_path / "race"
    write(root, "dev", "middle", "1.txt", race_obj())
    (root / "dev" / "high").mkdir(parents=True)
    return read_race(root, "dev")


def test_race_datamodule_reads_a_checkpoint_folder_tokenizer(tmp_path):
    from genlab.data.finetune.race import RaceDataModule
    from genlab.data.tokenizers.wordpiece import WordPieceTokenizer

    folder = _wordpiece_folder(tmp_path / "bert")
    dm = RaceDataModule(source="mini", cache_dir=str(tmp_path / "cache"), tokenizer=str(folder), layout="bert",
                        max_seq_len=32, max_qa_length=12)
    dm.setup("fit")
    assert isinstance(dm.tokenizer, WordPieceTokenizer) and dm.model_overrides() == {"vocab_size": dm.tokenizer.vocab_size}
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape[1:] == (4, 32) and bool((batch["input_ids"][:, :, 0] == dm.tokenizer.cls_id).all())
    assert int(batch["input_ids"].max()) < dm.tokenizer.vocab_size


class HashTok:
    """One id per whitespace word from its CRC32: stateless, so tokenising processes agree."""

    identity, vocab_size = "crc32 words", 1010

    def encode(self, text):
        return [10 + zlib.crc32(w.encode()) % 1000 for w in text.split()]


def multi_question_files(root):
    """Files beside the mini's: one article in three files (two in a row, one after the other level's files), a file
    of six questions (blanks and appended options), an empty article and one longer than any window."""
    shared = "Ann keeps bees behind the old mill . Their honey is sold in town every Friday ."
    qs = ["What does Ann keep ?", "Ann sells _ honey .", "When is the honey sold ?", "_ keeps bees .", "Where ?", "x"]
    write(root, "train", "middle", "zz0.txt", race_obj(article=shared, id="zz0", questions=qs,
                                                       options=[["bees", "cows", "cats", "dogs"]] * 6,
                                                       answers=list("ABCDAB")))
    write(root, "train", "middle", "zz1.txt", race_obj(article=shared, id="zz1"))
    write(root, "train", "high", "zz2.txt", race_obj(article=shared, id="zz2", answers=["D", "C"]))
    write(root, "dev", "middle", "zz3.txt", race_obj(article="", id="zz3"))
    write(root, "test", "high", "zz4.txt", race_obj(article=" ".join(f"w{i}" for i in range(300)), id="zz4"))


def test_streamed_splits_are_the_direct_layout_for_every_layout_and_process_count(tmp_path, monkeypatch):
    """Every question of every split (the mini and multi-question files whose articles repeat) is laid out from its
    cache entry exactly as ``encode_question`` (XLNet, BERT, Funnel) or ``multiple_choice`` (GPT-1) lays out the
    question read straight from its file, while each distinct article's ids are stored once; two tokenising
    processes write the one-process entry byte for byte."""
    from genlab.data.finetune.gpt_datamodules import GPTRaceDataModule
    from genlab.data.finetune.gpt_transforms import SpecialTokens, multiple_choice
    from genlab.data.finetune.race import RaceDataModule

    root = tmp_path / "race"
    build_race_mini(root, n_paragraphs=60)
    multi_question_files(root)
    monkeypatch.setattr(et, "PIECE_TEXTS", 16)  # several pieces: both processes really encode
    for cls in (RaceDataModule, GPTRaceDataModule):
        monkeypatch.setattr(cls, "_make_tokenizer", lambda self, train: HashTok())
    dms = [RaceDataModule(path=str(root), cache_dir=str(tmp_path / f"cache{n}"), max_seq_len=64, max_qa_length=12,
                          num_proc=n) for n in (1, 2)]
    dms += [RaceDataModule(path=str(root), cache_dir=str(tmp_path / "cache1"), layout=layout, max_seq_len=64,
                           max_qa_length=12) for layout in ("bert", "funnel")]
    gpt = GPTRaceDataModule(path=str(root), cache_dir=str(tmp_path / "gpt"), max_seq_len=64)
    for dm in (*dms, gpt):
        dm.setup("fit")
    files = list((tmp_path / "cache1" / "encoded").glob("*/*.*"))
    assert len(files) == 3 * 5  # per split: manifest, offsets, ids, values, tags (the layouts share the entry)
    for a in files:
        assert a.read_bytes() == (tmp_path / "cache2" / "encoded" / a.parent.name / a.name).read_bytes(), a
    tok, sp = HashTok(), SpecialTokens.after_vocab(HashTok.vocab_size)
    for split in ("train", "dev", "test"):
        questions = read_race(root, split)
        assert len(questions) > 5 and all(len(dm.data[split]) == len(questions) for dm in (*dms, gpt))
        articles = {q.article: None for q in questions}  # each stored once, in the row of its first question
        stored = sum(len(tok.encode(a)) for a in articles) + sum(len(tok.encode(qa_text(q.question, o)))
                                                                 for q in questions for o in q.options)
        assert dms[0].data[split].rows.offsets[-1] == stored and len(articles) < len(questions)
        for dm, layout in zip(dms[1:], ("xlnet", "bert", "funnel")):
            assert dm.data[split].labels.tolist() == [q.label for q in questions]
            for i, q in enumerate(questions):
                item = dm.data[split][i]
                for got, want in zip(("input_ids", "token_type_ids", "attention_mask"),
                                     encode_question(q, tok, 64, 12, layout)):
                    assert item[got].tolist() == want.tolist(), (split, layout, i, got)
                assert (item["labels"], item["level"], item["qid"], item["index"]) == (q.label, q.level, q.qid, i)
        for i, q in enumerate(questions):
            item = gpt.data[split][i]
            assert item["tokens"] == multiple_choice(tok.encode(q.article), tok.encode(q.question),
                                                     [tok.encode(o) for o in q.options], sp, 64), (split, i)
            assert (item["labels"], item["level"], item["qid"], item["index"]) == (q.label, q.level, q.qid, i)
