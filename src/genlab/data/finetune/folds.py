"""k-fold cross-validation over a small labelled set (the newsgroups transfer mini: 5-fold CV over
its 200 posts).

:func:`stratified_folds` assigns every example to one of ``n_folds`` parts, class by class, so each part holds about
``1 / n_folds`` of every class; :func:`fold_split` gives the (train, test) indices of one fold. The assignment
depends only on the labels, ``n_folds`` and ``FOLD_SEED`` — never on the training seed — so every seed and every
variant (pretrained or not, λ) of a fold is trained and scored on the same examples, and the ``n_folds`` test parts
are disjoint and together cover the set.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from genlab.errors import ConfigError

FOLD_SEED = 20_180_611  # fixed: the folds are part of the dataset's definition, not of a run


def check_fold(n_folds: int | None, fold: int, n_examples: int | None = None) -> None:
    """``data.n_folds`` / ``data.fold`` as the user gave them (``n_examples``: the pooled set's size, once known)."""
    if n_folds is None:
        return
    if isinstance(n_folds, bool) or not isinstance(n_folds, int) or n_folds < 2:
        raise ConfigError(f"data.n_folds={n_folds!r} must be an integer >= 2 (or null for the dataset's own split).")
    if isinstance(fold, bool) or not isinstance(fold, int) or not 0 <= fold < n_folds:
        raise ConfigError(f"data.fold={fold!r} must be an integer in 0..{n_folds - 1} (data.n_folds={n_folds}).")
    if n_examples is not None and n_examples < n_folds:
        raise ConfigError(f"data.n_folds={n_folds} is more than the {n_examples} labelled examples; lower data.n_folds.")


def stratified_folds(labels: Sequence[Hashable], n_folds: int, seed: int = FOLD_SEED) -> np.ndarray:
    """``[n]`` fold id of each example: each class's examples in a seeded random order, dealt round-robin over the
    folds (the deal continues from class to class, so fold sizes differ by at most one)."""
    check_fold(n_folds, 0, len(labels))
    rng = np.random.default_rng(seed)
    out = np.empty(len(labels), dtype=np.int64)
    by_class: dict[Hashable, list[int]] = {}
    for i, y in enumerate(labels):
        by_class.setdefault(y, []).append(i)
    dealt = 0
    for y in sorted(by_class, key=repr):  # class order independent of example order
        members = np.asarray(by_class[y])[rng.permutation(len(by_class[y]))]
        out[members] = (dealt + np.arange(len(members))) % n_folds
        dealt += len(members)
    return out


def fold_split(labels: Sequence[Hashable], n_folds: int, fold: int, seed: int = FOLD_SEED
               ) -> tuple[list[int], list[int]]:
    """(train indices, test indices) of fold ``fold``, each in the examples' order."""
    check_fold(n_folds, fold, len(labels))
    ids = stratified_folds(labels, n_folds, seed)
    return np.flatnonzero(ids != fold).tolist(), np.flatnonzero(ids == fold).tolist()
