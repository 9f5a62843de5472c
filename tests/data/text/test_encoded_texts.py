"""The finetuning/QA encoded-text cache: a second build reads the entry and gives identical arrays, the key is the
texts and the encoder (never a folder name), a damaged entry is rebuilt with one message, an interrupted build
leaves nothing, and any process count gives the one-process result."""

from __future__ import annotations

import logging

import pytest

import genlab.data.text.encoded_texts as et
from genlab.data.text.encoded_texts import encode_texts
from genlab.errors import DataError

TEXTS = [f"text {i} " + "ab" * (i % 7) for i in range(50)] + ["", "ünï ☃"]


def _encoder(calls: list):
    def encode(text: str):
        calls.append(text)
        codes = [ord(c) for c in text]
        return codes, list(range(len(codes)))

    return encode


def _arrays(enc):
    return [(enc.field(t, "ids").tolist(), enc.field(t, "pos").tolist()) for t in TEXTS]


def test_second_build_reads_the_entry_and_any_key_change_misses(tmp_path):
    calls: list = []
    first = encode_texts(TEXTS + TEXTS[:5], _encoder(calls), "enc-v1", tmp_path, "toy", fields=("ids", "pos"))
    assert len(calls) == len(TEXTS)  # distinct texts only
    assert first.ids("ünï ☃") == [ord(c) for c in "ünï ☃"] and first.ids("") == []
    again = encode_texts(TEXTS, _encoder(calls), "enc-v1", tmp_path, "toy", fields=("ids", "pos"))
    assert len(calls) == len(TEXTS) and _arrays(again) == _arrays(first)  # read, not encoded
    assert len(list((tmp_path / "encoded").iterdir())) == 1
    encode_texts(TEXTS, _encoder(calls), ("enc-v1", "lower"), tmp_path, "toy", fields=("ids", "pos"))
    encode_texts(TEXTS[:-1] + ["ünï ☃ edited"], _encoder(calls), "enc-v1", tmp_path, "toy", fields=("ids", "pos"))
    assert len(calls) == 3 * len(TEXTS) and len(list((tmp_path / "encoded").iterdir())) == 3


def test_a_damaged_entry_is_rebuilt_with_a_message(tmp_path, caplog):
    calls: list = []
    first = _arrays(encode_texts(TEXTS, _encoder(calls), "e", tmp_path, "toy", fields=("ids", "pos")))
    (ids,) = (tmp_path / "encoded").glob("*/ids.npy")
    ids.write_bytes(ids.read_bytes()[:-8])  # truncated
    with caplog.at_level(logging.WARNING, logger="genlab"):
        rebuilt = encode_texts(TEXTS, _encoder(calls), "e", tmp_path, "toy", fields=("ids", "pos"))
    assert "truncated" in caplog.text and len(caplog.records) == 1
    assert _arrays(rebuilt) == first and len(calls) == 2 * len(TEXTS)


@pytest.mark.parametrize("num_proc", [1, 2])
def test_an_interrupted_build_leaves_nothing(tmp_path, monkeypatch, num_proc):
    """In a worker process too: the interrupt comes back to the parent (mp.Pool lost the worker and hung)."""
    monkeypatch.setattr(et, "PIECE_TEXTS", 10)

    def dies(text: str):
        if text == TEXTS[30]:
            raise KeyboardInterrupt
        return [1], [0]

    with pytest.raises(KeyboardInterrupt):
        encode_texts(TEXTS, dies, "e", tmp_path, "toy", fields=("ids", "pos"), num_proc=num_proc)
    assert list((tmp_path / "encoded").iterdir()) == []


def test_processes_give_the_one_process_result(tmp_path, monkeypatch):
    monkeypatch.setattr(et, "PIECE_TEXTS", 7)  # 8 pieces: two workers really run
    one = encode_texts(TEXTS, _encoder([]), "e", tmp_path / "a", "toy", fields=("ids", "pos"), num_proc=1)
    two = encode_texts(TEXTS, _encoder([]), "e", tmp_path / "b", "toy", fields=("ids", "pos"), num_proc=2)
    assert _arrays(two) == _arrays(one)
    for name in ("offsets.npy", "ids.npy", "pos.npy"):
        (a,), (b,) = (tmp_path / "a").glob(f"encoded/*/{name}"), (tmp_path / "b").glob(f"encoded/*/{name}")
        assert a.read_bytes() == b.read_bytes()


def test_a_cache_folder_that_cannot_be_written_is_one_message(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(DataError, match=r"cannot write the data cache under .*file/encoded.*paths.cache_dir="):
        encode_texts(TEXTS, _encoder([]), "e", tmp_path / "file", "toy", fields=("ids", "pos"))
