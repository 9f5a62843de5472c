"""Evaluation statistics of the calibrated energy-based GAN (Dai thesis App. B.5, B.8.2, Table B.2): distributions on
a regular 2-D grid and the KL divergences between them, the energy-ranking correlation and the Inception Score.

Grid protocol: an ``n x n`` canvas spans the data range extended by half the half-range on each side; the
empirical and generated distributions are normalised histograms of points at their nearest cell centre, the data
and discriminator distributions are softmaxes over the cells of ``log p_data`` and ``-c`` (the energy).
Plain numpy on arrays the task produces, so every number can be recomputed from saved samples.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

# The ten pairwise KLs of Table B.2: (p, q) -> KL(p || q) between the grid distributions
# emp (training data), gen (generated samples), data (true density), disc (softmax of minus the energy).
KL_PAIRS = (("gen", "emp"), ("emp", "gen"), ("gen", "data"), ("data", "gen"), ("disc", "emp"), ("emp", "disc"),
            ("disc", "data"), ("data", "disc"), ("gen", "disc"), ("disc", "gen"))


def make_canvas(data: np.ndarray, n: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """Cell centres of an n×n grid spanning the data range extended by half the half-range on each side."""
    axes = []
    for d in range(2):
        lo, hi = float(data[:, d].min()), float(data[:, d].max())
        ext = (hi - lo) / 4.0  # half of the half-range
        axes.append(np.linspace(lo - ext, hi + ext, n))
    gx, gy = np.meshgrid(axes[0], axes[1], indexing="ij")
    return np.stack([gx.ravel(), gy.ravel()], 1), np.stack(axes)


def histogram_on_grid(points: np.ndarray, axes: np.ndarray) -> np.ndarray:
    """Normalised counts of points assigned to their nearest cell centre (regular grid: per-axis rounding)."""
    n = axes.shape[1]
    idx = []
    for d in range(2):
        step = axes[d, 1] - axes[d, 0]
        idx.append(np.clip(np.rint((points[:, d] - axes[d, 0]) / step), 0, n - 1).astype(np.int64))
    counts = np.bincount(idx[0] * n + idx[1], minlength=n * n).astype(np.float64)
    return counts / counts.sum()


def grid_softmax(neg_energy: np.ndarray) -> np.ndarray:
    """p_disc = exp(−c) / Σ exp(−c) over the cells (independent of a global shift of c)."""
    a = neg_energy - neg_energy.max()
    p = np.exp(a)
    return p / p.sum()


def kl(p: np.ndarray, q: np.ndarray, floor: float = 1e-10) -> float:
    """KL(p‖q) on histograms with an additive floor then renormalisation (empty cells)."""
    p = (p + floor) / (p + floor).sum()
    q = (q + floor) / (q + floor).sum()
    return float((p * (np.log(p) - np.log(q))).sum())


def grid_kls(p: Mapping[str, np.ndarray], floor: float = 1e-10) -> dict[str, float]:
    """``kl_<p>_<q>`` for the ten pairs of :data:`KL_PAIRS`, from the four grid distributions ``p``."""
    return {f"kl_{a}_{b}": kl(p[a], p[b], floor) for a, b in KL_PAIRS}


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Rank correlation (no tie correction: energies and distances are continuous)."""
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def inception_score(probs: np.ndarray, splits: int = 10) -> tuple[float, float]:
    """exp(E_x KL(p(y|x) ‖ p(y))) on ``splits`` equal parts of the class probabilities [N, K]; mean and std.
    The classifier is the caller's (the paper's TF Inception graph is not available offline)."""
    scores = []
    for part in np.array_split(np.asarray(probs, dtype=np.float64), splits):
        py = part.mean(axis=0, keepdims=True)
        kl_rows = (part * (np.log(part + 1e-12) - np.log(py + 1e-12))).sum(axis=1)
        scores.append(float(np.exp(kl_rows.mean())))
    return float(np.mean(scores)), float(np.std(scores))
