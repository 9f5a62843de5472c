"""Readers (MNIST IDX, SVHN .mat, CIFAR-10 pickles), offline minis and the balanced labelled subset
(the label counts of Yang's thesis §3.1.6 and the issue's bad-input cases)."""

import pickle

import numpy as np
import pytest
import torch

from genlab.data.images.datamodule import SSLImageDataModule
from genlab.data.images.minis import build_mnist5k
from genlab.data.images.readers import (
    read_cifar10,
    read_idx,
    read_mnist,
    read_svhn,
    write_idx,
)
from genlab.data.images.ssl_split import balanced_labeled_subset
from genlab.errors import DataError
from helpers import TouchPayload


def test_idx_roundtrip_and_corrupt_file(tmp_path):
    a = np.random.RandomState(0).randint(0, 256, size=(7, 5, 3)).astype(np.uint8)
    for name in ("x-idx3-ubyte", "x-idx3-ubyte.gz"):
        write_idx(tmp_path / name, a)
        assert np.array_equal(read_idx(tmp_path / name), a)
    raw = (tmp_path / "x-idx3-ubyte").read_bytes()
    (tmp_path / "bad").write_bytes(raw[:-3])
    with pytest.raises(DataError, match="truncated"):
        read_idx(tmp_path / "bad")
    (tmp_path / "bad2").write_bytes(b"\x01\x02\x03\x04rest")
    with pytest.raises(DataError, match="not an IDX"):
        read_idx(tmp_path / "bad2")


def test_svhn_mat_layout_and_label_10_is_zero(tmp_path):
    from scipy.io import savemat

    rng = np.random.RandomState(0)
    x = rng.randint(0, 256, size=(32, 32, 3, 4)).astype(np.uint8)
    y = np.array([[10], [1], [5], [10]], dtype=np.uint8)
    savemat(tmp_path / "train_32x32.mat", {"X": x, "y": y})
    images, labels = read_svhn(tmp_path, "train")
    assert images.shape == (4, 3, 32, 32)
    assert labels.tolist() == [0, 1, 5, 0]
    assert images[2, 1, 3, 4] == x[3, 4, 1, 2]  # [N, C, H, W] from [H, W, C, N]


def test_cifar_pickles(tmp_path):
    rng = np.random.RandomState(0)
    for protocol, name in zip([2, 3, 4, 5, 2, 4], [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]):
        data = rng.randint(0, 256, size=(3, 3072)).astype(np.uint8)  # the release's Python-2 pickles are protocol 2
        with open(tmp_path / name, "wb") as f:
            pickle.dump({b"data": data, b"labels": [1, 2, 3]}, f, protocol=protocol)
    x, y = read_cifar10(tmp_path, "train")
    assert x.shape == (15, 3, 32, 32) and y.tolist() == [1, 2, 3] * 5
    with open(tmp_path / "test_batch", "rb") as f:
        raw = pickle.load(f)[b"data"]
    xt, _ = read_cifar10(tmp_path, "test")
    assert xt[1, 2, 0, 5] == raw[1, 2 * 1024 + 5]  # blue plane, row 0, column 5


def test_cifar_batch_carrying_code_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "pwned"
    (tmp_path / "test_batch").write_bytes(pickle.dumps({b"data": TouchPayload(marker), b"labels": [1]}))
    with pytest.raises(DataError, match=r"test_batch refers to pathlib.*touch.*not unpickled.*Re-download cifar"):
        read_cifar10(tmp_path, "test")
    assert not marker.exists()


def test_mnist5k_mini_is_real_mnist_in_idx(tmp_path):
    build_mnist5k(tmp_path)
    x, y = read_mnist(tmp_path, "train")
    xt, yt = read_mnist(tmp_path, "test")
    assert x.shape == (4000, 1, 28, 28) and xt.shape == (1000, 1, 28, 28)
    assert np.bincount(y).tolist() == [400] * 10 and np.bincount(yt).tolist() == [100] * 10
    assert x.max() == 255


def test_balanced_subset_per_class_and_seeded():
    labels = np.repeat(np.arange(10), 50)
    idx = balanced_labeled_subset(labels, 100, seed=3)
    assert np.bincount(labels[idx]).tolist() == [10] * 10
    assert np.array_equal(idx, balanced_labeled_subset(labels, 100, seed=3))
    assert not np.array_equal(idx, balanced_labeled_subset(labels, 100, seed=4))


def test_more_labels_than_exist_is_a_clear_error():
    labels = np.repeat(np.arange(10), 5)
    with pytest.raises(DataError, match="data.n_labeled=100 asks for 10 labels per class"):
        balanced_labeled_subset(labels, 100, seed=0)
    with pytest.raises(DataError, match="multiple of"):
        balanced_labeled_subset(labels, 15, seed=0)


def dm_root(cache):
    return next((cache / "mini").glob("digits8x8-v*"))


@pytest.mark.parametrize("pool,contains", [("exclude_labeled", False), ("all", True)])
def test_unlabeled_pool_and_streams(tmp_path, pool, contains):
    dm = SSLImageDataModule(dataset="digits", source="mini", cache_dir=str(tmp_path), n_labeled=50, seed=1,
                            batch_size=64, labeled_batch_size=50, unlabeled_pool=pool)
    dm.prepare_data()
    dm.setup("fit")
    assert np.bincount(dm.y_lab.numpy()).tolist() == [5] * 10
    n_train = len(read_mnist(dm_root(tmp_path), "train")[1])
    assert len(dm.x_unl) == (n_train if contains else n_train - 50)
    lab_rows = {tuple(r.tolist()) for r in dm.x_lab}
    in_pool = sum(tuple(r.tolist()) in lab_rows for r in dm.x_unl)
    assert in_pool >= 50 if contains else in_pool < 50  # digits has a few duplicate images
    assert float(dm.x_unl.max()) == 1.0 and float(dm.x_unl.min()) == 0.0
    batch = next(iter(dm.train_dataloader()))
    assert batch["x_lab"].shape == (50, 64) and batch["x_unl"].shape == (64, 64) and "x_unl2" in batch
    assert dm.state_dict()["labeled_indices"] == dm.labeled_indices.tolist()
    assert dm.identity()["labeled_digest"] == dm.labeled_digest and len(dm.labeled_digest) == 16


def test_stream_reshuffles_and_emits_partial_batch():
    from genlab.data.images.datamodule import _batches

    it = _batches(10, 4, seed=0)
    first = [next(it) for _ in range(3)]
    assert [len(b) for b in first] == [4, 4, 2]
    assert sorted(torch.cat(first).tolist()) == list(range(10))
