"""Synthetic datasets in the real on-disk formats and at the real benchmarks' sizes, for ``full_size.py``.

The image and graph systems take their model's size (Planetoid) and much of their memory (images held in the
DataModule) from the dataset, and none of it is available offline. These writers lay out random content exactly as
the released files are read (MNIST IDX, SVHN format-2 ``.mat``, CIFAR-10 python pickles, Planetoid ``ind.*``), with
the real image counts and the graph sizes of Yang thesis Table 3.5 (features and labelled nodes as released: 20 per
class, 1,000 test nodes), so a ``train.py`` run builds the real model and holds the real data. Nothing learnt from
them means anything.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

import numpy as np

from genlab.data.graphs.planetoid import PUBLISHED_SIZES
from genlab.data.graphs.planetoid_format import write_ind
from genlab.data.images.datamodule import IMAGE_SIZES
from genlab.data.images.readers import write_idx
from genlab.utils import atomic_write

# training, test images (MNIST and CIFAR-10 as released; SVHN's train and test .mat, without "extra")
IMAGES = {name: IMAGE_SIZES[name][:2] for name in ("mnist", "svhn", "cifar10")}
GRAPHS = PUBLISHED_SIZES  # nodes, edges, classes, features
DONE = ".complete"  # written last: a folder without it is rebuilt


def write_images(name: str, root: Path, rng: np.random.Generator) -> None:
    for split, n in zip(("train", "test"), IMAGES[name]):
        labels = rng.integers(0, 10, n)
        if name == "mnist":
            prefix = "train" if split == "train" else "t10k"
            write_idx(root / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
            write_idx(root / f"{prefix}-labels-idx1-ubyte.gz", labels.astype(np.uint8))
        elif name == "svhn":
            from scipy.io import savemat

            savemat(root / f"{split}_32x32.mat", {"X": rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8),
                                                  "y": np.where(labels == 0, 10, labels)[:, None].astype(np.uint8)})
        else:  # CIFAR-10: five training batches of 10,000 and one test batch
            names = [f"data_batch_{i}" for i in range(1, 6)] if split == "train" else ["test_batch"]
            for part, file in zip(np.array_split(np.arange(n), len(names)), names):
                batch = {b"data": rng.integers(0, 256, (len(part), 3072), dtype=np.uint8),
                         b"labels": [int(y) for y in labels[part]]}
                with atomic_write(root / file) as f:
                    pickle.dump(batch, f, protocol=2)


def write_graph(size_of: str, root: Path, rng: np.random.Generator) -> None:
    """``ind.synth.*`` (the real names carry the released files' checksums) with ``size_of``'s counts."""
    nodes, edges, classes, features = GRAPHS[size_of]
    labels = rng.integers(0, classes, nodes)
    words = np.zeros((nodes, features), np.float32)
    words[np.repeat(np.arange(nodes), 18), rng.integers(0, features, nodes * 18)] = 1.0  # ~18 words a document
    graph: dict[int, list[int]] = {k: [] for k in range(nodes)}
    for a, b in rng.integers(0, nodes, (edges, 2)):
        graph[int(a)].append(int(b))
        graph[int(b)].append(int(a))
    n_test, n_labeled = 1_000, 20 * classes
    write_ind(root, "synth", words, labels, classes, n_labeled, nodes - n_test, np.arange(nodes - n_test, nodes),
              graph)


def dataset_dir(name: str, folder: Path) -> Path:
    """The folder holding ``name`` (an image benchmark, or ``planetoid-<citeseer|cora|pubmed>``), written once."""
    root = folder / name
    if (root / DONE).is_file():
        return root
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    if name.startswith("planetoid-"):
        write_graph(name.removeprefix("planetoid-"), root, rng)
    else:
        write_images(name, root, rng)
    (root / DONE).touch()
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", choices=[*IMAGES, *(f"planetoid-{g}" for g in GRAPHS)])
    parser.add_argument("--folder", type=Path, required=True, help="one sub-folder per dataset is written here")
    args = parser.parse_args(argv)
    for name in args.datasets:
        print(dataset_dir(name, args.folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
