"""Readers on small fixtures written in each benchmark's real format (the benchmarks of Transformer-XL and MoS)."""

import zipfile
from collections import Counter

import numpy as np
import pytest

from genlab.data.lm import readers as R
from genlab.data.lm.corpora import load_lm_corpus
from genlab.data.lm.vocab import Vocab
from genlab.data.text import chunks
from genlab.errors import ConfigError, DataError


def _arrays(reader, *args, **kwargs):
    """A reader's splits as arrays (word readers stream their ids in chunks)."""
    vocab, splits = reader(*args, **kwargs)
    return vocab, {s: R.materialize(v) for s, v in splits.items()}



def _wikitext(root, train, valid=" = V = \n valid a \n", test=" test a \n"):
    for split, text in {"train": train, "valid": valid, "test": test}.items():
        (root / f"wiki.{split}.tokens").write_text(text, encoding="utf-8")


WT_TRAIN = " \n = Title = \n \n a b a @-@ c , <unk> \n \n = = Sec = = \n \n b a . \n"


# ------------------------------------------------------------------------------------------------ WikiText
def test_c17_wt103_appends_eos_to_blank_lines_too(tmp_path):
    _wikitext(tmp_path, WT_TRAIN)
    vocab, splits = _arrays(R.read_wikitext, tmp_path)
    train = vocab.decode(splits["train"])
    n_lines = WT_TRAIN.count("\n")
    assert train.count("<eos>") == n_lines  # one per line, blank lines included
    assert train[:6] == ["<eos>", "=", "Title", "=", "<eos>", "<eos>"]
    assert train[-4:] == ["b", "a", ".", "<eos>"]


def test_wt103_vocab_from_train_only_eos_first_frequency_order(tmp_path):
    _wikitext(tmp_path, WT_TRAIN, valid=" a zzz \n")
    vocab, splits = _arrays(R.read_wikitext, tmp_path, vocab_splits=("train",))
    counts = Counter(WT_TRAIN.split())
    assert vocab.symbols == ["<eos>"] + [w for w, _ in counts.most_common()]
    assert "zzz" not in vocab
    assert vocab.decode(splits["valid"]) == ["a", "<unk>", "<eos>"]  # the corpus' own <unk> takes OOV words
    assert all(s.dtype == np.int32 for s in splits.values())


def test_wt2_counts_all_splits(tmp_path):
    _wikitext(tmp_path, WT_TRAIN, valid=" q q q q q q q \n")
    vocab, _ = _arrays(R.read_wikitext, tmp_path, vocab_splits=R.SPLITS)
    assert vocab.symbols[:2] == ["<eos>", "q"]  # 7 counts in valid beat everything in train


def test_wikitext_without_unk_symbol_rejects_oov(tmp_path):
    _wikitext(tmp_path, " a b \n", valid=" c \n", test=" a \n")
    with pytest.raises(DataError, match="wiki.valid.tokens: symbol 'c' is not in the vocabulary"):
        _arrays(R.read_wikitext, tmp_path)


# ------------------------------------------------------------------------------------------------ PTB
def _ptb(root, char=False):
    stem = "ptb.char" if char else "ptb"
    texts = {"train": " the cat sat \n the N dog \n", "valid": " a cat \n", "test": " the <unk> \n"}
    for s, t in texts.items():
        (root / f"{stem}.{s}.txt").write_text(t)
    return texts


def test_ptb_vocab_from_all_splits_and_eos_per_line(tmp_path):
    texts = _ptb(tmp_path)
    vocab, splits = _arrays(R.read_ptb, tmp_path)
    assert vocab.symbols[:2] == ["<eos>", "the"]
    assert set(vocab.symbols) == {"<eos>", "the", "cat", "sat", "N", "dog", "a", "<unk>"}
    assert vocab.decode(splits["valid"]) == ["a", "cat", "<eos>"]
    assert len(splits["train"]) == len(texts["train"].split()) + 2


