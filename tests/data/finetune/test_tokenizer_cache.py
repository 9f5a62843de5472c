"""Finetuning tokenizers are cached per training text: the folder's name does not matter, an edit trains anew, and a
damaged cache entry is rebuilt with a message, never loaded."""

from __future__ import annotations

import logging
import shutil

from genlab.data.finetune.datamodule import ClassificationDataModule
from genlab.data.finetune.tokenizer_cache import cached_tokenizer_model


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


def test_same_data_in_another_folder_reuses_the_tokenizer(tmp_path):
    first = tmp_path / "SST-2"
    first.mkdir()
    words = zip(["good", "bad", "long", "short", "dull", "bright"] * 5, ["fun", "slow", "odd"] * 10)
    rows = "".join(f"the film was {w} and {v}\t{i % 2}\n" for i, (w, v) in enumerate(words))
    (first / "train.tsv").write_text("sentence\tlabel\n" + rows)
    (first / "dev.tsv").write_text("sentence\tlabel\n" + rows[:200].rsplit("\n", 1)[0] + "\n")
    second = tmp_path / "renamed copy"
    shutil.copytree(first, second)
    models = []
    for folder in (first, second):
        dm = ClassificationDataModule("sst2", "path", str(folder), str(tmp_path / "cache"), vocab_size=40,
                                      max_seq_len=16)
        dm.setup()
        models.append(dm.tokenizer.model_file)
    assert models[0] == models[1]
    assert len(list((tmp_path / "cache" / "finetune").iterdir())) == 1
