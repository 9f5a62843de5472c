"""SentencePiece tokenizer: training with special symbols, load, encode/decode, fingerprint, symbol checks, bounded
and path-independent training text, long lines."""

import logging
import shutil

import numpy as np
import pytest

from genlab.data.tokenizers.sentencepiece import SentencePieceTokenizer, cut_line, sample_lines
from genlab.errors import DataError

XLNET_CONTROL = ("<cls>", "<sep>", "<pad>", "<mask>", "<eod>")
XLNET_USER = ("<eop>",)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = np.random.default_rng(0)
    syllables = ["ka", "ro", "te", "mi", "sun", "lo", "ver", "an", "dis", "po", "qu", "el", "ix", "tra", "no"]
    words = ["the", "model", "memory", "token", "segment"]
    words += ["".join(rng.choice(syllables, size=rng.integers(1, 4))) for _ in range(300)]
    lines = [" ".join(rng.choice(words, size=rng.integers(3, 15))).capitalize() + " ." for _ in range(3000)]
    path = tmp_path_factory.mktemp("spm") / "text.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def unigram(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("model") / "sp.model"
    return SentencePieceTokenizer.train(
        [corpus], out, vocab_size=120, user_defined_symbols=XLNET_USER, control_symbols=XLNET_CONTROL
    )


def test_user_defined_symbol_is_one_piece_in_text(unigram):
    pieces = unigram.encode_pieces("memory <eop> token")
    assert "<eop>" in pieces
    ids = unigram.encode("memory <eop> token")
    assert unigram.piece_to_id("<eop>") in ids


def test_control_symbols_have_ids_but_never_come_from_text(unigram):
    for sym in XLNET_CONTROL:
        i = unigram.piece_to_id(sym)
        assert i != unigram.unk_id and unigram.is_control(i)
        assert i not in unigram.encode(f"the {sym} model")


def test_encode_decode_roundtrip(unigram):
    text = "The model keeps token memory ."
    assert unigram.decode(unigram.encode(text)) == text
    assert unigram.encode([text, text]) == [unigram.encode(text)] * 2


def test_fingerprint_reload_and_retrain_are_stable(unigram, corpus, tmp_path):
    again = SentencePieceTokenizer(unigram.model_file, required_symbols=XLNET_CONTROL)
    assert again.fingerprint() == unigram.fingerprint()
    retrained = SentencePieceTokenizer.train(
        [corpus], tmp_path / "b.model", vocab_size=120, user_defined_symbols=XLNET_USER, control_symbols=XLNET_CONTROL
    )
    assert retrained.fingerprint() == unigram.fingerprint()  # deterministic training
    other = SentencePieceTokenizer.train([corpus], tmp_path / "c.model", vocab_size=100, control_symbols=XLNET_CONTROL)
    assert other.fingerprint() != unigram.fingerprint()
    assert (tmp_path / "c.vocab").read_text().count("\n") == len(other) == 100


def test_bpe_model_type(corpus, tmp_path):
    bpe = SentencePieceTokenizer.train([corpus], tmp_path / "bpe.model", vocab_size=100, model_type="bpe",
                                       user_defined_symbols=XLNET_USER)
    assert len(bpe) == 100 and bpe.decode(bpe.encode("memory segment")) == "memory segment"


def test_missing_required_symbols_is_an_error(unigram, corpus, tmp_path):
    plain = SentencePieceTokenizer.train([corpus], tmp_path / "plain.model", vocab_size=80)
    with pytest.raises(DataError, match=r"lacks the symbols \['<eop>', '<mask>'\].*user_defined_symbols"):
        SentencePieceTokenizer(plain.model_file, required_symbols=("<eop>", "<mask>", "<unk>"))
    with pytest.raises(DataError, match="lacks the symbols"):
        unigram.check_symbols(["<eos_not_there>"])


