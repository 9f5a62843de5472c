"""Finetuning tokenizers and encoded texts are cached per text: the folder's name does not matter, an edit trains
anew, and a damaged cache entry is rebuilt with a message, never loaded."""

from __future__ import annotations

import logging
import shutil

import numpy as np
import pytest

from genlab.data.finetune import glue
from genlab.data.finetune.datamodule import ClassificationDataModule, encode_pair
from genlab.data.finetune.tokenizer_cache import cached_tokenizer_model, piece_model
from genlab.errors import DataError
from helpers import laid_out


def _counting_trainer(calls: list):
    def train(text, model):
        calls.append(text.read_text())
        model.write_bytes(b"model of " + text.read_bytes())

    return train


def test_entry_is_keyed_on_the_text_and_rebuilt_when_damaged(tmp_path, caplog):
    calls: list = []
    train = _counting_trainer(calls)
    a = cached_tokenizer_model(["a  b\nc", None, " ", "d"], tmp_path, "spm", 100, train)
    assert calls == ["a b c\nd\n"] and a.read_bytes() == b"model of a b c\nd\n"
    assert sorted(p.name for p in a.parent.iterdir()) == ["manifest.json", "tokenizer.model"]  # no training text
    assert cached_tokenizer_model(["a b c", "d"], tmp_path, "spm", 100, train) == a and len(calls) == 1
    assert cached_tokenizer_model(["a b c", "e"], tmp_path, "spm", 100, train) != a  # edited text
    assert cached_tokenizer_model(["a b c", "d"], tmp_path, "spm", 200, train) != a  # another vocabulary
    a.write_bytes(b"model of a")  # truncated
    with caplog.at_level(logging.WARNING, logger="genlab"):
        assert cached_tokenizer_model(["a b c", "d"], tmp_path, "spm", 100, train) == a
    assert "truncated" in caplog.text and a.read_bytes() == b"model of a b c\nd\n" and len(calls) == 4


def test_training_text_is_streamed_twice_never_held(tmp_path):
    """A function is called once to key the entry and once more to write the training file (nothing is kept between
    them); an iterator, which a second pass would find empty, is refused; text that changes between the passes is an
    error, not a tokenizer keyed on other text."""
    calls: list = []
    passes: list = []
    texts = lambda: passes.append(1) or iter(["a  b", "c"])
    model = cached_tokenizer_model(texts, tmp_path, "spm", 100, _counting_trainer(calls))
    assert calls == ["a b\nc\n"] and len(passes) == 2
    assert cached_tokenizer_model(texts, tmp_path, "spm", 100, _counting_trainer(calls)) == model
    assert len(passes) == 3 and len(calls) == 1  # a cached entry reads the text once
    with pytest.raises(TypeError, match="read twice"):
        cached_tokenizer_model(iter(["a b", "c"]), tmp_path, "spm", 100, _counting_trainer(calls))
    drifting = iter([["x"], ["y"]])
    with pytest.raises(DataError, match="changed while it was read"):
        cached_tokenizer_model(lambda: next(drifting), tmp_path, "spm", 100, _counting_trainer(calls))
    assert len(list((tmp_path / "finetune").iterdir())) == 1


def test_a_rebuilt_tokenizer_is_the_same_file(tmp_path):
    """A tokenizer trained again on the same text (another cache, a damaged entry) has the same bytes, hence the
    same fingerprint: the temporary build folder it was trained in is not recorded in the model."""
    texts = [f"the film was {w} and {v}" for w in ("good", "bad", "long", "dull") for v in ("fun", "slow", "odd")]
    models = [piece_model(texts, tmp_path / cache, 40) for cache in ("one", "two")]
    assert models[0] != models[1] and models[0].read_bytes() == models[1].read_bytes()


def test_same_data_in_another_folder_reuses_the_tokenizer(tmp_path):
    first = tmp_path / "SST-2"
    first.mkdir()
    words = zip(["good", "bad", "long", "short", "dull", "bright"] * 5, ["fun", "slow", "odd"] * 10)
    rows = "".join(f"the film was {w} and {v}\t{i % 2}\n" for i, (w, v) in enumerate(words))
    (first / "train.tsv").write_text("sentence\tlabel\n" + rows)
    (first / "dev.tsv").write_text("sentence\tlabel\n" + rows[:200].rsplit("\n", 1)[0] + "\n")
    second = tmp_path / "renamed copy"
    shutil.copytree(first, second)
    modules = []
    for folder in (first, second):
        dm = ClassificationDataModule("sst2", "path", str(folder), str(tmp_path / "cache"), vocab_size=40,
                                      max_seq_len=16)
        dm.setup()
        modules.append(dm)
    assert modules[0].tokenizer.model_file == modules[1].tokenizer.model_file
    assert len(list((tmp_path / "cache" / "finetune").iterdir())) == 1
    # the encoded splits too: one entry each, read (not tokenised) by the second folder, identical tensors
    assert len(list((tmp_path / "cache" / "encoded").iterdir())) == 2
    for name in ("train", "dev"):
        a, b = modules[0].splits[name], modules[1].splits[name]
        assert all(np.array_equal(laid_out(a, k), laid_out(b, k)) for k in ("input_ids", "token_type_ids", "labels"))
    # a layout setting only lays the cached ids out again; lower-casing changes the pieces: a new entry
    wider = ClassificationDataModule("sst2", "path", str(second), str(tmp_path / "cache"), vocab_size=40,
                                     max_seq_len=24)
    wider.setup()
    assert len(list((tmp_path / "cache" / "encoded").iterdir())) == 2
    ids = [wider.tokenizer.encode(e.text_a) for e in glue.read_split(wider.glue_task, second, wider.glue_task.train)]
    assert np.array_equal(laid_out(wider.splits["train"], "input_ids"), [encode_pair(i, None, 24)[0] for i in ids])
    ClassificationDataModule("sst2", "path", str(second), str(tmp_path / "cache"), vocab_size=40, max_seq_len=16,
                             lower=True).setup()
    entries = sorted((tmp_path / "cache" / "encoded").iterdir())
    assert len(entries) == 4 and isinstance(wider.splits["train"].rows.fields["ids"], np.memmap)  # read lazily
    # bad input: one message naming the file and the fix; the entries already cached stay as they were
    (second / "dev.tsv").unlink()
    with pytest.raises(DataError, match=r"(?s)renamed copy lacks 1 of its 2 files \(dev.tsv\).*fix: point data.path"):
        ClassificationDataModule("sst2", "path", str(second), str(tmp_path / "cache"), vocab_size=40).setup()
    (second / "dev.tsv").write_bytes(b"sentence\tlabel\nfine\t1\n\xff bad\t0\n")
    with pytest.raises(DataError, match=r"dev.tsv is not valid UTF-8 text .*convert it"):
        ClassificationDataModule("sst2", "path", str(second), str(tmp_path / "cache"), vocab_size=40).setup()
    assert sorted((tmp_path / "cache" / "encoded").iterdir()) == entries
