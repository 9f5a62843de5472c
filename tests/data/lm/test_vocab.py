"""Vocabulary rules of the released Transformer-XL code (frequency order) and MoS data.py (first-appearance order)."""

from collections import Counter

import numpy as np
import pytest

from genlab.data.lm.vocab import Vocab, build_value_vocab, build_word_vocab
from genlab.errors import DataError


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_frequency_order_specials_first_then_most_common(tmp_path):
    a = _write(tmp_path, "a.txt", "b a c\n a b\n\n d c b\n")
    b = _write(tmp_path, "b.txt", "e d\n")
    v = build_word_vocab([a, b], specials=("<eos>",))
    # counts: b3 a2 c2 d2 e1; ties (a, c, d) keep first-occurrence order; <eos> markers are not counted
    assert v.symbols == ["<eos>", "b", "a", "c", "d", "e"]
    assert v.index("<eos>") == 0


def test_frequency_order_matches_counter_most_common_on_random_text(tmp_path):
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(40)]
    lines = [" ".join(rng.choice(words, size=rng.integers(0, 12))) for _ in range(300)]
    p = _write(tmp_path, "r.txt", "\n".join(lines) + "\n")
    ref = Counter()
    for line in lines:
        ref.update(line.strip().split())
    v = build_word_vocab([p], specials=("<eos>",))
    assert v.symbols == ["<eos>"] + [w for w, _ in ref.most_common()]


def test_first_appearance_order_counts_eos_inline(tmp_path):
    p = _write(tmp_path, "t.txt", "the cat\nthe dog\n")
    q = _write(tmp_path, "v.txt", "a cat\n")
    v = build_word_vocab([p, q], specials=(), order="first_appearance")
    assert v.symbols == ["the", "cat", "<eos>", "dog", "a"]


def test_min_freq_and_max_size(tmp_path):
    p = _write(tmp_path, "t.txt", "a a a b b c\n")
    assert build_word_vocab([p], min_freq=2).symbols == ["<eos>", "a", "b"]
    assert build_word_vocab([p], max_size=1).symbols == ["<eos>", "a"]


def test_encode_maps_oov_to_unk_and_errors_without_unk():
    v = Vocab(["<eos>", "<unk>", "x"], unk="<unk>")
    assert v.encode(["x", "zzz", "<eos>"]).tolist() == [2, 1, 0]
    assert v.encode(["x"]).dtype == np.int32
    closed = Vocab(["<eos>", "x"])
    with pytest.raises(DataError, match="'zzz'.*not in the vocabulary"):
        closed.encode(["x", "zzz"], where="f.txt")


def test_save_load_roundtrip_and_fingerprint(tmp_path):
    v = Vocab(["<eos>", "<unk>", "é", "b"], unk="<unk>", specials=("<eos>",))
    v.save(tmp_path / "v.json")
    w = Vocab.load(tmp_path / "v.json")
    assert w.symbols == v.symbols and w.unk == v.unk and w.specials == v.specials
    assert w.fingerprint() == v.fingerprint()
    swapped = Vocab(["<eos>", "<unk>", "b", "é"], unk="<unk>")
    assert swapped.fingerprint() != v.fingerprint()
    assert Vocab(["<eos>", "<unk>", "é", "b"]).fingerprint() != v.fingerprint()  # unk changes the map


def test_load_rejects_corrupt_or_edited_file(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(DataError, match="bad.json"):
        Vocab.load(tmp_path / "bad.json")
    Vocab(["a", "b"]).save(tmp_path / "v.json")
    text = (tmp_path / "v.json").read_text().replace('"a", "b"', '"b", "a"')
    (tmp_path / "v.json").write_text(text)
    with pytest.raises(DataError, match="fingerprint"):
        Vocab.load(tmp_path / "v.json")


def test_duplicate_symbols_rejected():
    with pytest.raises(DataError, match="twice"):
        Vocab(["a", "b", "a"])


def test_value_vocab_equals_counter_most_common_across_streams():
    rng = np.random.default_rng(1)
    streams = [rng.integers(0, 30, size=n).astype(np.int16) for n in (500, 50, 60)]
    streams[1][:5] = 200  # a rare value seen only in the second stream
    ref = Counter()
    for s in streams:
        ref.update(s.tolist())
    vocab, table = build_value_vocab(streams, 256, [str(i) for i in range(256)])
    assert vocab.symbols == [str(v) for v, _ in ref.most_common()]
    for s in streams:
        assert [vocab.symbols[i] for i in table[s]] == [str(x) for x in s.tolist()]
    assert table[255] == -1


def test_value_vocab_ties_follow_first_occurrence_across_streams():
    streams = [np.array([2, 1], dtype=np.int16), np.array([1, 2, 3, 7, 7, 7], dtype=np.int16)]
    vocab, _ = build_value_vocab(streams, 8, [str(i) for i in range(8)], specials=("<eos>",))
    assert vocab.symbols == ["<eos>", "7", "2", "1", "3"]


def test_empty_corpus_is_a_data_error(tmp_path):
    p = _write(tmp_path, "empty.txt", "\n\n")
    with pytest.raises(DataError, match="empty"):
        build_word_vocab([p])
