"""Plain-text pretraining corpus (XLNet v1 §3.1, App. A.3): sentence ids, <eod>, shard boundaries, memmap cache,
errors."""

from pathlib import Path

import numpy as np
import pytest

from genlab.data.pretrain.corpus import (
    corpus_root,
    find_shards,
    load_pretrain_corpus,
    tokenize_split,
)
from genlab.data.pretrain.xlnet_examples import EOD_ID
from genlab.data.text.sentences import split_sentences
from genlab.data.tokenizers.xlnet_pieces import (
    PieceTokenizer,
    preprocess_text,
    train_tokenizer,
)
from genlab.errors import DataError

WORDS = ("the cat sat on a mat while dogs ran around the old house and birds sang in 2000, near "
         "rivers full of fish that swam quickly under bridges built long ago by people").split()


def _write_corpus(root: Path, n_docs=30, shards=3):
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    for k in range(shards):
        docs = []
        for _ in range(n_docs):
            lines = [" ".join(rng.choice(WORDS, rng.integers(4, 12))).capitalize() + "." for _ in range(rng.integers(1, 5))]
            docs.append("\n".join(lines) + "\n")
        (root / f"part_{k}.txt").write_text("\n".join(docs))


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    _write_corpus(root / "text")
    model = train_tokenizer(sorted((root / "text").glob("*.txt")), root / "spm", vocab_size=80)
    return PieceTokenizer(model)


def test_special_ids_and_comma_rule(tok):
    assert [tok.pieces[i] for i in range(9)] == ["<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>",
                                                 "<eod>", "<eop>"]
    pieces = [tok.pieces[i] for i in tok.encode("birds sang in 2000, near")]
    assert "," in pieces and not any(p.endswith(",") and len(p) > 1 for p in pieces)
    assert preprocess_text("  Caf\u00e9   ``x''  ") == 'Cafe "x"'


def test_sentence_ids_follow_the_official_rule(tmp_path, tok):
    f = tmp_path / "a.txt"
    f.write_text("the cat\nsat\n\nthe dog\n\n")
    s = tokenize_split([f], tok, tmp_path / "cache")
    ids, sid = np.asarray(s.tokens), np.asarray(s.sent_ids)
    n1, n2, n3 = (len(tok.encode(t)) for t in ("the cat", "sat", "the dog"))
    assert ids[n1 + n2] == EOD_ID and ids[-1] == EOD_ID
    # lines "a b" / "c" / (empty) / "d e" / (empty) -> ids 1 1 0 0 1 1 1 (eod glued to the line before it)
    expected = [1] * n1 + [0] * n2 + [0] + [1] * n3 + [1]
    assert sid.tolist() == expected


def test_shard_boundary_is_a_sentence_boundary(tmp_path, tok):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("the cat\n")  # ends with id 1
    b.write_text("the dog\n")  # starts with id 1 -> inverted
    s = tokenize_split([a, b], tok, tmp_path / "cache", use_eod=False)
    sid = np.asarray(s.sent_ids)
    n = len(tok.encode("the cat"))
    assert sid[n - 1] != sid[n]


def test_cache_is_memmapped_and_reused(tmp_path, tok):
    _write_corpus(tmp_path / "c", n_docs=5, shards=2)
    files = sorted((tmp_path / "c").glob("*.txt"))
    s1 = tokenize_split(files, tok, tmp_path / "cache")
    assert isinstance(s1.tokens, np.memmap) and len(s1) > 100 and s1.tokens.dtype == np.int32
    before = sorted(p.name for p in (tmp_path / "cache").iterdir())
    s2 = tokenize_split(files, tok, tmp_path / "cache")
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == before
    np.testing.assert_array_equal(s1.tokens, s2.tokens)


