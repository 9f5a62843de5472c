"""The labelled subset of a semi-supervised run: class-balanced, drawn from the run's seed (as the
bad-GAN authors' code: shuffle all training indices, then keep the first n/K of each class)."""

from __future__ import annotations

import hashlib

import numpy as np

from genlab.errors import DataError


def balanced_labeled_subset(labels: np.ndarray, n_labeled: int, seed: int, key: str = "data.n_labeled"
                            ) -> np.ndarray:
    """Sorted indices of ``n_labeled`` examples, ``n_labeled / K`` per class, chosen by a seeded permutation."""
    labels = np.asarray(labels)
    classes = np.unique(labels)
    if n_labeled % len(classes):
        raise DataError(f"{key}={n_labeled} is not a multiple of the {len(classes)} classes; "
                        f"use a multiple of {len(classes)} so every class gets the same number of labels.")
    per_class = n_labeled // len(classes)
    order = np.random.RandomState(seed).permutation(len(labels))
    chosen = []
    for k in classes:
        of_class = order[labels[order] == k]
        if len(of_class) < per_class:
            raise DataError(f"{key}={n_labeled} asks for {per_class} labels per class but class {k} has only "
                            f"{len(of_class)} training examples; lower {key} to at most "
                            f"{len(classes) * min(int((labels == c).sum()) for c in classes)}.")
        chosen.append(of_class[:per_class])
    return np.sort(np.concatenate(chosen))


def subset_digest(indices: np.ndarray) -> str:
    """Short fingerprint of a labelled subset, logged so runs can be matched to their labels."""
    return hashlib.sha256(np.asarray(indices, dtype=np.int64).tobytes()).hexdigest()[:16]
