"""SQuAD with a BERT checkpoint's WordPiece tokenizer: exact char <-> piece spans from the ``tokenizers`` offsets
(accents, lower-casing, punctuation, [UNK]), BERT's ``[CLS] Q [SEP] P [SEP]`` layout with the vocabulary's own ids
(checked against Hugging Face's fast BERT tokenizer when installed), post-processing of question-first windows, and
answer round trips on the generated SQuAD 2.0 mini."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from genlab.data.finetune.minis import squad_cloze_data
from genlab.data.finetune.squad import (
    SquadDataModule,
    SquadExample,
    build_features,
    squad_questions,
    tokenize_paragraph,
)
from genlab.data.finetune.squad_align import char_to_piece_span
from genlab.data.finetune.squad_predictions import postprocess
from genlab.data.tokenizers.wordpiece import WordPieceTokenizer
from genlab.errors import DataError

pytest.importorskip("tokenizers", reason="WordPiece tokenisation needs the tokenizers package")

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [str(d) for d in range(10)]


def write_vocab(folder: Path, words: list[str], lower: bool = True) -> Path:
    """A BERT-style vocab.txt with specials, ``words``, punctuation, single characters and ## continuations
    (ids deliberately not XLNet's fixed 3/4/5 for [CLS]/[SEP]/[PAD]: the specials come after 7 filler words)."""
    folder.mkdir(parents=True, exist_ok=True)
    punct = list(".,;:!?'\"()-%$&/[]")
    tokens = ["the", "of", "and", "in", "to", "a", "was"] + SPECIALS
    tokens += [w for w in dict.fromkeys(words + punct + LETTERS) if w not in tokens] + ["##" + c for c in LETTERS]
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": lower}))
    return folder


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    words = ["cafe", "naive", "paris", "france", "river", "city", "is", "on", "##s", "##ing", "capital", "what"]
    return WordPieceTokenizer(write_vocab(tmp_path_factory.mktemp("wp"), words) / "vocab.txt")


HARD = ("  The Café\u00a0de   Flore, in PARIS (France) -- \u201cnaïve\u201d 😀 visitors' \u00c5ngstr\u00f6m-rivers;\n"
        "the ﬁrst 42% of ÉCOLE\u200b students\x00 sing.")


def test_wordpiece_spans_are_exact_raw_character_spans(tok):
    para = tokenize_paragraph(HARD, tok)
    assert para.ids == tok.encode(HARD)
    assert np.all(np.diff(para.char_start) >= 0) and np.all(para.char_end > para.char_start)
    pieces = tok.encode_pieces(HARD)
    for piece, a, b in zip(pieces, para.char_start, para.char_end):
        raw = HARD[a:b]
        assert raw == raw.strip() and raw
        if piece != "[UNK]":  # the raw text normalises (lower-case, accents stripped) to the piece's text
            assert tok._tok.normalizer.normalize_str(raw) == piece.removeprefix("##")
    spans = {HARD[a:b] for a, b in zip(para.char_start, para.char_end)}
    assert {"Café", "PARIS", "(", "naïve", "😀", "\u201c", "%", "'", "É"} <= spans  # "ÉCOLE" -> e ##c ##o ...
    assert "[UNK]" in pieces


@pytest.mark.parametrize("answer", ["Café\u00a0de   Flore", "PARIS", "(France)", "\u201cnaïve\u201d", "😀",
                                    "visitors'", "Ångström-rivers", "river", "42%", "ﬁrst", "ÉCOLE", "students"])
def test_hard_answers_round_trip_exactly(tok, answer):
    """Also an answer inside a word ("river" of "rivers" -> the piece "river", not "##s")."""
    para = tokenize_paragraph(HARD, tok)
    start = HARD.index(answer)
    first, last = char_to_piece_span(para, start, start + len(answer))
    assert HARD[para.char_start[first]:para.char_end[last]] == answer


def _example(context: str, question: str, answer: str | None, qid: str = "q") -> SquadExample:
    answers = [] if answer is None else [{"text": answer, "answer_start": context.index(answer)}]
    return SquadExample(qid, question, context, answers, answer is None)


def test_bert_layout_with_the_vocabulary_special_ids(tok):
    context = "Paris is the capital of France. The city is on the river Seine, in the north."
    ex = _example(context, "What is the capital city on the river?", "Paris")
    f, bad = build_features([ex, _example(context, "What river?", None, "q2")], tok, max_seq_len=24, doc_stride=6,
                            max_query_length=8, training=True, layout="bert")
    assert bad == 0 and len(f.cls_index) > 2
    for i, win in enumerate(f.windows):
        ids, seg, p, mask = f.input_ids[i], f.token_type_ids[i], f.p_mask[i], f.attention_mask[i]
        qi = tok.encode(["What is the capital city on the river?", "What river?"][f.example_index[i]])[:8]
        n, c0, end = win["length"], len(qi) + 2, len(qi) + 2 + win["length"]
        assert f.cls_index[i] == 0 and ids[0] == tok.cls_id and ids[c0 - 1] == tok.sep_id and ids[end] == tok.sep_id
        assert list(ids[1:c0 - 1]) == qi and win["ctx_start"] == c0 and win["usable"] == n
        assert list(ids[c0:end]) == f.paragraphs[f.example_index[i]].ids[win["offset"]:win["offset"] + n]
        assert np.all(ids[end + 1:] == tok.pad_id) and mask.sum() == end + 1 and np.all(mask[:end + 1] == 1)
        assert np.all(seg[:c0] == 0) and np.all(seg[c0:end + 1] == 1) and np.all(seg[end + 1:] == 0)
        assert p[0] == 0 and np.all(p[1:c0] == 1) and np.all(p[c0:end] == 0) and np.all(p[end:] == 1)
        if f.is_impossible[i]:
            assert f.start_positions[i] == f.end_positions[i] == 0
        else:  # the label points at "Paris" inside the window
            para = f.paragraphs[0]
            a, b = win["offset"] + f.start_positions[i] - c0, win["offset"] + f.end_positions[i] - c0
            assert context[para.char_start[a]:para.char_end[b]] == "Paris"
    assert f.is_impossible[f.example_index == 1].all() and not f.is_impossible[f.example_index == 0].all()


def test_layout_matches_hugging_face_bert_fast_tokenizer(tok):
    transformers = pytest.importorskip("transformers", reason="transformers (reference) is not installed")
    ref = transformers.BertTokenizer.from_pretrained(str(tok.vocab_file.parent))  # fast (tokenizers) in v5
    context, question = HARD * 2, "What is the capital of France?"
    f, _ = build_features([_example(context, question, None)], tok, max_seq_len=32, doc_stride=10,
                          max_query_length=64, layout="bert")
    n_q = len(tok.encode(question))
    hf = ref(question, context, truncation="only_second", max_length=32, stride=32 - n_q - 3 - 10,
             return_overflowing_tokens=True, padding="max_length", return_offsets_mapping=True)
    assert len(hf["input_ids"]) == len(f.cls_index)
    np.testing.assert_array_equal(np.array(hf["input_ids"]), f.input_ids)
    np.testing.assert_array_equal(np.array(hf["token_type_ids"]), f.token_type_ids)
    np.testing.assert_array_equal(np.array(hf["attention_mask"]), f.attention_mask)
    for i, win in enumerate(f.windows):  # HF's paragraph offsets equal ours
        para, c0 = f.paragraphs[0], win["ctx_start"]
        for k in range(win["length"]):
            assert tuple(hf["offset_mapping"][i][c0 + k]) == (para.char_start[win["offset"] + k],
                                                              para.char_end[win["offset"] + k])


def test_xlnet_layout_with_wordpiece_is_refused(tok):
    with pytest.raises(DataError, match="data.layout=bert"):
        build_features([_example("Paris is nice.", "What?", "Paris")], tok, max_seq_len=24, layout="xlnet")


def test_postprocess_reads_question_first_windows(tok):
    context = "Paris is the capital of France. The city is on the river Seine."
    ex = _example(context, "What is the capital?", "Paris")
    f, _ = build_features([ex], tok, max_seq_len=64, layout="bert")
    c0, n = f.windows[0]["ctx_start"], f.windows[0]["length"]
    para = f.paragraphs[0]
    last = len(para.ids) - 1  # BERT may answer with the window's last paragraph piece (XLNet's code may not)
    # start beams: question piece (invalid), "france" (valid), [CLS] (invalid); ends: best first
    fr = next(k for k in range(n) if context[para.char_start[k]:para.char_end[k]] == "France")
    starts = np.array([[1, c0 + fr, 0]])
    ends = np.array([[c0 + fr, c0 + fr, c0 + last, c0 + fr, c0 + last, 0, 0, 0, 0]])
    res = {"start_top_index": starts, "start_top_log_probs": np.array([[-0.1, -0.5, -0.7]]),
           "end_top_index": ends, "end_top_log_probs": np.array([[-0.1, -0.2, -0.3, -0.2, -0.4, -5, -5, -5, -5]]),
           "cls_logits": np.array([1.5])}
    preds, null, nbest = postprocess([ex], f, res, start_n_top=3, end_n_top=3, n_best=5)
    assert preds["q"] == "France" and null["q"] == 1.5
    assert [b["text"] for b in nbest["q"]] == ["France", context[para.char_start[fr]:]]
    assert all(b["text"] for b in nbest["q"])


@pytest.fixture(scope="module")
def mini_vocab(tmp_path_factory):
    """Frequent words of the generated mini (pre-tokenised like BERT) plus characters, so rare words split."""
    from tokenizers import normalizers, pre_tokenizers

    train, _ = squad_cloze_data()
    norm, pre = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    counts = Counter(w for art in train for p in art["paragraphs"]
                     for w, _ in pre.pre_tokenize_str(norm.normalize_str(p["context"])))
    return write_vocab(tmp_path_factory.mktemp("mini_vocab"), [w for w, _ in counts.most_common(800)])


def test_mini_answers_round_trip_through_wordpiece_windows(tmp_path, mini_vocab):
    # windows of 37 context pieces every 12: a 25-piece overlap holds the longest answer (a 22-piece word)
    dm = SquadDataModule("2.0", source="mini", cache_dir=str(tmp_path), tokenizer=str(mini_vocab), layout="bert",
                         max_seq_len=64, doc_stride=12, max_query_length=24)
    dm.setup("fit")
    assert isinstance(dm.tokenizer, WordPieceTokenizer) and dm.identity()["tokenizer"] == dm.tokenizer.identity
    f = dm.train_features()
    assert dm.bad_answers == 0
    answered, train = set(), list(squad_questions(dm.train_path))
    for i in np.flatnonzero(f.is_impossible == 0):
        ex, win = train[f.example_index[i]], f.windows[i]
        para, c0 = f.paragraphs[f.example_index[i]], win["ctx_start"]
        a, b = win["offset"] + f.start_positions[i] - c0, win["offset"] + f.end_positions[i] - c0
        assert ex.context[para.char_start[a]:para.char_end[b]] == ex.answers[0]["text"]
        answered.add(ex.qid)
    # every answerable training question is labelled inside at least one window
    assert answered == {e.qid for e in train if not e.is_impossible}
    assert np.all(dm.features["dev"].input_ids[:, 0] == dm.tokenizer.cls_id)