def test_missing_and_empty_corpus_errors_name_the_fix(tmp_path):
    with pytest.raises(DataError, match="data.path=.*experiment=xlnet_base_mini"):
        corpus_root(None)
    with pytest.raises(DataError, match="not a directory"):
        corpus_root(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no file"):
        find_shards(tmp_path / "empty", "*.txt", "corpus")
    (tmp_path / "empty" / "a.txt").write_text("")
    with pytest.raises(DataError, match="empty"):
        find_shards(tmp_path / "empty", "*.txt", "corpus")


def test_text_corpus_end_to_end_trains_a_tokenizer(tmp_path):
    _write_corpus(tmp_path / "corpus" / "train")
    _write_corpus(tmp_path / "corpus" / "valid", n_docs=5, shards=1)
    c = load_pretrain_corpus("text", str(tmp_path / "corpus"), str(tmp_path / "cache"), train_glob="train/*.txt",
                             valid_glob="valid/*.txt", vocab_size=80)
    assert set(c.splits) == {"train", "valid"} and len(c.splits["train"]) > len(c.splits["valid"]) > 0
    assert c.identity()["vocab_size"] == c.tokenizer.vocab_size


def test_pretrain_mini_builds_offline_in_the_same_format(tmp_path):
    pytest.importorskip("gensim", reason="pretrain_mini reads the Wikipedia excerpt inside the gensim wheel")
    from genlab.data.pretrain.minis import PRETRAIN_MINI
    from genlab.data.sources.tiers import locate

    root = locate(PRETRAIN_MINI, "mini", None, tmp_path)
    text = (root / "train" / "wiki_00.txt").read_text()
    docs = [d for d in text.split("\n\n") if d.strip()]
    assert len(docs) >= 5 and all(len(d.splitlines()) >= 1 for d in docs)
    assert (root / "valid" / "wiki_00.txt").stat().st_size > 10_000


def test_xlnet_base_without_a_corpus_says_how_to_point_at_one(compose_cfg):
    from hydra.utils import instantiate

    cfg = compose_cfg(["experiment=xlnet_base"])
    dm = instantiate(cfg.data)
    with pytest.raises(DataError, match=r"data\.path=/your/corpus.*experiment=xlnet_base_mini"):
        dm.prepare_data()


def test_pretrain_mini_heldout_leaves_out_the_cloze_minis_eval_sentences_only(tmp_path):
    """A model pretrained on pretrain_mini has read the sentences the cloze RACE/SQuAD minis test it on."""
    pytest.importorskip("gensim", reason="pretrain_mini reads the Wikipedia excerpt inside the gensim wheel")
    from genlab.data.finetune.race_mini import race_cloze_articles
    from genlab.data.pretrain.minis import (
        MINI_FILES,
        PRETRAIN_MINI,
        PRETRAIN_MINI_HELDOUT,
        cloze_eval_sentences,
    )
    from genlab.data.sources.tiers import locate

    def lines(spec):
        root = locate(spec, "mini", None, tmp_path)
        return [line for f in MINI_FILES for line in (root / f).read_text().splitlines() if line]

    full, heldout, held = lines(PRETRAIN_MINI), lines(PRETRAIN_MINI_HELDOUT), cloze_eval_sentences()
    race_test = {s for _, split, obj in race_cloze_articles() if split == "test"
                 for s in split_sentences(obj["article"])}
    assert race_test <= held and race_test <= set(full)  # the leak this corpus exists for
    assert not held & set(heldout)
    assert heldout == [line for line in full if line not in held]  # nothing else changes
    assert 0.7 * len(full) < len(heldout) < len(full)


def test_race_mini_tapt_adds_the_race_training_questions_and_nothing_held_out(tmp_path):
    """Task-adaptive text for the BERT RACE mini: training articles with their questions, no dev/test text."""
    pytest.importorskip("gensim", reason="pretrain_mini reads the Wikipedia excerpt inside the gensim wheel")
    from genlab.data.finetune.race_mini import race_cloze_articles
    from genlab.data.pretrain.minis import (
        MINI_FILES,
        PRETRAIN_MINI_HELDOUT,
        RACE_MINI_TAPT,
        RACE_TAPT_FILE,
        cloze_eval_sentences,
    )
    from genlab.data.sources.tiers import locate

    tapt = locate(RACE_MINI_TAPT, "mini", None, tmp_path)
    heldout = locate(PRETRAIN_MINI_HELDOUT, "mini", None, tmp_path)
    for f in MINI_FILES:
        assert (tapt / f).read_text() == (heldout / f).read_text()
    lines = set((tapt / RACE_TAPT_FILE).read_text().splitlines()) - {""}  # "" ends a document
    train = [obj for _, split, obj in race_cloze_articles() if split == "train"]
    kept = [obj for obj in train if obj["questions"][0] in lines]
    assert 0.85 * len(train) < len(kept) < len(train)  # articles sharing a sentence with a dev/test text are left out
    assert all(q in lines for obj in kept for q in obj["questions"])
    assert not lines & cloze_eval_sentences()
    article_lines = {s for obj in kept for s in split_sentences(obj["article"])}
    assert all("_" in line for line in lines - article_lines)  # questions keep their blank: no answer filled in


def _entry_bytes(cache: Path) -> dict[str, bytes]:
    (entry,) = cache.glob("tokens-*")
    return {n: (entry / n).read_bytes() for n in ("tokens.i32", "sent.u8")}


def test_pieces_and_processes_give_the_same_cache_bytes(tmp_path, tok, monkeypatch):
    _write_corpus(tmp_path / "c", n_docs=6, shards=3)
    files = sorted((tmp_path / "c").glob("*.txt"))
    whole = tokenize_split(files, tok, tmp_path / "whole")  # one piece per shard
    monkeypatch.setattr("genlab.data.text.chunks.PIECE_BYTES", 40)  # many pieces, cut mid-document
    tokenize_split(files, tok, tmp_path / "one", num_proc=1)
    tokenize_split(files, tok, tmp_path / "two", num_proc=2)
    assert _entry_bytes(tmp_path / "one") == _entry_bytes(tmp_path / "two") == _entry_bytes(tmp_path / "whole")
    assert len(whole) > 100


def test_cache_key_ignores_how_the_folder_is_named(tmp_path, tok, monkeypatch):
    _write_corpus(tmp_path / "real", n_docs=2, shards=2)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    monkeypatch.chdir(tmp_path)
    for spelling in ("real", "real/", str(tmp_path / "real"), "link"):
        tokenize_split(sorted(Path(spelling).glob("*.txt")), tok, tmp_path / "cache")
    assert len(list((tmp_path / "cache").glob("tokens-*"))) == 1


@pytest.mark.parametrize(("data", "message"), [
    (b"", r"b.txt is empty \(0 bytes\)"),
    (b"text\n\x00\x01binary\n", r"b.txt is a binary file"),
    (b"text\ncaf\xe9\n", r"b.txt is not valid UTF-8 text"),
])
def test_bad_shard_is_named_and_nothing_cached_is_lost(tmp_path, tok, data, message):
    good, bad = tmp_path / "a.txt", tmp_path / "b.txt"
    good.write_text("the cat sat\n")
    tokenize_split([good], tok, tmp_path / "cache")
    before = {p: p.read_bytes() for p in (tmp_path / "cache").rglob("*") if p.is_file()}
    bad.write_bytes(data)
    with pytest.raises(DataError, match=message):
        tokenize_split([good, bad], tok, tmp_path / "cache")
    assert {p: p.read_bytes() for p in (tmp_path / "cache").rglob("*") if p.is_file()} == before
