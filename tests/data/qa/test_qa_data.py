"""GDAN's data (Yang's thesis §3.2.5): tokenizer offsets and normalisation, shared vocabularies, the answer extractor
and type-weighted sampling, the unlabelled JSONL, the thesis' SQuAD split (by article), the data module's batches on
the synthetic fixture, and the real-data mini's files."""

from __future__ import annotations

import gc
import json
import os
import stat
import tracemalloc
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from genlab.data.qa import text as qa_text
from genlab.data.qa.answers import (
    ENTITY,
    TYPE_WEIGHTS,
    Answer,
    HeuristicExtractor,
    UnlabeledParagraph,
    read_unlabeled,
    sample_answers,
    sample_spans,
    unlabeled_contexts,
    write_unlabeled,
)
from genlab.data.qa.datamodule import (
    HELD_PER_JSON_BYTE,
    HELD_PER_UNLABELED_PAIR,
    SQUAD11_BYTES,
    SemiSupervisedSquadDataModule,
)
from genlab.data.qa.protocol import (
    QAExample,
    labeled_size,
    labeled_subset,
    split_by_article,
)
from genlab.data.qa.synthetic import build_synthetic
from genlab.data.qa.text import EOS, UNK, TextNorm, shared_vocabularies, token_span, tokenize, tokenize_all
from genlab.data.text import encoded_texts
from genlab.errors import ConfigError, DataError


# ------------------------------------------------------------------------------------------------ text
def test_tokenizer_normalises_for_lookup_and_keeps_original_offsets():
    text = "In 1990, CO2 rose (Cross-linked)."
    words, offsets = tokenize(text)
    assert words == ["in", "0000", ",", "co0", "rose", "(", "cross", "-", "linked", ")", "."]
    assert [text[a:b] for a, b in offsets] == ["In", "1990", ",", "CO2", "rose", "(", "Cross", "-", "linked", ")", "."]
    # offsets: the span of the normalised "0000" cuts the original "1990"
    j, k = token_span(offsets, text.index("1990"), text.index("1990") + 4)
    assert text[offsets[j, 0]:offsets[k, 1]] == "1990"
    # smallest covering span of a range that starts inside a token
    assert token_span(offsets, text.index("ross"), text.index("linked") + 3) == (6, 8)


def test_tokenising_every_text_is_cached_and_any_process_count_gives_the_tokenizers_result(tmp_path, monkeypatch):
    monkeypatch.setattr(encoded_texts, "PIECE_TEXTS", 2)  # several pieces: two processes really run
    texts = ["In 1990, CO2 rose.", "", "  ", "Ünïcode (Cross-linked) 42nd", "In 1990, CO2 rose.", "a\nb\tc d", "x"]
    norm = TextNorm(lowercase=True, digits_to_zero=False)
    one, two = (tokenize_all(texts, norm, tmp_path / str(n), n) for n in (1, 2))
    for t in texts:
        expected_words, expected_spans = tokenize(t, norm)
        for words in (one, two):
            assert words[t][0] == expected_words and np.array_equal(words[t][1], expected_spans)
            assert words[t][1].dtype == np.int64 and words[t][1].shape == (len(expected_words), 2)
    files = {n: sorted((tmp_path / str(n)).glob("encoded/*/*")) for n in (1, 2)}
    assert [f.name for f in files[1]] == [f.name for f in files[2]] and len(files[1]) == 6
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(files[1], files[2]))
    monkeypatch.setattr(qa_text, "tokenize", lambda *a: pytest.fail("the cached entry is read, not re-tokenised"))
    assert tokenize_all(texts, norm, tmp_path / "2", 2).keys() == one.keys()
    monkeypatch.undo()
    tokenize_all(texts, TextNorm(), tmp_path / "2", 2)  # another normalisation: another entry
    assert len(list((tmp_path / "2" / "encoded").iterdir())) == 2


def test_g_vocabulary_is_the_prefix_of_d_vocabulary():
    g = Counter({"the": 5, "cat": 2, "rare": 1})
    d = Counter({"the": 9, "cat": 3, "dog": 4, "rare": 1, "zebra": 1})
    vocab, g_size = shared_vocabularies(g, d, g_min_count=2, d_min_count=1)
    assert vocab.words[:4] == ["<pad>", "<unk>", "<bos>", "<eos>"]
    assert vocab.words[4:g_size] == ["the", "cat"]  # L's words seen twice, most frequent first
    assert set(vocab.words[g_size:]) == {"dog", "rare", "zebra"}
    assert vocab.ids(["cat", "unseen"]).tolist() == [5, UNK]


