"""SentencePiece tokenizer: training with special symbols, load, encode/decode, fingerprint, symbol checks."""

import numpy as np
import pytest

from genlab.data.tokenizers.sentencepiece import SentencePieceTokenizer, sample_lines
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
    """Under ``max_bytes`` the trainer gets the files themselves with the same options: the very model of a direct
    SentencePiece call (as before the bound existed)."""
    import io

    import sentencepiece as spm

    spm.set_random_generator_seed(0)
    direct = io.BytesIO()
    spm.SentencePieceTrainer.train(input=[str(corpus)], model_writer=direct, vocab_size=120, model_type="unigram",
                                   user_defined_symbols=list(XLNET_USER), control_symbols=list(XLNET_CONTROL),
                                   character_coverage=1.0, num_threads=1, minloglevel=2)
    assert unigram.model_file.read_bytes() == direct.getvalue()


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
