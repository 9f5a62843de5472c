"""Synthetic datasets in the real on-disk formats and at the real benchmarks' sizes, for ``full_size.py``.

The image, graph and QA systems take their model's size (Planetoid, GDAN) and much of their memory (images held in
the DataModule) from the dataset, and none of it is available offline. These writers lay out random content exactly
as the released files are read (MNIST IDX, SVHN format-2 ``.mat``, CIFAR-10 python pickles, Planetoid ``ind.*``,
SQuAD v1.1 JSON with GDAN's unlabelled JSONL), with the real image counts, the graph sizes of Yang thesis Table 3.5
(features and labelled nodes as released: 20 per class, 1,000 test nodes) and SQuAD v1.1's article, paragraph and
question counts, so a ``train.py`` run builds the real model and holds the real data. Nothing learnt from them means
anything.
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from pathlib import Path

import numpy as np

from genlab.data.graphs.planetoid import PUBLISHED_SIZES
from genlab.data.graphs.planetoid_format import write_ind
from genlab.data.images.datamodule import IMAGE_SIZES
from genlab.data.images.readers import write_idx
from genlab.data.qa.answers import Answer, UnlabeledParagraph, write_unlabeled
from genlab.utils import atomic_write

# training, test images (MNIST and CIFAR-10 as released; SVHN's train and test .mat, without "extra")
IMAGES = {name: IMAGE_SIZES[name][:2] for name in ("mnist", "svhn", "cifar10")}
GRAPHS = PUBLISHED_SIZES  # nodes, edges, classes, features
# SQuAD v1.1 as released (Rajpurkar et al. 2016): articles, paragraphs, questions of the train and dev files
SQUAD = {"train": (442, 18_896, 87_599), "dev": (48, 2_067, 10_570)}
# Words drawn uniformly from 26^4 four-letter words: every split of GDAN's protocol meets more distinct words than
# the thesis' vocabulary caps (G 30,000 seen in two labelled paragraphs, D 200,000), so the caps set the model size.
# Paragraphs of 60-400 words: batches pad to about the 400 tokens the memory guard assumes without the data.
LETTERS, PARAGRAPH_WORDS = 4, (60, 400)
# Unlabelled paragraphs with five answers each: twice the 50,000 pairs the Table 3.4 presets draw (the thesis'
# file has 950,612 paragraphs; its size changes the preparation time, not the model or the step).
UNLABELED_PARAGRAPHS = 20_000
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


def _words(rng: np.random.Generator, n: int) -> list[str]:
    codes = rng.integers(0, 26, (n, LETTERS), dtype=np.uint8) + ord("a")
    return [w.decode() for w in codes.view(f"S{LETTERS}").ravel()]


def _paragraph(rng: np.random.Generator) -> tuple[str, list[Answer]]:
    """Random words, and a two-word answer span in each fifth of the paragraph."""
    words = _words(rng, int(rng.integers(*PARAGRAPH_WORDS, endpoint=True)))
    starts = np.cumsum([0] + [len(w) + 1 for w in words])
    spans = [int(rng.integers(f * len(words) // 5, (f + 1) * len(words) // 5 - 1)) for f in range(5)]
    return " ".join(words), [Answer(" ".join(words[i:i + 2]), int(starts[i])) for i in spans]


def write_squad_gdan(root: Path, rng: np.random.Generator) -> None:
    """``train-v1.1.json``, ``dev-v1.1.json`` (SQuAD v1.1's counts) and ``unlabeled.jsonl`` for GDAN's reader."""
    for split, (n_articles, n_paragraphs, n_questions) in SQUAD.items():
        per_paragraph = iter(np.diff(np.linspace(0, n_questions, n_paragraphs + 1).astype(int)))
        data = []
        for a, paragraphs in enumerate(np.array_split(np.arange(n_paragraphs), n_articles)):
            rows = []
            for p in paragraphs:
                context, answers = _paragraph(rng)
                qas = [{"id": f"{split}{p}-{k}", "question": " ".join(_words(rng, 9)) + "?",
                        "answers": [{"text": answers[k % 5].text, "answer_start": answers[k % 5].start}]}
                       for k in range(next(per_paragraph))]
                rows.append({"context": context, "qas": qas})
            data.append({"title": f"{split}-{a}", "paragraphs": rows})
        with atomic_write(root / f"{split}-v1.1.json", "w") as f:
            json.dump({"version": "1.1", "data": data}, f)
    write_unlabeled(root / "unlabeled.jsonl", (UnlabeledParagraph(f"u{k}", *_paragraph(rng))
                                               for k in range(UNLABELED_PARAGRAPHS)))


def dataset_dir(name: str, folder: Path) -> Path:
    """The folder holding ``name`` (an image benchmark, ``planetoid-<citeseer|cora|pubmed>`` or ``squad-gdan``),
    written once."""
    root = folder / name
    if (root / DONE).is_file():
        return root
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    if name.startswith("planetoid-"):
        write_graph(name.removeprefix("planetoid-"), root, rng)
    elif name == "squad-gdan":
        write_squad_gdan(root, rng)
    else:
        write_images(name, root, rng)
    (root / DONE).touch()
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", choices=[*IMAGES, *(f"planetoid-{g}" for g in GRAPHS), "squad-gdan"])
    parser.add_argument("--folder", type=Path, required=True, help="one sub-folder per dataset is written here")
    args = parser.parse_args(argv)
    for name in args.datasets:
        print(dataset_dir(name, args.folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