# ------------------------------------------------------------------------------------------------ answers
def test_heuristic_extractor_finds_dates_numbers_entities_and_noun_phrases():
    text = ("The treaty was signed in Paris by Louis Martin in March 1815. It cost $5 million and "
            "12% of the royal budget went to the new harbour.")
    found = {(a.text, a.type) for a in HeuristicExtractor()(text)}
    assert ("March 1815", "Date") in found and ("$5 million", "Other Numeric") in found
    assert ("12%", "Other Numeric") in found
    assert ("Paris", ENTITY) in found and ("Louis Martin", ENTITY) in found
    assert ("treaty", "Common Noun Phrase") in found and ("new harbour", "Common Noun Phrase") in found
    assert not any(t == "The" or t == "It" for t, _ in found)  # sentence-initial capitals are not entities
    for a in HeuristicExtractor()(text):
        assert text[a.start:a.start + len(a.text)] == a.text


def test_type_weighted_sampling_follows_squad_percentages_not_chunk_counts():
    # 40 noun phrases against 4 dates: uniform sampling would give dates 1/11 of the picks; type weighting gives
    # 8.9 / (8.9 + 31.8) = 0.22 of the first draws
    cands = [Answer(f"np{i}", i, "Common Noun Phrase") for i in range(40)]
    cands += [Answer(f"d{i}", 100 + i, "Date") for i in range(4)]
    rng = np.random.default_rng(0)
    firsts = Counter(sample_answers(cands, 1, rng)[0].type for _ in range(4000))
    share = firsts["Date"] / 4000
    expected = TYPE_WEIGHTS["Date"] / (TYPE_WEIGHTS["Date"] + TYPE_WEIGHTS["Common Noun Phrase"])
    assert abs(share - expected) < 0.03
    five = sample_answers(cands, 5, np.random.default_rng(1))
    assert len(five) == 5 and len(set(five)) == 5
    assert sample_answers(cands[:3], 5, rng) == sorted(cands[:3], key=lambda a: a.start)


def test_type_draw_is_generator_choice_with_the_type_weights():
    """sample_spans draws a type as Generator.choice(p=weights / sum) does, without its per-call checks: the same
    answers, and the generator left in the same state, for any types (more than 8, some unweighted) and weights."""

    def with_choice(types, k, rng, weights):
        pools: dict[str, list[int]] = {}
        for i, t in enumerate(types):
            pools.setdefault(t, []).append(i)
        chosen = []
        while len(chosen) < k and pools:
            kinds = sorted(pools)
            w = np.array([weights.get(t, weights.get("Other", 1.0)) for t in kinds])
            pool = pools[kinds[rng.choice(len(kinds), p=w / w.sum())]]
            chosen.append(pool.pop(int(rng.integers(len(pool)))))
            pools = {t: p for t, p in pools.items() if p}
        return sorted(chosen)

    gen = np.random.default_rng(0)
    names = [*TYPE_WEIGHTS, "Unweighted"]
    for case in range(200):
        types = [names[i] for i in gen.integers(0, len(names), int(gen.integers(6, 40)))]
        weights = TYPE_WEIGHTS if case % 2 else {t: float(gen.uniform(0.1, 30)) for t in names[:9]}
        fast, reference = np.random.default_rng(case), np.random.default_rng(case)
        spans = [(i, i + 1) for i in range(len(types))]  # ordered as their indices
        assert sample_spans(spans, types, 5, fast, weights) == with_choice(types, 5, reference, weights)
        assert fast.random() == reference.random()


