"""Token cache: streamed .npy files, memory-mapped loads, keys that follow files and settings, atomic entries."""

import io
import os

import numpy as np
import pytest

from genlab.data.lm import token_cache as T
from genlab.data.lm.vocab import Vocab
from genlab.data.text.npy_stream import HEADER_BYTES, npy_header
from genlab.errors import DataError


def _build(chunks):
    def build():
        return Vocab([f"s{i}" for i in range(10)]), {"train": iter(chunks), "valid": np.arange(3), "test": np.zeros(0)}

    return build


def test_streamed_chunks_become_one_memory_mapped_int32_array(tmp_path):
    rng = np.random.default_rng(0)
    chunks = [rng.integers(0, 10, size=n) for n in (5, 0, 17, 1)]
    vocab, splits, entry = T.load_or_build(tmp_path, "toy", "key", _build(chunks))
    assert isinstance(splits["train"], np.memmap) and splits["train"].dtype == np.int32
    assert splits["train"].tolist() == np.concatenate(chunks).tolist()
    assert splits["valid"].tolist() == [0, 1, 2] and len(splits["test"]) == 0
    assert np.load(entry / "train.npy").tolist() == splits["train"].tolist()  # a standard .npy file


def test_fixed_size_header_holds_huge_lengths():
    for shape, dt in (((0,), "<i4"), ((7,), "<i4"), ((10**12,), "<i4"), ((10**12, 3), "<f8")):
        f = io.BytesIO(npy_header(np.dtype(dt), shape))
        version = np.lib.format.read_magic(f)
        assert version == (1, 0)
        assert np.lib.format.read_array_header_1_0(f) == (shape, False, np.dtype(dt))
        assert f.tell() == HEADER_BYTES


def test_failed_build_leaves_no_entry(tmp_path):
    with pytest.raises(RuntimeError, match="ids outside"):
        T.load_or_build(tmp_path, "toy", "key", _build([np.array([3, 12])]))

    def crash():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        T.load_or_build(tmp_path, "toy", "key2", crash)
    assert os.listdir(tmp_path / "tokens") == []


def test_key_follows_files_and_settings(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    k1 = T.cache_key("d", tmp_path, ["a.txt"], {"o": 1})
    assert T.cache_key("d", tmp_path, ["a.txt"], {"o": 1}) == k1
    assert T.cache_key("d", tmp_path, ["a.txt"], {"o": 2}) != k1
    (tmp_path / "a.txt").write_text("xy")
    assert T.cache_key("d", tmp_path, ["a.txt"], {"o": 1}) != k1

@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damaged_entry_is_detected_logged_and_rebuilt(tmp_path, caplog, damage):
    calls = []

    def build():
        calls.append(1)
        return Vocab(["a", "b", "c"]), {"train": np.array([0, 1, 2, 1], dtype=np.int32)}

    _, _, entry = T.load_or_build(tmp_path, "toy", "k", build)
    data = bytearray((entry / "train.npy").read_bytes())
    if damage == "truncate":
        data = data[:-4]
    else:
        data[-1] ^= 0xFF  # same size, one id changed: only the checksum sees it
    (entry / "train.npy").write_bytes(bytes(data))
    with caplog.at_level("WARNING", logger="genlab"):
        _, splits, _ = T.load_or_build(tmp_path, "toy", "k", build)
    assert len(calls) == 2 and splits["train"].tolist() == [0, 1, 2, 1]
    assert "train.npy is " + ("truncated" if damage == "truncate" else "corrupted") in caplog.text
    assert "rebuilding" in caplog.text


def test_a_cold_build_checksums_each_file_once_and_an_entry_found_on_disk_is_checked(tmp_path, monkeypatch):
    from genlab.data.text import cache_entry

    hashed = []
    crc32 = cache_entry.crc32_file
    monkeypatch.setattr(cache_entry, "crc32_file", lambda path, **kw: hashed.append(path.name) or crc32(path, **kw))
    monkeypatch.setattr(cache_entry, "_verified", set())
    build = _build([np.array([1, 2])])
    T.load_or_build(tmp_path, "toy", "k", build)
    files = ["test.npy", "train.npy", "valid.npy", "vocab.json"]
    assert sorted(hashed) == files  # written and checksummed, not read back again
    T.load_or_build(tmp_path, "toy", "k", build)
    assert sorted(hashed) == files
    monkeypatch.setattr(cache_entry, "_verified", set())  # as a new process finds the entry
    T.load_or_build(tmp_path, "toy", "k", build)
    assert sorted(hashed) == sorted(files * 2)


def test_entry_without_manifest_is_never_read(tmp_path):
    build = _build([np.array([1, 2])])
    _, _, entry = T.load_or_build(tmp_path, "toy", "k", build)
    (entry / "manifest.json").unlink()  # as an interrupted copy would leave it
    _, splits, _ = T.load_or_build(tmp_path, "toy", "k", build)
    assert splits["train"].tolist() == [1, 2] and (entry / "manifest.json").is_file()


def test_unwritable_cache_is_a_data_error_naming_the_folder(tmp_path):
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache folder should be")
    with pytest.raises(DataError, match=r"cannot write the data cache under .*cache.*cache_dir"):
        T.load_or_build(blocker, "toy", "k", _build([np.array([1])]))
    assert blocker.read_text().startswith("a file")  # nothing written before is lost
