"""GDAN's unlabelled set streamed (genlab.data.qa.unlabeled): the draw and the ids equal those of tokenising every
paragraph in memory (the thesis' U, Yang thesis §3.2.5), no U paragraph is held as a Python object, every phase logs
progress, and a second run reads the cache."""

from __future__ import annotations

import json
import logging
import pickle
from collections import Counter

import numpy as np
import pytest

from genlab.data.qa import text as qa_text
from genlab.data.qa import unlabeled as U
from genlab.data.qa.answers import iter_unlabeled, sample_answers
from genlab.data.qa.synthetic import build_synthetic
from genlab.data.qa.text import TextNorm, Vocabulary, extended_ids, token_span, tokenize
from genlab.data.text import progress
from genlab.data.text.chunks import line_pieces
from genlab.errors import DataError


@pytest.fixture
def u_file(tmp_path):
    """Paragraphs of 6-16 words with up to 7 answers: some past a 5-token cap, one not matching its context, a
    paragraph without answers, a blank line and a paragraph repeated."""
    rng = np.random.default_rng(3)
    lines = []
    for i in range(14):
        words = [f"w{int(x)}" for x in rng.integers(0, 9, 6 + i % 11)]
        words[int(rng.integers(len(words)))] = "Rome"
        context = " ".join(words) + "."
        starts = [0, *(j + 1 for j, c in enumerate(context) if c == " ")]
        ends = [s - 1 for s in starts[1:]] + [len(context)]
        answers = [{"text": context[starts[w]:ends[min(w + j % 3, len(ends) - 1)]], "answer_start": starts[w],
                    "type": ["Date", "Location", "Other"][j % 3]}  # one to three words
                   for j, w in enumerate(sorted(rng.choice(len(starts), min(7, len(starts)), replace=False).tolist()))]
        if i == 4:
            answers = []
        if i == 6:
            answers[0]["answer_start"] += 1  # not the text at its offset: skipped
        lines.append(json.dumps({"id": f"p{i}", "context": context, "answers": answers}))
    lines.insert(9, "")
    lines.append(lines[2])
    path = tmp_path / "u.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def in_memory_draw(path, k, seed, cap, size):
    """The draw as it was made holding every tokenised paragraph: answers drawn per paragraph in file order, token
    spans over the first ``cap`` tokens, then ``size`` pairs drawn uniformly."""
    rng, items = np.random.default_rng(seed + 7919), []
    for r, para in enumerate(iter_unlabeled(path)):
        if para.answers:
            offsets = tokenize(para.context)[1][:cap]
            for a in sample_answers(para.answers, k, rng):
                span = token_span(offsets, a.start, a.start + len(a.text))
                if span is not None:
                    items.append((r, *span))
    if size is not None and size < len(items):
        keep = np.sort(np.random.default_rng(seed + 104729).choice(len(items), size, replace=False))
        items = [items[i] for i in keep.tolist()]
    return items


@pytest.mark.parametrize("cap, size", [(None, None), (5, None), (5, 9), (None, 4)])
def test_streamed_draw_and_ids_equal_tokenising_every_paragraph_in_memory(u_file, tmp_path, monkeypatch, cap, size):
    monkeypatch.setattr(U, "BLOCK_ROWS", 3)  # several blocks of paragraphs, some without a drawn answer
    pairs = U.read_pairs(u_file, None, TextNorm(), tmp_path / "cache", 1, 3, 0, cap, size)
    expected = in_memory_draw(u_file, 3, 0, cap, size)
    assert list(zip(pairs.row.tolist(), pairs.start.tolist(), pairs.end.tolist())) == expected
    contexts = [p.context for p in iter_unlabeled(u_file)]
    vocab = Vocabulary(["w1", "w2", "rome", "."])
    pairs.encode_ids(vocab, 6, tmp_path / "cache", 1)
    d_ids, g_ext, starts, ends = pairs.arrays(list(range(len(pairs))))
    assert (starts, ends) == ([s for _, s, _ in expected], [e for _, _, e in expected])
    for r, d, g in zip(pairs.row.tolist(), d_ids, g_ext):
        words = tokenize(contexts[r])[0][:cap]
        assert d.tolist() == vocab.ids(words).tolist()
        assert g.tolist() == extended_ids(words, vocab.ids(words), 6).tolist()
    # the repeated paragraph counts once, and not at all when it is a paragraph counted already
    every = pairs.paragraphs(True, set())
    assert every.tolist() == [r for r, c in enumerate(contexts) if r != 4 and c not in contexts[:r]]
    assert 2 not in pairs.paragraphs(True, {U.context_digest(contexts[2])}).tolist()
    counts = Counter()
    pairs.count_words(every, counts)
    assert counts == Counter(w for r in every.tolist() for w in tokenize(contexts[r])[0][:cap])