def test_ptb_first_appearance_order_is_the_mos_rule(tmp_path):
    _ptb(tmp_path)
    vocab, _ = _arrays(R.read_ptb, tmp_path, order="first_appearance")
    assert vocab.symbols == ["the", "cat", "sat", "<eos>", "N", "dog", "a", "<unk>"]


def test_ptb_lower_case_is_the_txl_setting(tmp_path):
    _ptb(tmp_path)
    vocab, splits = _arrays(R.read_ptb, tmp_path, lower_case=True)
    assert "n" in vocab and "N" not in vocab and "<unk>" in vocab and vocab.symbols[0] == "<eos>"
    corpus = load_lm_corpus("ptb", "path", str(tmp_path), cache_dir=tmp_path / "c")
    assert corpus.vocab.symbols == vocab.symbols  # TXL default
    mos = load_lm_corpus("ptb", "path", str(tmp_path), cache_dir=tmp_path / "c",
                         vocab_order="first_appearance", lower_case=False)
    assert mos.vocab.symbols == ["the", "cat", "sat", "<eos>", "N", "dog", "a", "<unk>"]


def test_ptb_char_reader(tmp_path):
    for s in R.SPLITS:
        (tmp_path / f"ptb.char.{s}.txt").write_text("a b _ c\nc _ a\n")
    vocab, splits = _arrays(R.read_ptb, tmp_path, char=True)
    assert vocab.decode(splits["train"]) == ["a", "b", "_", "c", "<eos>", "c", "_", "a", "<eos>"]


# ------------------------------------------------------------------------------------------------ enwik8
def _enwik8_zip(root, data: bytes):
    with zipfile.ZipFile(root / "enwik8.zip", "w") as z:
        z.writestr("enwik8", data)


def test_enwik8_prepare_writes_decimal_bytes_and_splits(tmp_path):
    rng = np.random.default_rng(0)
    data = bytes(rng.integers(0, 256, size=300).astype(np.uint8)) + b"ab\ncd"
    _enwik8_zip(tmp_path, data)
    R.prepare_enwik8(tmp_path, n_test=40)
    parts = {"train": data[:-80], "valid": data[-80:-40], "test": data[-40:]}
    for split, part in parts.items():
        expected = " ".join(str(c) if c != 10 else "\n" for c in part)  # prep_enwik8.py's format
        assert (tmp_path / f"{split}.txt").read_text() == expected


