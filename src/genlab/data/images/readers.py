"""Readers for the image benchmarks of the SSL-GAN systems, one per real on-disk format, plus their
DatasetSpecs: MNIST IDX (optionally gzipped), SVHN cropped-digit .mat (format 2), CIFAR-10 python pickles.

Every reader returns ``(images uint8 [N, C, H, W], labels int64 [N])``.
"""

from __future__ import annotations

import gzip
import pickle
import tarfile
from pathlib import Path

import numpy as np

from genlab.data.sources.tiers import DatasetSpec, RemoteFile
from genlab.errors import DataError
from genlab.safe_pickle import RefusedGlobal, loads, numpy_arrays, refusal

_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
               0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


def _open(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def read_idx(path: str | Path) -> np.ndarray:
    """An IDX file (big-endian header: 0, 0, dtype code, ndim, then ndim uint32 sizes)."""
    path = Path(path)
    try:
        with _open(path) as f:
            raw = f.read()
    except (OSError, EOFError) as err:
        raise DataError(f"cannot read IDX file {path}: {err}. Re-download or rebuild it.") from err
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise DataError(f"{path} is not an IDX file (bad magic {raw[:4]!r}); expected MNIST's idx format.")
    ndim = raw[3]
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    offset = 4 + 4 * ndim
    expected = int(np.prod(dims)) * dtype.itemsize
    if len(raw) - offset != expected:
        raise DataError(f"{path}: header says {dims} ({expected} bytes) but holds {len(raw) - offset} bytes; "
                        "the file is truncated or corrupt.")
    return np.frombuffer(raw, dtype=dtype, offset=offset).reshape(dims).astype(dtype.newbyteorder("="))


def write_idx(path: str | Path, array: np.ndarray) -> None:
    """Write a uint8 array as (gzipped, if the name ends in .gz) IDX, the format MNIST ships in."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = bytes([0, 0, 0x08, array.ndim]) + np.asarray(array.shape, dtype=">u4").tobytes()
    path = Path(path)
    opener = gzip.GzipFile(path, "wb", mtime=0) if path.suffix == ".gz" else open(path, "wb")
    with opener as f:  # mtime=0 keeps the mini byte-identical across builds
        f.write(header + array.tobytes())


def read_mnist(root: str | Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    prefix = {"train": "train", "test": "t10k"}[split]
    root = Path(root)
    images = read_idx(_first_existing(root, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(_first_existing(root, f"{prefix}-labels-idx1-ubyte"))
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise DataError(f"{root}: MNIST {split} images {images.shape} and labels {labels.shape} do not match.")
    return images[:, None].copy(), labels.astype(np.int64)


def _first_existing(root: Path, stem: str) -> Path:
    for name in (stem + ".gz", stem):
        if (root / name).is_file():
            return root / name
    raise DataError(f"{root} lacks {stem}(.gz); point data.path at a directory with the MNIST IDX files.")


def read_svhn(root: str | Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """SVHN format 2: ``X`` uint8 [32, 32, 3, N], ``y`` [N, 1] with labels 1..10 where 10 means digit 0."""
    from scipy.io import loadmat

    path = Path(root) / f"{split}_32x32.mat"
    try:
        mat = loadmat(path)
    except (OSError, ValueError) as err:
        raise DataError(f"cannot read {path}: {err}. Re-download it from ufldl.stanford.edu/housenumbers.") from err
    if "X" not in mat or "y" not in mat:
        raise DataError(f"{path} has no X / y arrays; is it the cropped-digits (format 2) file?")
    images = np.transpose(mat["X"], (3, 2, 0, 1)).astype(np.uint8)
    labels = mat["y"].reshape(-1).astype(np.int64)
    labels[labels == 10] = 0
    return np.ascontiguousarray(images), labels


def read_cifar10(root: str | Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-10 python batches: dicts with ``data`` uint8 [N, 3072] (R, G, B planes) and ``labels``."""
    root = Path(root)
    names = [f"data_batch_{i}" for i in range(1, 6)] if split == "train" else ["test_batch"]
    xs, ys = [], []
    for name in names:
        path = root / name
        fix = "Re-download cifar-10-python.tar.gz."
        try:
            batch = loads(path.read_bytes(), numpy_arrays(), encoding="bytes")  # a dict of an array, lists, bytes
        except RefusedGlobal as err:
            raise DataError(refusal(err, path, "a CIFAR-10 python batch", fix)) from err
        except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError) as err:
            raise DataError(f"cannot read CIFAR-10 batch {path}: {err}. {fix}") from err
        if not isinstance(batch, dict):
            raise DataError(f"{path} holds a {type(batch).__name__}, not a CIFAR-10 python batch (a dict). {fix}")
        data = batch.get(b"data", batch.get("data"))
        labels = batch.get(b"labels", batch.get("labels"))
        if data is None or labels is None:
            raise DataError(f"{path} has no data/labels entries; expected a CIFAR-10 python batch.")
        xs.append(np.asarray(data, dtype=np.uint8).reshape(-1, 3, 32, 32))
        ys.append(np.asarray(labels, dtype=np.int64))
    return np.concatenate(xs), np.concatenate(ys)


def _extract_cifar(root: Path) -> None:
    with tarfile.open(root / "cifar-10-python.tar.gz") as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.startswith("cifar-10-batches-py/"):
                member.name = Path(member.name).name  # flatten into the dataset directory
                tar.extract(member, root, filter="data")


MNIST_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
               "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
# Digests are public records, never computed here. MNIST and SVHN: TensorFlow Datasets
# tensorflow_datasets/url_checksums/{mnist,svhn_cropped}.txt (url, size, sha256), recorded for exactly these URLs
# (Google's cvdf mirror of MNIST; SVHN from its Stanford home). CIFAR-10 (python pickles): the file_hash of
# keras/datasets/cifar10.py, matching torchvision's md5 c58f30108f718f92721af3b95e74349a for the same archive.
_MNIST_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"
MNIST_SHA256 = {
    "train-images-idx3-ubyte.gz": "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
    "train-labels-idx1-ubyte.gz": "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
    "t10k-images-idx3-ubyte.gz": "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
    "t10k-labels-idx1-ubyte.gz": "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
}
SVHN_SHA256 = {
    "train_32x32.mat": "435e94d69a87fde4fd4d7f3dd208dfc32cb6ae8af2240d066de1df7508d083b8",
    "test_32x32.mat": "cdce80dfb2a2c4c6160906d0bd7c68ec5a99d7ca4831afa54f09182025b6a75b",
}
CIFAR10_SHA256 = "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"

MNIST = DatasetSpec(
    name="mnist", files=MNIST_FILES,
    downloads=tuple(RemoteFile(_MNIST_URL + f, MNIST_SHA256[f], f) for f in MNIST_FILES),
    homepage="http://yann.lecun.com/exdb/mnist/",
)
SVHN = DatasetSpec(
    name="svhn", files=tuple(SVHN_SHA256),
    downloads=tuple(RemoteFile(f"http://ufldl.stanford.edu/housenumbers/{f}", sha, f)
                    for f, sha in SVHN_SHA256.items()),
    homepage="http://ufldl.stanford.edu/housenumbers/",
)
CIFAR10 = DatasetSpec(
    name="cifar10", files=tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",),
    downloads=(RemoteFile("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz", CIFAR10_SHA256,
                          "cifar-10-python.tar.gz"),),
    prepare=_extract_cifar,
    homepage="https://www.cs.toronto.edu/~kriz/cifar.html",
)

READERS = {"mnist": read_mnist, "svhn": read_svhn, "cifar10": read_cifar10}