def test_unlabeled_jsonl_round_trip_skips_bad_answers_and_refuses_a_file_without_answers(tmp_path):
    rows = [UnlabeledParagraph("p0", "Anna was born in Oslo.", [Answer("Oslo", 17, "Location")])]
    old_umask = os.umask(0o027)
    try:
        write_unlabeled(tmp_path / "u.jsonl", rows)  # atomically, yet with the user's umask (not mkstemp's 0600)
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE((tmp_path / "u.jsonl").stat().st_mode) == 0o640
    with open(tmp_path / "u.jsonl", "a") as f:
        f.write(json.dumps({"id": "p1", "context": "Bo is here.", "answers": [{"text": "here", "answer_start": 0}]})
                + "\n")
    back = read_unlabeled(tmp_path / "u.jsonl")
    assert [(r.pid, r.answers) for r in back] == [("p0", [Answer("Oslo", 17, "Location")])]
    tagger = HeuristicExtractor()  # data.extractor: the file's answers are replaced by the extractor's chunks
    assert [r.answers for r in read_unlabeled(tmp_path / "u.jsonl", tagger)] == [tagger(rows[0].context)]

    (tmp_path / "none.jsonl").write_text(json.dumps({"id": "x", "context": "Some text.", "answers": []}) + "\n")
    with pytest.raises(DataError, match="no usable answers"):
        read_unlabeled(tmp_path / "none.jsonl")
    with pytest.raises(DataError, match="do not exist"):
        read_unlabeled(tmp_path / "missing.jsonl")


# ------------------------------------------------------------------------------------------------ protocol
def _articles(sizes):
    return [(f"t{a}", [QAExample(f"q{a}-{i}", "?", f"ctx{a}", [], f"t{a}") for i in range(n)])
            for a, n in enumerate(sizes)]


def test_check_14_split_is_by_article_sizes_follow_the_original_count_and_seeded():
    arts = _articles([7, 3, 12, 5, 9, 4, 6, 8, 10, 2, 11, 3])
    n = sum(len(q) for _, q in arts)
    train, test = split_by_article(arts, 0.1, seed=3)
    assert {q.title for q in train}.isdisjoint({q.title for q in test})
    assert len(test) >= 0.1 * n and len(train) + len(test) == n
    assert split_by_article(arts, 0.1, seed=3) == (train, test)  # same seed -> same split
    assert labeled_size(0.1, n) == round(0.1 * n)  # denominator: the original training size, not the 90 %
    assert len(labeled_subset(len(train), 0.5, n, seed=0)) == round(0.5 * n)
    assert labeled_subset(len(train), 0.9, n, seed=0).tolist() == list(range(len(train)))  # 0.9: all non-test
    assert labeled_subset(len(train), 0.2, n, 1).tolist() == labeled_subset(len(train), 0.2, n, 1).tolist()
    for bad in (0.0, 0.95, 1.0, -0.1):
        with pytest.raises(ConfigError, match=r"data.label_rate.*\(0, 0.9\]"):
            labeled_size(bad, n)


# ------------------------------------------------------------------------------------------------ data module
@pytest.fixture(scope="module")
def synthetic_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("synthetic")
    build_synthetic(root, train_articles=20, dev_articles=4, unlabeled_paragraphs=60)
    return root


def make_dm(root: Path, **kw) -> SemiSupervisedSquadDataModule:
    args = {"source": "path", "path": str(root), "label_rate": 0.5, "batch_size": 4, "unlabeled_batch_size": 3,
            "eval_batch_size": 8}
    dm = SemiSupervisedSquadDataModule(**{**args, **kw})
    dm.setup("fit")
    return dm


def test_batches_views_and_generator_targets_on_the_synthetic_fixture(synthetic_dir):
    dm = make_dm(synthetic_dir)
    assert dm.model_overrides() == {"reader": {"vocab_size": len(dm.vocab)}, "generator": {"vocab_size":
                                                                                           dm.g_vocab_size}}
    assert make_dm(synthetic_dir, generator_vocab=False).model_overrides().keys() == {"reader"}
    batch = next(iter(dm.train_dataloader()))
    lab, unl = batch["lab"], batch["unl"]
    assert lab["p_ids"].shape[0] == 4 and unl["p_ids"].shape[0] == 3 and unl["index"].shape == (3,)
    vg = dm.g_vocab_size
    for part in (lab, unl):
        valid = part["p_mask"]
        # G's view: vocabulary words keep their id, everything else is <unk> in g_p_ids and a slot in g_p_ext
        assert torch.equal(torch.where(part["g_p_ext"] < vg, part["g_p_ext"], UNK)[valid], part["g_p_ids"][valid])
        assert torch.equal(part["g_p_ext"][valid & (part["p_ids"] < vg) & (part["p_ids"] != UNK)],
                           part["p_ids"][valid & (part["p_ids"] < vg) & (part["p_ids"] != UNK)])
        assert ((part["start"] <= part["end"]) & (part["end"] < valid.sum(1))).all()
    # G's targets end with <eos>; OOV question words are copy slots of their own paragraph, or <unk>
    for r in range(4):
        tgt = lab["g_q_ids"][r][lab["g_q_mask"][r]]
        assert tgt[-1] == EOS and len(tgt) <= 20
        for t in tgt[:-1].tolist():
            assert t < vg or t in lab["g_p_ext"][r].tolist()
    # the answer tokens of a labelled row are the answer of its question
    ev = next(iter(dm.val_dataloader()))
    for r in range(len(ev["qid"])):
        a, b = ev["offsets"][r, ev["start"][r], 0], ev["offsets"][r, ev["end"][r], 1]
        assert ev["context"][r][a:b] == ev["answers"][r][0]