def test_c17_enwik8_newline_flag(tmp_path):
    """keep_newlines=False reproduces the official stream (newline bytes dropped)."""
    data = b"<page>\nA & B\n\n\xc3\xa9</page>" * 3
    _enwik8_zip(tmp_path, data)
    R.prepare_enwik8(tmp_path, n_test=len(data) // 5)
    n = len(data) // 5
    test_bytes = data[-n:]
    dropped = R.parse_decimal_bytes(tmp_path / "test.txt", keep_newlines=False)
    kept = R.parse_decimal_bytes(tmp_path / "test.txt", keep_newlines=True)
    assert bytes(kept.astype(np.uint8)) == test_bytes
    assert bytes(dropped.astype(np.uint8)) == test_bytes.replace(b"\n", b"")
    vocab, splits = _arrays(R.read_enwik8, tmp_path, keep_newlines=False)
    assert "10" not in vocab and len(vocab) == len(set(data) - {10})
    assert "".join(chr(int(s)) for s in vocab.decode(splits["test"])) == test_bytes.replace(b"\n", b"").decode("latin1")
    vocab_nl, _ = R.read_enwik8(tmp_path, keep_newlines=True)
    assert "10" in vocab_nl and len(vocab_nl) == len(set(data))
    ref = Counter(b for b in data if b != 10)
    assert vocab.symbols == [str(b) for b, _ in ref.most_common()]  # train+valid+test, frequency order


def test_enwik8_malformed_file(tmp_path):
    for s in R.SPLITS:
        (tmp_path / f"{s}.txt").write_text("65 66 67")
    (tmp_path / "valid.txt").write_text("65 6x 67")
    with pytest.raises(DataError, match="valid.txt.*not in enwik8 format"):
        R.read_enwik8(tmp_path)
    (tmp_path / "valid.txt").write_text("65 300")
    with pytest.raises(DataError, match="valid.txt.*not a byte"):
        R.read_enwik8(tmp_path)


def test_corrupt_zip_member_publishes_no_split(tmp_path):
    """The CRC is only known at the member's end, after the training part streamed out: no split is published."""
    data = b"some text8 words " * 400
    with zipfile.ZipFile(tmp_path / "text8.zip", "w", zipfile.ZIP_STORED) as z:
        z.writestr("text8", data)
    raw = (tmp_path / "text8.zip").read_bytes()
    flip = raw.index(data) + len(data) - 5  # a byte of the test part
    (tmp_path / "text8.zip").write_bytes(raw[:flip] + b"Q" + raw[flip + 1 :])
    with pytest.raises(DataError, match="text8.zip is corrupt or truncated"):
        R.prepare_text8(tmp_path, n_test=100)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["text8.zip"]


def test_enwik8_truncated_zip(tmp_path):
    _enwik8_zip(tmp_path, b"x" * 5000)
    raw = (tmp_path / "enwik8.zip").read_bytes()
    (tmp_path / "enwik8.zip").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(DataError, match="enwik8.zip is corrupt or truncated"):
        R.prepare_enwik8(tmp_path, n_test=10)


# ------------------------------------------------------------------------------------------------ text8
def test_c17_text8_maps_space_to_underscore_and_has_27_symbols(tmp_path):
    alphabet = "abcdefghijklmnopqrstuvwxyz"
    text = (" " + " ".join(alphabet[i:] + alphabet[:i] for i in range(26))) * 4
    with zipfile.ZipFile(tmp_path / "text8.zip", "w") as z:
        z.writestr("text8", text)
    n = len(text) // 10
    R.prepare_text8(tmp_path, n_test=n)
    test_part = text[-n:].strip()
    assert (tmp_path / "test.txt").read_text() == " ".join("_" if c == " " else c for c in test_part)
    vocab, splits = _arrays(R.read_text8, tmp_path)
    assert len(vocab) == 27 and "_" in vocab and " " not in vocab
    assert "".join(vocab.decode(splits["test"])) == test_part.replace(" ", "_")


@pytest.mark.parametrize("name", ["enwik8", "text8"])
def test_byte_and_char_corpora_are_the_same_prepared_and_read_in_small_pieces(tmp_path, monkeypatch, name):
    """enwik8/text8 are streamed out of the zip, prepared and read a piece at a time (memory flat in the file size):
    7-byte pieces give the files and ids of one piece, including stripped ends (whitespace runs longer than a piece
    at the parts' edges) and a vocabulary whose ties need a second pass."""
    rng = np.random.default_rng(1)
    words = [" ".join(rng.choice(["ab", "c", "dde", "f\n"], 400))] if name == "enwik8" else ["  a bc  d ef " * 60]
    out = {}
    reads: list[int] = []
    member_read = zipfile.ZipExtFile.read
    monkeypatch.setattr(zipfile.ZipExtFile, "read", lambda f, n=-1: reads.append(n) or member_read(f, n))
    for piece in (1 << 23, 7):
        root = tmp_path / str(piece)
        root.mkdir()
        with zipfile.ZipFile(root / f"{name}.zip", "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr(name, words[0])
        monkeypatch.setattr(R, "PARSE_CHUNK_BYTES", piece)
        reads.clear()
        (R.prepare_enwik8 if name == "enwik8" else R.prepare_text8)(root, n_test=len(words[0]) // 7 - 8)
        assert 0 < max(reads) <= piece  # the member is never read whole (the trailing read(-1) only meets the end)
        vocab, splits = _arrays(R.read_enwik8 if name == "enwik8" else R.read_text8, root)
        out[piece] = ([(root / f"{s}.txt").read_bytes() for s in R.SPLITS], vocab.symbols, splits)
    (files, symbols, splits), (files_7, symbols_7, splits_7) = out.values()
    assert files == files_7 and symbols == symbols_7
    assert all(np.array_equal(splits[s], splits_7[s]) for s in R.SPLITS)


def test_text8_malformed(tmp_path):
    for s in R.SPLITS:
        (tmp_path / f"{s}.txt").write_text("a b _ c")
    (tmp_path / "test.txt").write_text("a bc _ d")
    with pytest.raises(DataError, match="test.txt.*prepared text8 format"):
        R.read_text8(tmp_path)
    (tmp_path / "test.txt").write_text("a B")
    with pytest.raises(DataError, match="test.txt"):
        R.read_text8(tmp_path)


# ------------------------------------------------------------------------------------------------ LM1B
def _lm1b(root, shards):
    (root / R.LM1B_TRAIN_DIR).mkdir()
    (root / R.LM1B_HELDOUT_DIR).mkdir()
    names = R.LM1B_TRAIN_SHARDS[: len(shards)]
    for name, sents in zip(names, shards):
        (root / name).write_text("".join(s + "\n" for s in sents))
    (root / R.LM1B_HELDOUT).write_text("the cat .\nan unseen word\n")
    (root / R.LM1B_VOCAB).write_text("<S> 0\n</S> 9\n<UNK> 0\nthe 5\ncat 3\ndog 2\n. 2\nan 1\n")
    return names


SHARDS = [["the cat .", "the dog", "cat"], ["dog dog .", "the"], ["cat the dog ."]]


def _read_lm1b(*args, **kwargs):
    vocab, splits = R.read_lm1b(*args, **kwargs)
    return vocab, {s: R.materialize(v) for s, v in splits.items()}


def _targets_per_sentence(ids, vocab):
    """Split the (input -> target) pairs of a stream at <S> targets: each chunk is one sentence's targets."""
    toks = vocab.decode(ids)
    pairs = list(zip(toks[:-1], toks[1:]))
    return toks, pairs


def test_c17_lm1b_pytorch_convention_scores_each_sentence_once_and_never_s_to_s(tmp_path):
    names = _lm1b(tmp_path, SHARDS)
    vocab, splits = _read_lm1b(tmp_path, "pytorch", 0, train_shards=names)
    toks, pairs = _targets_per_sentence(splits["train"], vocab)
    assert ("<S>", "<S>") not in pairs
    n_sent = sum(len(s) for s in SHARDS)
    assert toks[0] == "<S>" and toks[-1] == "<S>" and toks.count("<S>") == n_sent + 1
    targets = Counter(toks[1:])  # every position after the first is a target exactly once
    words = Counter(w for shard in SHARDS for s in shard for w in s.split())
    assert targets == words + Counter({"<S>": n_sent})
    # sentences come back intact (between consecutive <S>), in a shuffled order
    sents = " ".join(toks).split(" <S> ")
    sents[0], sents[-1] = sents[0].removeprefix("<S> "), sents[-1].removesuffix(" <S>")
    assert sorted(sents) == sorted(s for shard in SHARDS for s in shard)


def test_lm1b_tf_convention_also_scores_s_to_s(tmp_path):
    names = _lm1b(tmp_path, SHARDS)
    vocab, splits = _read_lm1b(tmp_path, "tf", 0, train_shards=names)
    toks, pairs = _targets_per_sentence(splits["train"], vocab)
    n_sent = sum(len(s) for s in SHARDS)
    assert pairs.count(("<S>", "<S>")) == n_sent - 1
    assert toks.count("<S>") == 2 * n_sent


def test_lm1b_shuffle_seed_and_heldout(tmp_path):
    names = _lm1b(tmp_path, [[f"the cat {'dog ' * i}." for i in range(30)]] * 2)
    v, a = _read_lm1b(tmp_path, "pytorch", 0, train_shards=names)
    _, b = _read_lm1b(tmp_path, "pytorch", 0, train_shards=names)
    _, c = _read_lm1b(tmp_path, "pytorch", 1, train_shards=names)
    assert np.array_equal(a["train"], b["train"])
    assert not np.array_equal(a["train"], c["train"])
    assert sorted(a["train"].tolist()) == sorted(c["train"].tolist())
    assert np.array_equal(a["valid"], a["test"])  # heldout-00000 is both (TXL getdata.sh)
    assert v.decode(a["valid"]) == ["<S>", "the", "cat", ".", "<S>", "an", "<UNK>", "<UNK>", "<S>"]
    assert v.symbols[:3] == ["<S>", "</S>", "<UNK>"]  # the vocabulary file's order


def test_lm1b_vocab_file_must_hold_s_and_unk(tmp_path):
    names = _lm1b(tmp_path, SHARDS)
    (tmp_path / R.LM1B_VOCAB).write_text("the 3\ncat 2\n")
    with pytest.raises(DataError, match="1b_word_vocab.txt lacks the symbol <S>"):
        R.read_lm1b(tmp_path, train_shards=names)


def test_lm1b_mos_setup_lowercases_caps_the_vocabulary_and_uses_its_heldout_shards(tmp_path):
    names = _lm1b(tmp_path, [["The cat .", "the Dog", "cat"], ["dog DOG .", "the"], ["Cat the bird ."]])
    for k, shard in enumerate((*R.LM1B_MOS_VALID, *R.LM1B_MOS_TEST)):
        (tmp_path / shard).write_text(f"The Cat {k} .\n")
    vocab = R.build_lm1b_top_vocab(tmp_path, 6, train_shards=names)
    # <eos>, <unk>, then the 4 most frequent lower-cased words (the 4, then cat, ., dog 3 each in order of first
    # appearance; bird is cut)
    assert vocab.symbols == ["<eos>", "<unk>", "the", "cat", ".", "dog"] and vocab.unk == "<unk>"
    _, splits = _read_lm1b(tmp_path, "eos", 0, train_shards=names, valid_shards=R.LM1B_MOS_VALID,
                           test_shards=R.LM1B_MOS_TEST, vocab=vocab, lower=True)
    assert vocab.decode(splits["valid"]) == "the cat <unk> . <eos> the cat <unk> . <eos>".split()
    assert len(splits["test"]) == 3 * 5 and vocab.decode(splits["test"][:1]) == ["the"]
    train = vocab.decode(splits["train"])
    assert train.count("<eos>") == 6 and train[-1] == "<eos>" and "<unk>" in train  # bird
    with pytest.raises(DataError, match="vocab_size=2"):
        R.build_lm1b_top_vocab(tmp_path, 2, train_shards=names)


def test_lm1b_mos_mini_has_the_mos_heldout_shards(tmp_path):
    c = load_lm_corpus("lm1b_mos", "mini", cache_dir=tmp_path)
    assert c.vocab.symbols[:2] == ["<eos>", "<unk>"] and c.vocab.unk == "<unk>"
    assert all(s == s.lower() for s in c.vocab.symbols)
    assert len(c.splits["test"]) > len(c.splits["valid"]) > 0  # three held-out shards against two
    assert load_lm_corpus("lm1b_mos", "mini", cache_dir=tmp_path, vocab_size=50).vocab_size == 50


# ------------------------------------------------------------------------------------------------ errors
def test_empty_split_is_a_data_error_naming_the_file(tmp_path):
    _wikitext(tmp_path, WT_TRAIN, test="")
    with pytest.raises(DataError, match="wiki.test.tokens.*empty"):
        _arrays(R.read_wikitext, tmp_path)
    for s in R.SPLITS:
        (tmp_path / f"{s}.txt").write_text("65 66" if s != "valid" else "  \n ")
    with pytest.raises(DataError, match="valid.txt holds no tokens"):
        _arrays(R.read_enwik8, tmp_path)


def test_non_utf8_file_is_a_data_error(tmp_path):
    _wikitext(tmp_path, WT_TRAIN)
    (tmp_path / "wiki.valid.tokens").write_bytes(b"\xff\xfe bad \n")
    with pytest.raises(DataError, match="wiki.valid.tokens is not valid UTF-8"):
        _arrays(R.read_wikitext, tmp_path)
    (tmp_path / "wiki.train.tokens").write_bytes(b" ok \n \xc3\x28 \n")  # the file the vocabulary is counted on
    with pytest.raises(DataError, match="wiki.train.tokens is not valid UTF-8"):
        _arrays(R.read_wikitext, tmp_path)


def test_missing_split_file_is_a_data_error(tmp_path):
    _wikitext(tmp_path, WT_TRAIN)
    (tmp_path / "wiki.test.tokens").unlink()
    with pytest.raises(DataError, match="wiki.test.tokens is missing"):
        _arrays(R.read_wikitext, tmp_path)


def test_load_lm_corpus_path_tier_and_cache(tmp_path):
    data = tmp_path / "wt"
    data.mkdir()
    _wikitext(data, WT_TRAIN)
    cache = tmp_path / "cache"
    c = load_lm_corpus("wikitext103", "path", str(data), cache_dir=cache)
    assert (c.level, c.metric) == ("word", "ppl")
    assert isinstance(c.splits["train"], np.memmap) and c.splits["train"].dtype == np.int32
    ref_vocab, ref = _arrays(R.read_wikitext, data)
    assert c.vocab.symbols == ref_vocab.symbols
    assert all(np.array_equal(c.splits[s], ref[s]) for s in R.SPLITS)
    entries = list((cache / "tokens").iterdir())
    load_lm_corpus("wikitext103", "path", str(data), cache_dir=cache)
    assert list((cache / "tokens").iterdir()) == entries  # second load reuses the cache
    (data / "wiki.train.tokens").write_text(WT_TRAIN + " new words \n")
    c2 = load_lm_corpus("wikitext103", "path", str(data), cache_dir=cache)
    assert "new" in c2.vocab and len(list((cache / "tokens").iterdir())) == 2  # edited file -> new entry
    c3 = load_lm_corpus("wikitext103", "path", str(data), cache_dir=cache, vocab_order="first_appearance")
    assert c3.vocab.fingerprint() != c2.vocab.fingerprint()


def test_load_lm_corpus_rejects_unknown_names_and_options(tmp_path):
    with pytest.raises(ConfigError, match="'wt99'.*wikitext103"):
        load_lm_corpus("wt99", "mini", cache_dir=tmp_path)
    with pytest.raises(ConfigError, match="no option 'keep_newline'.*keep_newlines"):
        load_lm_corpus("enwik8", "mini", cache_dir=tmp_path, keep_newline=True)
    with pytest.raises(ConfigError, match="convention='xla'"):
        load_lm_corpus("lm1b", "mini", cache_dir=tmp_path, convention="xla")


def test_load_lm_corpus_missing_path_names_files_and_fix(tmp_path):
    with pytest.raises(DataError, match=r"(?s)lacks 3 of its 3 files \(wiki.train.tokens.*data\.path=.*data\.source=mini"):
        load_lm_corpus("wikitext103", "path", str(tmp_path), cache_dir=tmp_path)


def test_lm1b_through_load_lm_corpus_streams_train_into_the_cache(tmp_path):
    data = tmp_path / "lm1b"
    data.mkdir()
    shards = [[f"the cat {'dog ' * (i % 4)}." for i in range(k, k + 3)] for k in range(99)]
    _lm1b(data, shards)
    c = load_lm_corpus("lm1b", "path", str(data), cache_dir=tmp_path / "cache", shuffle_seed=3)
    vocab, ref = _read_lm1b(data, "pytorch", 3)
    assert c.vocab.symbols == vocab.symbols
    assert all(np.array_equal(c.splits[s], ref[s]) for s in R.SPLITS)
    assert len(c.splits["train"]) == sum(len(s.split()) + 1 for shard in shards for s in shard) + 1


def test_chunked_parsing_matches_whole_file_parsing(tmp_path, monkeypatch):
    rng = np.random.default_rng(5)
    data = bytes(rng.integers(0, 256, size=3000).astype(np.uint8))
    _enwik8_zip(tmp_path, data)
    monkeypatch.setattr(R, "PARSE_CHUNK_BYTES", 7)  # chunks cut right next to every kind of boundary
    R.prepare_enwik8(tmp_path, n_test=500)
    got = [R.parse_decimal_bytes(tmp_path / f"{s}.txt", keep_newlines=True) for s in R.SPLITS]
    assert bytes(np.concatenate(got).astype(np.uint8)) == data
    letters = np.frombuffer(b" abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
    text = bytes(letters[rng.integers(0, 27, size=3000)]).replace(b"  ", b" ")
    with zipfile.ZipFile(tmp_path / "text8.zip", "w") as z:
        z.writestr("text8", text)
    R.prepare_text8(tmp_path, n_test=400)
    train = R.parse_text8_chars(tmp_path / "train.txt")
    assert bytes(train.astype(np.uint8)) == text[:-800].strip().replace(b" ", b"_")


def test_default_cache_dir_is_the_sources_default(tmp_path, monkeypatch):
    from genlab.data.sources import tiers as sources

    monkeypatch.setattr(sources, "DEFAULT_CACHE", tmp_path / "default")
    _ptb(tmp_path)
    load_lm_corpus("ptb", "path", str(tmp_path))
    assert len(list((tmp_path / "default" / "tokens").iterdir())) == 1


def test_vocab_file_encodes_with_a_shipped_vocabulary(tmp_path):
    """An imported checkpoint's vocabulary is used as is, not rebuilt from the corpus."""
    data = tmp_path / "wt"
    data.mkdir()
    _wikitext(data, WT_TRAIN)
    built = load_lm_corpus("wikitext103", "path", str(data), cache_dir=tmp_path / "c")
    shipped = Vocab(list(reversed(built.vocab.symbols)) + ["extra"], unk="<unk>")
    shipped.save(tmp_path / "ckpt_vocab.json")
    c = load_lm_corpus("wikitext103", "path", str(data), cache_dir=tmp_path / "c",
                       vocab_file=str(tmp_path / "ckpt_vocab.json"))
    assert c.vocab.fingerprint() == shipped.fingerprint()
    for split in R.SPLITS:
        assert c.vocab.decode(c.splits[split]) == built.vocab.decode(built.splits[split])
    Vocab(shipped.symbols[:-1], unk="<unk>").save(tmp_path / "ckpt_vocab.json")  # same path, new content
    c2 = load_lm_corpus("wikitext103", "path", str(data), cache_dir=tmp_path / "c",
                        vocab_file=str(tmp_path / "ckpt_vocab.json"))
    assert len(c2.vocab) == len(shipped) - 1 and c2.settings["vocab_file"] == str(tmp_path / "ckpt_vocab.json")


def test_vocab_file_for_bytes_must_cover_the_corpus(tmp_path):
    for s in R.SPLITS:
        (tmp_path / f"{s}.txt").write_text("65 66 67")
    Vocab(["67", "66", "65", "1"]).save(tmp_path / "v.json")
    vocab, splits = _arrays(R.read_enwik8, tmp_path, vocab=Vocab.load(tmp_path / "v.json"))
    assert splits["train"].tolist() == [2, 1, 0]
    with pytest.raises(DataError, match="train.txt: symbol '66' is not in the given vocabulary"):
        _arrays(R.read_enwik8, tmp_path, vocab=Vocab(["65", "67"]))


def test_word_corpus_is_the_same_in_pieces_and_over_processes(tmp_path, monkeypatch):
    _wikitext(tmp_path, WT_TRAIN * 5, valid=WT_TRAIN, test=" a b \n")
    ref_vocab, ref = _arrays(R.read_wikitext, tmp_path, "first_appearance")
    monkeypatch.setattr("genlab.data.text.chunks.PIECE_BYTES", 16)
    for procs in (1, 2):
        vocab, splits = _arrays(R.read_wikitext, tmp_path, "first_appearance", num_proc=procs)
        assert vocab.symbols == ref_vocab.symbols
        assert all(splits[s].tobytes() == ref[s].tobytes() for s in R.SPLITS)


def test_cache_key_is_one_whichever_tier_or_spelling_names_the_folder(tmp_path, monkeypatch):
    (tmp_path / "ptb").mkdir()
    _ptb(tmp_path / "ptb")
    (tmp_path / "link").symlink_to(tmp_path / "ptb")
    monkeypatch.chdir(tmp_path)
    for source, path in [("path", "ptb"), ("download", "ptb"), ("path", "ptb/"), ("path", str(tmp_path / "link"))]:
        load_lm_corpus("ptb", source, path, cache_dir=tmp_path / "cache")
    assert len(list((tmp_path / "cache" / "tokens").iterdir())) == 1


@pytest.mark.parametrize("convention", R.LM1B_CONVENTIONS)
def test_lm1b_training_shards_encoded_in_workers_equal_shuffling_the_sentence_lists(tmp_path, monkeypatch,
                                                                                     convention):
    """Workers encode each shard in file order and the parent lays the sentences out in the shuffled order: the same
    stream as shuffling each shard's sentence list and joining it with its boundary symbols, for 1 or 2 processes
    and for shards read in pieces of a line or two (Windows and old-Mac line ends and blank lines included); the
    int64 index arrays of a shard past 2**31 positions lay it out as the int32 ones do."""
    shards = [[f"the cat {'dog ' * (i % 5)}." for i in range(k, k + 9)] + ["an odd one"] for k in range(4)]
    names = _lm1b(tmp_path, shards)
    (tmp_path / names[1]).write_bytes(b"the cat .\r\n\r\n  dog the\rcat\n\n")
    vocab = R.read_lm1b_vocab(tmp_path / R.LM1B_VOCAB)
    rng = np.random.default_rng(3)
    expected = []
    for k, shard in enumerate(rng.permutation(len(names))):
        sents = R._sentences(tmp_path / names[int(shard)])
        sents = [sents[i] for i in rng.permutation(len(sents))]
        expected.append(R.lm1b_stream(sents, vocab, convention, "ref", opening=k == 0))
    for procs, piece, index32 in ((1, chunks.PIECE_BYTES, R.INDEX32_MAX), (2, chunks.PIECE_BYTES, R.INDEX32_MAX),
                                  (1, 16, R.INDEX32_MAX), (2, 16, R.INDEX32_MAX), (1, chunks.PIECE_BYTES, 8)):
        monkeypatch.setattr(chunks, "PIECE_BYTES", piece)
        monkeypatch.setattr(R, "INDEX32_MAX", index32)
        _, splits = _read_lm1b(tmp_path, convention, 3, train_shards=names, num_proc=procs)
        assert np.array_equal(splits["train"], np.concatenate(expected)) and splits["train"].dtype == np.int32


@pytest.mark.parametrize("text", [b"", b"\n \n\n"])
def test_lm1b_training_shard_without_sentences_is_a_data_error_naming_it(tmp_path, monkeypatch, text):
    names = _lm1b(tmp_path, SHARDS)
    (tmp_path / names[2]).write_bytes(text)
    monkeypatch.setattr(chunks, "PIECE_BYTES", 4)
    with pytest.raises(DataError, match="news.en-00003-of-00100 holds no sentences"):
        _read_lm1b(tmp_path, train_shards=names)
