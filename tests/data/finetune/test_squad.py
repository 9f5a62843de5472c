"""SQuAD data: JSON reader, windows and max-context, XLNet feature layout, exact span round trips,
answers not matching their offsets, n-best post-processing, the generated cloze minis."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from genlab.data.finetune.minis import squad_cloze_data
from genlab.data.finetune.squad import (
    CLS_ID,
    PAD_ID,
    SEP_ID,
    SquadDataModule,
    SquadExample,
    build_features,
    doc_windows,
    encode_questions,
    lay_out,
    max_context,
    read_squad,
    squad_questions,
    tokenize_paragraph,
)
from genlab.data.finetune.squad_predictions import postprocess
from genlab.data.sources.tiers import locate
from genlab.errors import DataError


@pytest.fixture(scope="module")
def dm(tmp_path_factory):
    d = SquadDataModule("2.0", source="mini", cache_dir=str(tmp_path_factory.mktemp("c")), vocab_size=2000,
                        max_seq_len=64, doc_stride=24, max_query_length=24)
    d.setup("fit")
    return d


def test_doc_windows_and_max_context():
    assert doc_windows(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]
    assert doc_windows(3, 8, 2) == [(0, 3)]
    spans = doc_windows(10, 4, 3)
    # score = min(left, right) + 0.01 * length; ties keep the first window
    assert max_context(spans, 0, 3) and not max_context(spans, 1, 3)  # 0.04 vs 0.04
    assert max_context(spans, 1, 4)  # only window 1 holds piece 4
    assert max_context(spans, 1, 6) and not max_context(spans, 2, 6)
    assert [w for w in range(3) if max_context(spans, w, 5)] == [1]
    assert [w for w in range(3) if max_context(spans, w, 8)] == [2]


def test_c21_squad_layout_paragraph_first_right_padding(dm):
    f = dm.train_features()
    for i in range(20):
        rows = f.arrays(i)
        ids, seg, p, mask = rows["input_ids"], rows["token_type_ids"], rows["p_mask"], rows["attention_mask"]
        c = f.cls_index[i]
        n = f.windows[i]["length"]
        assert ids[c] == CLS_ID and ids[n] == SEP_ID and ids[c - 1] == SEP_ID
        assert np.all(ids[c + 1:] == PAD_ID) and np.all(mask[:c + 1] == 1) and np.all(mask[c + 1:] == 0)
        assert np.all(seg[:n + 1] == 0) and np.all(seg[n + 1:c] == 1) and seg[c] == 2 and np.all(seg[c + 1:] == 3)
        assert np.all(p[:n] == 0) and np.all(p[n:c] == 1) and p[c] == 0 and np.all(p[c + 1:] == 1)
        if f.is_impossible[i]:
            assert f.start_positions[i] == f.end_positions[i] == c


def test_windowing_round_trips_answer_spans_exactly(dm):
    f = dm.train_features()
    root = locate(dm._spec(), "mini", None, dm.cache_dir)
    train = read_squad(root / "train-v2.0.json")[1]
    answered = 0
    for i in range(len(f.cls_index)):
        ex = train[f.example_index[i]]
        if f.is_impossible[i]:
            continue
        para, w = f.paragraphs[f.example_index[i]], f.windows[i]
        a, b = w["offset"] + f.start_positions[i], w["offset"] + f.end_positions[i]
        assert ex.context[para.char_start[a]:para.char_end[b]] == ex.answers[0]["text"]
        answered += 1
    assert answered > 50
    # every answerable question is answerable in at least one window (windows overlap by the stride)
    has = {int(e) for e, imp in zip(f.example_index, f.is_impossible) if not imp}
    assert has == {k for k, ex in enumerate(train) if not ex.is_impossible}


def test_answer_text_not_matching_offset_warns_counts_and_continues(dm, caplog):
    ex = [SquadExample("a", "Where _ ?", "Paris is big. Rome is old.", [{"text": "Rome", "answer_start": 0}], False),
          SquadExample("b", "What _ ?", "Paris is big. Rome is old.", [{"text": "Rome", "answer_start": 14}], False)]
    with caplog.at_level(logging.WARNING):
        feats, bad = build_features(ex, dm.tokenizer, max_seq_len=32, training=True)
    assert bad == 1 and "does not match" in caplog.text
    assert feats.example_index.tolist() == [1] and feats.is_impossible.tolist() == [0.0]


def test_malformed_json_is_a_data_error(tmp_path):
    (tmp_path / "dev.json").write_text('{"data": [{"paragraphs": []}, {not json')
    with pytest.raises(DataError, match=r"dev.json is not valid JSON .* at byte offset 31"):
        read_squad(tmp_path / "dev.json")
    with pytest.raises(DataError, match="does not exist"):
        read_squad(tmp_path / "missing.json")


def test_postprocess_best_span_offbyone_and_null_min(dm):
    ctx = "Alpha beta gamma delta epsilon"
    ex = [SquadExample("q", "?", ctx, [], True)]
    feats, _ = build_features(ex, dm.tokenizer, max_seq_len=64, training=False)
    para = feats.paragraphs[0]
    n = len(para.ids)
    def first(w):
        return int(np.flatnonzero(para.char_start == ctx.index(w))[0])

    def last(w):
        return int(np.flatnonzero(para.char_end == ctx.index(w) + len(w))[-1])

    res = {"start_top_log_probs": np.array([[-0.1, -0.2]]), "start_top_index": np.array([[n - 1, first("beta")]]),
           "end_top_log_probs": np.array([[-0.1, -0.2, -0.3, -0.9]]),
           "end_top_index": np.array([[n - 1, n - 1, last("gamma"), last("beta")]]),
           "cls_logits": np.array([1.5])}
    preds, null, nbest = postprocess(ex, feats, res, start_n_top=2, end_n_top=2, n_best=5)
    # start n-1 is the last paragraph piece: never used (official off-by-one); best valid = beta..gamma
    assert preds["q"] == "beta gamma" and null["q"] == 1.5
    assert [b["text"] for b in nbest["q"]] == ["beta gamma", "beta"]
    assert sum(b["probability"] for b in nbest["q"]) == pytest.approx(1.0)


def test_cloze_minis_labels_are_generated_and_consistent():
    train, dev = squad_cloze_data(n_paragraphs=60)
    qas = [(p["context"], qa) for art in train + dev for p in art["paragraphs"] for qa in p["qas"]]
    assert any(qa["is_impossible"] for _, qa in qas) and any(not qa["is_impossible"] for _, qa in qas)
    for ctx, qa in qas:
        assert "_" in qa["question"]
        for a in qa["answers"]:
            assert ctx[a["answer_start"]:a["answer_start"] + len(a["text"])] == a["text"]
    t1, d1 = squad_cloze_data(n_paragraphs=60, with_impossible=False)
    assert all(qa["answers"] for art in t1 for p in art["paragraphs"] for qa in p["qas"])
    json.dumps(train)
    # several questions per paragraph; dev held out by paragraph; 1.1 and 2.0 minis hold the same questions
    contexts = {name: {p["context"] for art in d for p in art["paragraphs"]} for name, d in (("t", train), ("d", dev))}
    assert len(qas) > 2 * sum(map(len, contexts.values())) and not contexts["t"] & contexts["d"]
    def questions(*splits):
        return {qa["id"]: qa["question"] for d in splits for art in d for p in art["paragraphs"] for qa in p["qas"]}

    assert questions(train, dev) == questions(t1, d1)
    # an unanswerable question sits on another paragraph of its own split, one without its sentence
    for ctx, qa in qas:
        if qa["is_impossible"]:
            before, _, after = qa["question"].partition("_")
            assert before + qa["plausible_answers"][0]["text"] + after not in ctx
            assert ctx in contexts["d" if qa["id"].startswith("cloze-dev") else "t"]


def test_tokenize_paragraph_char_spans_cover_words(dm):
    ctx = "The  Eiffel Tower, in Paris."
    para = tokenize_paragraph(ctx, dm.tokenizer)
    words = {ctx[s:e] for s, e in zip(para.char_start, para.char_end)}
    assert "The" in words or "T" in words
    assert all(0 <= s <= e <= len(ctx) for s, e in zip(para.char_start, para.char_end))
    assert ctx[para.char_start[0]:para.char_end[-1]] == ctx.rstrip()


def test_unusable_training_answers_warn_count_and_continue(dm, caplog):
    ctx = "Paris is big. Rome is old."
    ex = [SquadExample("n", "Which _ ?", ctx, [], False),                                   # answerable, no answer
          SquadExample("o", "Which _ ?", ctx, [{"text": "Rome"}], False),                    # no answer_start
          SquadExample("s", "Which _ ?", ctx, [{"text": "Rome", "answer_start": "x"}], False),  # not an integer
          SquadExample("m", "Which _ ?", ctx, [{"text": "Rome", "answer_start": 3}], False),    # text/offset mismatch
          SquadExample("ok", "Which _ ?", ctx, [{"text": "Rome", "answer_start": 14}], False)]
    with caplog.at_level(logging.WARNING):
        feats, bad = build_features(ex, dm.tokenizer, max_seq_len=32, training=True)
    assert bad == 4 and feats.example_index.tolist() == [4]
    for qid in ("n", "o", "s", "m"):
        assert f"SQuAD question {qid}:" in caplog.text
    # evaluation keeps every question (answers are only scored, never aligned)
    feats, bad = build_features(ex, dm.tokenizer, max_seq_len=32, training=False)
    assert bad == 0 and sorted(set(feats.example_index.tolist())) == [0, 1, 2, 3, 4]


def test_squad_json_missing_fields_names_the_file_and_article(tmp_path):
    path = tmp_path / "train-v2.0.json"
    path.write_text(json.dumps({"data": [{"title": "Rome", "paragraphs": [{"qas": [{"id": "q", "question": "?"}]}]}]}))
    with pytest.raises(DataError, match=r"train-v2.0.json: article 0 \(Rome, byte offset 10\) lacks 'context'"):
        read_squad(path)


def test_training_windows_are_built_only_when_training(dm):
    fresh = SquadDataModule("2.0", source="mini", cache_dir=dm.cache_dir, vocab_size=2000, max_seq_len=64,
                            doc_stride=24, max_query_length=24)
    fresh.setup("fit")  # what eval.py does: tokenizer + dev windows only
    assert "dev" in fresh.features and "train" not in fresh.features
    assert len(fresh.train_dataloader().dataset) == len(dm.train_features().cls_index)


def _same_features(a, b) -> None:
    for name in ("input_ids", "token_type_ids", "attention_mask", "p_mask", "cls_index", "start_positions",
                 "end_positions", "is_impossible", "example_index"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    for x, y in zip(a.windows, b.windows, strict=True):
        assert x["offset"] == y["offset"] and np.array_equal(x["max_context"], y["max_context"])
    for x, y in zip(a.paragraphs, b.paragraphs, strict=True):
        assert x.ids == y.ids and np.array_equal(x.char_start, y.char_start) and np.array_equal(x.char_end, y.char_end)


def test_streamed_cache_over_processes_equals_the_in_memory_windows(dm, tmp_path, caplog):
    """The training file encoded into its cache entry by 1 and 2 processes, read back through memory maps, gives the
    windows of the same questions encoded in memory; a damaged entry is rebuilt with a message, never read."""
    path = locate(dm._spec(), "mini", None, dm.cache_dir) / "train-v2.0.json"
    questions = list(squad_questions(path))[:150]
    paragraphs = []  # the questions' paragraphs again, several questions each
    for q in questions:
        if not paragraphs or paragraphs[-1]["context"] != q.context:
            paragraphs.append({"context": q.context, "qas": []})
        paragraphs[-1]["qas"].append({"id": q.qid, "question": q.question, "is_impossible": q.is_impossible,
                                      "answers": q.answers})
    assert len(paragraphs) < len(questions) / 2
    mini = tmp_path / "train-v2.0.json"
    mini.write_text(json.dumps({"data": [{"title": "t", "paragraphs": paragraphs}]}))
    args = {"max_seq_len": 48, "doc_stride": 16, "max_query_length": 12, "training": True}
    direct, _ = build_features(questions, dm.tokenizer, **args)
    assert direct.is_impossible.min() == 0 and len(direct) > len(questions)
    for procs, cache in ((1, tmp_path / "one"), (2, tmp_path / "two"), (2, tmp_path / "two")):  # built, then read
        rows = encode_questions(mini, dm.tokenizer, str(cache), "squad train", True, num_proc=procs)
        _same_features(lay_out(rows, dm.tokenizer, **args)[0], direct)
    ids = next((tmp_path / "two" / "encoded").glob("squad_train-*/ids.npy"))
    ids.write_bytes(ids.read_bytes()[:-8])  # truncated
    with caplog.at_level(logging.WARNING, logger="genlab"):
        rows = encode_questions(mini, dm.tokenizer, str(tmp_path / "two"), "squad train", True, num_proc=1)
    assert "ids.npy" in caplog.text
    _same_features(lay_out(rows, dm.tokenizer, **args)[0], direct)