def test_g_vocabulary_counts_paragraphs_so_question_words_of_one_paragraph_are_copied(tmp_path):
    """A word of one paragraph that its question repeats is seen twice, yet in one L example: G must copy it, so it
    stays out of G's vocabulary (counting occurrences put every such word in, and G never learnt to copy)."""
    def article(i: int) -> dict:
        context = f"The river rises near word{chr(97 + i)} in 1850 ."
        qa = {"id": f"q{i}", "question": f"When does the river rise near word{chr(97 + i)} ?",
              "answers": [{"text": "1850", "answer_start": context.index("1850")}]}
        return {"title": f"a{i}", "paragraphs": [{"context": context, "qas": [qa]}]}

    (tmp_path / "train-v1.1.json").write_text(json.dumps({"data": [article(i) for i in range(20)]}))
    (tmp_path / "dev-v1.1.json").write_text(json.dumps({"data": [article(25)]}))
    dm = make_dm(tmp_path, unlabeled=False, label_rate=0.9)
    g_words = set(dm.vocab.words[4:dm.g_vocab_size])
    assert {"river", "near", "0000"} <= g_words and not any(w.startswith("word") for w in g_words)


def test_d_vocabulary_covers_all_splits_or_only_the_training_text(synthetic_dir):
    open_vocab, closed = make_dm(synthetic_dir), make_dm(synthetic_dir, d_vocab_from="training")
    dev_words = {w for it in open_vocab.splits["dev"] for w in open_vocab.passages[it.passage].words}
    contexts = list(unlabeled_contexts(synthetic_dir / "unlabeled.jsonl"))
    train_words = {w for it in closed.labeled for w in closed.passages[it.passage].words}
    train_words |= {w for r in set(closed.unlabeled.row.tolist()) for w in tokenize(contexts[r])[0]}
    assert dev_words <= set(open_vocab.vocab.words)
    assert set(closed.vocab.words[4:]) <= train_words | {w for it in closed.labeled for w in it.question}
    assert open_vocab.vocab.words[:open_vocab.g_vocab_size] == closed.vocab.words[:closed.g_vocab_size]


def test_stream_resumes_at_the_recorded_position(synthetic_dir):
    dm = make_dm(synthetic_dir)
    it = iter(dm.train_dataloader())
    batches = [next(it) for _ in range(5)]
    dm2 = make_dm(synthetic_dir)
    dm2.load_state_dict({"next_position": 3})
    resumed = next(iter(dm2.train_dataloader()))
    assert resumed["position"] == 3
    assert torch.equal(resumed["lab"]["p_ids"], batches[3]["lab"]["p_ids"])
    assert torch.equal(resumed["unl"]["index"], batches[3]["unl"]["index"])