def test_setup_holds_no_unlabelled_paragraph_logs_every_phase_and_reads_the_cache_again(tmp_path, monkeypatch,
                                                                                          caplog):
    from genlab.data.qa.datamodule import SemiSupervisedSquadDataModule

    build_synthetic(tmp_path / "data", train_articles=6, dev_articles=2, unlabeled_paragraphs=30)
    monkeypatch.setattr(progress, "EVERY_S", 0.0)

    def setup():
        dm = SemiSupervisedSquadDataModule(source="path", path=str(tmp_path / "data"), cache_dir=str(tmp_path / "c"),
                                           label_rate=0.5, num_proc=1)
        dm.setup("fit")
        return dm

    with caplog.at_level(logging.INFO, logger="genlab"):
        dm = setup()
    for phase in ("finding the answers of train-v1.1.json", "reading the answers of dev-v1.1.json",
                  "reading the answers of the test articles", "reading unlabeled.jsonl",
                  "encoding gdan unlabelled words", "finding the tokens of the answers of unlabeled.jsonl",
                  "counting the words of U", "writing the ids of SQuAD's paragraphs", "writing U's ids"):
        assert any(m.startswith(f"{phase}: done") for m in caplog.messages), phase
    squad_contexts = {p.context for p in dm.passages}
    assert len(dm.passages) == len(squad_contexts) and len(dm.unlabeled) > 0
    assert not squad_contexts & {p.context for p in iter_unlabeled(tmp_path / "data" / "unlabeled.jsonl")}
    monkeypatch.setattr(qa_text, "tokenize", lambda *a: pytest.fail("the cached words are read, not re-tokenised"))
    again = setup()
    assert again.vocab.words == dm.vocab.words
    assert np.array_equal(again.unlabeled.row, dm.unlabeled.row)


def test_answers_extracted_over_two_processes_give_the_one_process_draw_and_caches(tmp_path, monkeypatch):
    """data.extractor over data.num_proc: pieces of lines come back in file order, so the paragraphs, the draw and
    both cache entries equal the one-process build's byte for byte; a paragraph without an id is still named by its
    line, and a bad line by its number in the file."""
    from genlab.data.qa import answers
    from genlab.data.qa.answers import HeuristicExtractor
    from genlab.data.text import encoded_texts

    monkeypatch.setattr(answers, "EXTRACT_PIECE_BYTES", 300)  # ~2 lines a piece: both processes extract
    monkeypatch.setattr(encoded_texts, "PIECE_TEXTS", 8)
    rng = np.random.default_rng(5)
    names = ["Anna Berg", "Paris", "the Senate", "Louis Martin", "Rome"]
    lines = []
    for i in range(30):
        context = (f"In {1800 + int(rng.integers(200))} {names[i % 5]} paid ${int(rng.integers(90))} million for "
                   f"the new harbour. Later {names[(i + 2) % 5]} built {int(rng.integers(2, 9))} towers near the "
                   f"{['old', 'small', 'dark'][i % 3]} river.")
        lines.append(json.dumps({"context": context} if i == 11 else {"id": f"p{i}", "context": context}))
    path = tmp_path / "u.jsonl"
    path.write_text("\n".join(lines) + "\n")
    tagger = HeuristicExtractor()
    read = {n: list(iter_unlabeled(path, tagger, num_proc=n)) for n in (1, 2)}
    assert read[1] == read[2] and len(read[1]) == 30 and read[1][11].pid == "12"  # unnamed: its line (1-based)
    assert [p.answers for p in read[1]] == [tagger(json.loads(line)["context"]) for line in lines]
    parsed = pickle.dumps(answers._parse_piece(tagger, next(line_pieces(path, answers.EXTRACT_PIECE_BYTES))))
    assert b"Answer" not in parsed  # a piece's answers cross processes as one array, not an object each
    built = {}
    for n in (1, 2):
        pairs = U.read_pairs(path, tagger, TextNorm(), tmp_path / f"c{n}", n, 3, 0, None, 40)
        pairs.encode_ids(Vocabulary(["in", "the", "rome", "paris", "."]), 6, tmp_path / f"c{n}", n)
        built[n] = pairs
    for name in ("row", "start", "end", "usable", "digests"):
        assert np.array_equal(getattr(built[1], name), getattr(built[2], name)), name
    assert len(built[1]) == 40
    files = {n: sorted((tmp_path / f"c{n}").glob("encoded/*/*")) for n in (1, 2)}
    assert [f.name for f in files[1]] == [f.name for f in files[2]] and len(files[1]) == 12
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(files[1], files[2]))
    path.write_text("\n".join(lines[:20] + ["{not json"] + lines[20:]) + "\n")
    for n in (1, 2):
        with pytest.raises(DataError, match="line 21: not an unlabelled paragraph"):
            list(iter_unlabeled(path, tagger, num_proc=n))
