"""The download tier of MNIST / SVHN / CIFAR-10: every file has a recorded sha256, and the fetch -> verify ->
prepare -> read path works end to end (served from local file:// URLs; no network)."""

import dataclasses
import hashlib
import io
import pickle
import re
import tarfile

import numpy as np
import pytest

from genlab.data.images.readers import (
    CIFAR10,
    MNIST,
    SVHN,
    read_cifar10,
    read_mnist,
    write_idx,
)
from genlab.data.sources.tiers import RemoteFile, locate
from genlab.errors import DataError


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("spec", [MNIST, SVHN, CIFAR10], ids=lambda s: s.name)
def test_every_download_has_a_recorded_sha256(spec):
    assert spec.downloads
    for remote in spec.downloads:
        assert remote.sha256 is not None and re.fullmatch(r"[0-9a-f]{64}", remote.sha256), remote.url
    assert len({r.sha256 for r in spec.downloads}) == len(spec.downloads)


def served(spec, server, digests=None):
    """The spec with its URLs pointed at files in ``server`` (and their real or given digests)."""
    downloads = tuple(RemoteFile((server / r.filename).as_uri(), (digests or {}).get(r.filename)
                                 or sha256(server / r.filename), r.filename) for r in spec.downloads)
    return dataclasses.replace(spec, downloads=downloads)


def test_mnist_download_verifies_and_reads(tmp_path, monkeypatch):
    monkeypatch.delenv("GENLAB_OFFLINE", raising=False)
    server = tmp_path / "server"
    server.mkdir()
    rng = np.random.RandomState(0)
    for prefix, n in (("train", 30), ("t10k", 10)):
        write_idx(server / f"{prefix}-images-idx3-ubyte.gz", rng.randint(0, 256, (n, 28, 28)))
        write_idx(server / f"{prefix}-labels-idx1-ubyte.gz", np.arange(n) % 10)
    root = locate(served(MNIST, server), "download", cache_dir=tmp_path / "cache")
    x, y = read_mnist(root, "train")
    assert x.shape == (30, 1, 28, 28) and list(y[:3]) == [0, 1, 2]

    bad = served(MNIST, server, {"t10k-labels-idx1-ubyte.gz": "0" * 64})
    with pytest.raises(DataError, match="checksum mismatch.*t10k-labels"):
        locate(bad, "download", cache_dir=tmp_path / "cache2")
    assert not list((tmp_path / "cache2").rglob("*.part"))  # the corrupt download is not kept


def test_cifar10_download_extracts_python_batches(tmp_path, monkeypatch):
    monkeypatch.delenv("GENLAB_OFFLINE", raising=False)
    server = tmp_path / "server"
    server.mkdir()
    with tarfile.open(server / "cifar-10-python.tar.gz", "w:gz") as tar:
        for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
            raw = pickle.dumps({b"data": np.full((2, 3072), 7, np.uint8), b"labels": [3, 4]})
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    root = locate(served(CIFAR10, server), "download", cache_dir=tmp_path / "cache")
    x, y = read_cifar10(root, "train")
    assert x.shape == (10, 3, 32, 32) and list(y[:2]) == [3, 4]


def test_offline_download_names_urls_and_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("GENLAB_OFFLINE", "1")
    with pytest.raises(DataError, match=r"(?s)GENLAB_OFFLINE.*storage.googleapis.com/cvdf-datasets/mnist.*data.path"):
        locate(MNIST, "download", cache_dir=tmp_path)