def test_sl_reads_no_unlabeled_file_and_bad_inputs_are_data_errors(synthetic_dir, tmp_path):
    (tmp_path / "train-v1.1.json").write_text((synthetic_dir / "train-v1.1.json").read_text())
    (tmp_path / "dev-v1.1.json").write_text((synthetic_dir / "dev-v1.1.json").read_text())
    dm = make_dm(tmp_path, unlabeled=False)  # no unlabeled.jsonl in this folder: SL does not need one
    assert dm.unlabeled == [] and not dm.has_unlabeled
    with pytest.raises(DataError, match="unlabeled"):
        make_dm(tmp_path, unlabeled=True)
    with pytest.raises(ConfigError, match="data.extractor='stanford'"):
        make_dm(tmp_path, extractor="stanford")
    data = json.loads((synthetic_dir / "train-v1.1.json").read_text())
    for art in data["data"]:
        for para in art["paragraphs"]:
            for qa in para["qas"]:
                qa["answers"] = [{"text": "nowhere to be found", "answer_start": 0}]
    (tmp_path / "train-v1.1.json").write_text(json.dumps(data))
    with pytest.raises(DataError, match="no usable answers"):
        make_dm(tmp_path, unlabeled=False)
    # a dev file without gold answers is refused (the official scorer stops), naming the file
    (tmp_path / "train-v1.1.json").write_text((synthetic_dir / "train-v1.1.json").read_text())
    dev = json.loads((synthetic_dir / "dev-v1.1.json").read_text())
    for art in dev["data"]:
        for para in art["paragraphs"]:
            for qa in para["qas"]:
                qa["answers"] = []
    (tmp_path / "dev-v1.1.json").write_text(json.dumps(dev))
    with pytest.raises(DataError, match=r"dev-v1\.1\.json: \d+ of \d+ questions have no usable answer"):
        make_dm(tmp_path, unlabeled=False)


def test_check_23_wiki_mini_files_are_article_disjoint_and_answers_match_offsets(tmp_path):
    dm = SemiSupervisedSquadDataModule(source="mini", mini="wiki", cache_dir=str(tmp_path), batch_size=4)
    root = dm._root()
    train = json.loads((root / "train-v1.1.json").read_text())["data"]
    dev = json.loads((root / "dev-v1.1.json").read_text())["data"]
    unl = read_unlabeled(root / "unlabeled.jsonl")
    titles = [{a["title"] for a in train}, {a["title"] for a in dev}, {r.pid.rsplit("-", 1)[0] for r in unl}]
    assert all(titles[i].isdisjoint(titles[j]) for i in range(3) for j in range(i + 1, 3))
    for art in train + dev:
        for para in art["paragraphs"]:
            for qa in para["qas"]:
                a = qa["answers"][0]
                assert para["context"][a["answer_start"]:a["answer_start"] + len(a["text"])] == a["text"]
                assert qa["question"].endswith("?") and len(tokenize(qa["question"])[0]) >= 5
    assert all(len(r.answers) <= 5 for r in unl) and len(unl) > 1000
    dm.setup("fit")
    test_contexts = {dm.passages[it.passage].context for it in dm.splits["test"]}
    assert test_contexts.isdisjoint({dm.passages[it.passage].context for it in dm.labeled})
    assert 150 <= len(dm.labeled) <= 250 and len(dm.splits["dev"]) == 300


def test_setup_bytes_count_the_squad_files_and_drawn_pairs_before_reading_them(synthetic_dir, tmp_path):
    json_bytes = sum((synthetic_dir / name).stat().st_size for name in SQUAD11_BYTES)
    dm = SemiSupervisedSquadDataModule(source="path", path=str(synthetic_dir), unlabeled_size=50)
    assert dm.setup_bytes() == HELD_PER_JSON_BYTE * json_bytes + HELD_PER_UNLABELED_PAIR * 50
    assert SemiSupervisedSquadDataModule(source="path", path=str(synthetic_dir), unlabeled=False).setup_bytes() \
        == HELD_PER_JSON_BYTE * json_bytes  # SL: no unlabelled file
    every = SemiSupervisedSquadDataModule(source="path", path=str(synthetic_dir), unlabeled_size=None)
    pairs = (synthetic_dir / "unlabeled.jsonl").stat().st_size // 200
    assert every.setup_bytes() == HELD_PER_JSON_BYTE * json_bytes + HELD_PER_UNLABELED_PAIR * pairs
    # files not there yet: the official v1.1 files for a download, nothing for a mini not yet built
    official = SemiSupervisedSquadDataModule(source="download", cache_dir=str(tmp_path), unlabeled=False)
    assert official.setup_bytes() == HELD_PER_JSON_BYTE * (30_288_272 + 4_854_279)
    assert SemiSupervisedSquadDataModule(source="mini", cache_dir=str(tmp_path), unlabeled=False).setup_bytes() == 0
    assert not any(tmp_path.iterdir())  # nothing read, built or downloaded


def test_setup_bytes_cover_the_python_objects_setup_keeps(synthetic_dir):
    tracemalloc.start()
    try:
        dm = make_dm(synthetic_dir, unlabeled_size=50)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(dm.unlabeled) == 50 and held <= dm.setup_bytes() <= 4 * held
