"""The finetuning/QA encoded-text cache: a second build reads the entry and gives identical arrays, the key is the
texts and the encoder (never a folder name), a damaged entry is rebuilt with one message, an interrupted build
leaves nothing, and any process count gives the one-process result."""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

import genlab.data.text.encoded_texts as et
from genlab.data.text.encoded_texts import encode_rows, encode_texts
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


@contextmanager
def unprivileged():
    """Run as an ordinary user: root writes into read-only folders, so as root drop the effective uid (and gid)
    for the block; the real uid stays root, so it can be taken back."""
    if os.geteuid() != 0:
        yield
        return
    os.setegid(65534)
    os.seteuid(65534)  # nobody
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


def test_a_read_only_cache_folder_is_one_message_and_keeps_its_files():
    cache = Path(tempfile.mkdtemp(prefix="genlab-readonly-"))  # not under tmp_path, whose parents root keeps private
    try:
        (cache / "kept.txt").write_text("written before")
        cache.chmod(0o555)
        with unprivileged(), pytest.raises(PermissionError):
            (cache / "probe").write_text("")  # the folder really is read-only for this test (root or not)
        with unprivileged(), pytest.raises(DataError, match=rf"cannot write the data cache under {cache}/encoded.*"
                                                            r"make it writable.*paths.cache_dir="):
            encode_texts(TEXTS, _encoder([]), "e", cache, "toy", fields=("ids", "pos"))
        assert sorted(p.name for p in cache.iterdir()) == ["kept.txt"]  # nothing written, nothing lost
        assert (cache / "kept.txt").read_text() == "written before"
        (cache / "encoded").mkdir()
        (cache / "encoded").chmod(0o555)  # the folder exists, but no entry can be created in it
        with unprivileged(), pytest.raises(DataError, match=r"cannot write the data cache under .*encoded"):
            encode_texts(TEXTS, _encoder([]), "e", cache, "toy", fields=("ids", "pos"))
        assert list((cache / "encoded").iterdir()) == []
    finally:
        cache.chmod(0o755)
        (cache / "encoded").exists() and (cache / "encoded").chmod(0o755)
        shutil.rmtree(cache)


def test_rows_carry_values_and_tags_stream_once_and_pickle_as_their_entry(tmp_path, monkeypatch):
    monkeypatch.setattr(et, "PIECE_TEXTS", 4)
    consumed = []

    def rows():
        for i in range(10):
            consumed.append(i)
            yield i

    def encode(i):
        return (list(range(i)),), (i, -i / 2), f"row {i}"

    built = encode_rows(rows(), encode, ("toy rows", 1), tmp_path, "toy rows", n_values=2, num_proc=2)
    assert consumed == list(range(10)) and len(built) == 10
    assert [built.row(i).tolist() for i in range(10)] == [list(range(i)) for i in range(10)]
    assert built.values.tolist() == [[i, -i / 2] for i in range(10)] and built.tags() == [f"row {i}" for i in range(10)]
    assert all(isinstance(a, np.memmap) for a in (built.offsets, built.values, built.fields["ids"]))
    again = encode_rows(rows(), encode, ("toy rows", 1), tmp_path, "toy rows", n_values=2)
    assert consumed == list(range(10))  # the entry is read: the rows are not even read
    copy = pickle.loads(pickle.dumps(again))  # a spawned DataLoader worker: the path travels, the pages are mapped
    assert len(pickle.dumps(again)) < 500 and copy.row(9).tolist() == list(range(9))