def test_training_and_loading_errors(corpus, tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        SentencePieceTokenizer.train([tmp_path / "nope.txt"], tmp_path / "m.model", vocab_size=50)
    (tmp_path / "empty.txt").write_text("\n \n")
    with pytest.raises(DataError, match="empty"):
        SentencePieceTokenizer.train([tmp_path / "empty.txt"], tmp_path / "m.model", vocab_size=50)
    with pytest.raises(DataError, match="Vocabulary size too high|lower vocab_size"):
        SentencePieceTokenizer.train([corpus], tmp_path / "m.model", vocab_size=50_000)
    assert not (tmp_path / "m.model").exists()  # nothing half-written
    (tmp_path / "junk.model").write_bytes(b"not a model")
    with pytest.raises(DataError, match="not a SentencePiece model"):
        SentencePieceTokenizer(tmp_path / "junk.model")
    with pytest.raises(DataError, match="model_type"):
        SentencePieceTokenizer.train([corpus], tmp_path / "m.model", vocab_size=50, model_type="wordpiece")


# ------------------------------------------------------------------ bounded training text
def test_text_under_the_bound_trains_exactly_as_sentencepiece_on_the_files(corpus, unigram):
    """Under ``max_bytes`` (and with no line over SentencePiece's length limit) the trainer gets the files themselves
    with the same options: the very model of a direct SentencePiece call, but for the input path it records."""
    import io

    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2

    spm.set_random_generator_seed(0)
    direct = io.BytesIO()
    spm.SentencePieceTrainer.train(input=[str(corpus)], model_writer=direct, vocab_size=120, model_type="unigram",
                                   user_defined_symbols=list(XLNET_USER), control_symbols=list(XLNET_CONTROL),
                                   character_coverage=1.0, num_threads=1, minloglevel=2)
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(direct.getvalue())
    assert list(proto.trainer_spec.input) == [str(corpus)]
    del proto.trainer_spec.input[:]
    assert unigram.model_file.read_bytes() == proto.SerializeToString()


def test_text_over_the_bound_trains_on_a_seeded_sample_of_its_lines(corpus, tmp_path):
    size = corpus.stat().st_size
    lines = corpus.read_bytes().splitlines(keepends=True)
    samples = [sample_lines([corpus], tmp_path / f"s{k}.txt", size // 4, seed=k // 2) for k in range(3)]
    assert samples[0].read_bytes() == samples[1].read_bytes() != samples[2].read_bytes()  # seeded
    kept = samples[0].read_bytes().splitlines(keepends=True)
    assert abs(sum(map(len, kept)) - size / 4) < 0.1 * size / 4
    it = iter(lines)
    assert all(line in it for line in kept)  # whole lines of the text, in its order
    out = tmp_path / "model" / "sp.model"
    bounded = SentencePieceTokenizer.train([corpus], out, vocab_size=120, max_bytes=size // 4)
    on_sample = SentencePieceTokenizer.train([samples[0]], tmp_path / "direct.model", vocab_size=120)
    assert [bounded.id_to_piece(i) for i in range(len(bounded))] == [on_sample.id_to_piece(i) for i in
                                                                       range(len(on_sample))]
    assert sorted(p.name for p in out.parent.iterdir()) == ["sp.model", "sp.vocab"]  # the sample is removed


def test_unwritable_model_folder_is_one_message_before_training(corpus, tmp_path):
    blocker = tmp_path / "a file"
    blocker.write_text("not a folder")
    with pytest.raises(DataError, match=r"cannot write the tokenizer .*a file/sp.model.*writable folder"):
        SentencePieceTokenizer.train([corpus], blocker / "sp.model", vocab_size=120)
    assert blocker.read_text() == "not a folder"


def test_model_bytes_do_not_depend_on_where_the_text_lived(corpus, tmp_path):
    """The same text and options give the same model file, whether read from another folder or through a temporary
    sample: the input paths are not recorded, so fingerprints (and what is keyed on them) are stable."""
    size = corpus.stat().st_size
    copies = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        copies.append(shutil.copy(corpus, tmp_path / name / "text.txt"))
    for max_bytes in (size, size // 4):  # whole, then a seeded sample in a temporary folder
        models = [SentencePieceTokenizer.train([text], tmp_path / f"m{k}_{max_bytes}.model", vocab_size=120,
                                               max_bytes=max_bytes).model_file.read_bytes()
                  for k, text in enumerate(copies)]
        assert models[0] == models[1]
    assert models[0] != (tmp_path / f"m0_{size}.model").read_bytes()  # the sample did train another model


def test_cut_line_keeps_every_word_under_the_bound():
    line = " ".join(f"w{i}" for i in range(400)).encode()
    pieces = cut_line(line, 50)
    assert max(map(len, pieces)) <= 50 and b" ".join(pieces) == line  # cut at spaces only
    assert cut_line(b"short line", 50) == [b"short line"]
    assert cut_line(b"a  " + b"b" * 60 + b"  ", 50) == [b"a ", b"b" * 50, b"b" * 10 + b"  "]  # no space in the run
    accents = "\u00e9" * 30  # two bytes each: never cut inside a character
    assert [p.decode() for p in cut_line(accents.encode(), 9)] == ["\u00e9" * 4] * 7 + ["\u00e9" * 2]


def test_a_word_seen_only_in_a_long_line_is_learnt(corpus, tmp_path, caplog):
    """SentencePiece skips lines over max_sentence_length (4,192 bytes) without a word: a review or article on one
    line would be lost to training. They are cut at whitespace instead, and the cut is logged."""
    text = tmp_path / "text.txt"
    long_line = " ".join(["the zyzzyw model"] * 700)  # 11.9 kB: the only place "zyzzyw" (or z, y, w) occurs
    text.write_text(corpus.read_text() + long_line + "\n")
    with caplog.at_level(logging.INFO, logger="genlab"):
        tok = SentencePieceTokenizer.train([text], tmp_path / "sp.model", vocab_size=120)
    assert tok.encode_pieces("zyzzyw") == ["\u2581zyzzyw"]
    assert "skips lines over max_sentence_length (4192 bytes): 1 of text.txt" in caplog.text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sp.model", "sp.vocab", "text.txt"]  # no training copy left
