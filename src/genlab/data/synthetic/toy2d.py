"""Synthetic 2-D data sets of the CEGAN and bad-GAN case studies, generated exactly as the reference code draws
them (Dai thesis App. B.5.1; Yang thesis §3.1.4), with their analytic densities, and DataModules serving them.

- ``gmm4``: 4 Gaussians, equal weights, means (±v, ±v), random diagonal covariances (RandomState(5)).
- ``biased_gmm2``: weights 0.1 at (v, v) and 0.9 at (−v, −v), covariance 5·I (RandomState(2)).
- ``two_spirals``: ``n_components`` isotropic Gaussians (std 0.45) along two spirals (RandomState(12345)).
- ``four_spins`` (labelled, 4 classes) and ``two_circles`` (2 classes) for the complement-generator study.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from genlab.data.loading.resumable import ResumableTrainOrder
from genlab.errors import ConfigError


@dataclass
class Mixture:
    """Gaussian mixture with diagonal covariances: weights [C], means [C, 2], variances [C, 2]."""

    weights: np.ndarray
    means: np.ndarray
    variances: np.ndarray

    def log_density(self, x: np.ndarray) -> np.ndarray:
        diff = x[:, None, :] - self.means[None]
        logn = -0.5 * (diff**2 / self.variances[None]).sum(-1) - 0.5 * np.log(
            (2 * math.pi) ** 2 * self.variances.prod(-1))[None]
        a = logn + np.log(self.weights)[None]
        m = a.max(1, keepdims=True)
        return (m + np.log(np.exp(a - m).sum(1, keepdims=True)))[:, 0]


def gmm4(n: int = 100_000) -> tuple[np.ndarray, Mixture]:
    rng = np.random.RandomState(5)
    counts = rng.multinomial(n, [0.25] * 4)
    v = rng.uniform(0, 1) * 10
    means = np.array([[v, v], [-v, v], [v, -v], [-v, -v]])
    xs, variances = [], []
    for c in range(4):
        var = np.diag(rng.uniform(0, 1, size=2)) * 10
        xs.append(rng.multivariate_normal(means[c], var, size=counts[c]))
        variances.append(np.diag(var))
    return np.concatenate(xs).astype(np.float32), Mixture(np.full(4, 0.25), means, np.array(variances))


def biased_gmm2(n: int = 100_000) -> tuple[np.ndarray, Mixture]:
    rng = np.random.RandomState(2)
    v = rng.uniform(0, 1) * 8
    weights = np.array([0.1, 0.9])
    means = np.array([[v, v], [-v, -v]])
    counts = rng.multinomial(n, weights)
    xs = [rng.multivariate_normal(means[c], 5 * np.eye(2), size=counts[c]) for c in range(2)]
    return np.concatenate(xs).astype(np.float32), Mixture(weights, means, np.full((2, 2), 5.0))


def two_spirals(n: int = 100_000, n_components: int = 100, noise: float = 0.45,
                truth_cov: str = "sampling") -> tuple[np.ndarray, Mixture]:
    """Centres at angles from 120° over a 360° sweep: spiral 1 (−a cos a, a sin a), spiral 2 the mirror.
    ``truth_cov='unit'`` reproduces the reference code's ground truth (unit covariance)."""
    rng = np.random.RandomState(12345)
    per = n_components // 2
    angles = np.radians(120 + np.linspace(0, 360, per))
    c1 = np.stack([-angles * np.cos(angles), angles * np.sin(angles)], 1)
    means = np.concatenate([c1, -c1])
    counts = rng.multinomial(n, np.full(len(means), 1 / len(means)))
    x = np.concatenate([means[c] + noise * rng.randn(counts[c], 2) for c in range(len(means))])
    var = noise**2 if truth_cov == "sampling" else 1.0
    return x.astype(np.float32), Mixture(np.full(len(means), 1 / len(means)), means, np.full((len(means), 2), var))


def four_spins(n: int = 2000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(seed)
    xs, ys = [], []
    for k in range(4):
        m = n // 4
        u = np.stack([1 + 0.22 * rng.randn(m), 0.1 * rng.randn(m)], 1)
        theta = 2 * math.pi * k / 4 + 0.52 * np.exp(u[:, 0])
        rot = np.stack([u[:, 0] * np.cos(theta) - u[:, 1] * np.sin(theta),
                        u[:, 0] * np.sin(theta) + u[:, 1] * np.cos(theta)], 1)
        xs.append(rot)
        ys.append(np.full(m, k))
    return np.concatenate(xs).astype(np.float32), np.concatenate(ys)


def two_circles(n: int = 2000, seed: int = 0, radii: tuple[float, float] = (1.0, 0.5), noise: float = 0.05
                ) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(seed)
    xs, ys = [], []
    for k, r in enumerate(radii):
        a = rng.uniform(0, 2 * math.pi, n // 2)
        xs.append(np.stack([r * np.cos(a), r * np.sin(a)], 1) + noise * rng.randn(n // 2, 2))
        ys.append(np.full(n // 2, k))
    return np.concatenate(xs).astype(np.float32), np.concatenate(ys)


PAPER_N = 100_000  # points per density data set in the paper (Dai thesis App. B.5.1)
DENSITY_SETS = {"gmm4": gmm4, "biased_gmm2": biased_gmm2, "two_spirals": two_spirals}


class Toy2DDataModule(ResumableTrainOrder, pl.LightningDataModule):
    """Batches ``{"x": [B, 2]}`` of one density data set, reshuffled every epoch (an epoch = n_train / B steps)."""

    def __init__(self, dataset: str = "gmm4", n_train: int = 100_000, batch_size: int = 500, seed: int = 0,
                 spiral_components: int = 100, spiral_truth_cov: str = "sampling") -> None:
        super().__init__()
        if dataset not in DENSITY_SETS:
            raise ConfigError(f"data.dataset={dataset!r} is unknown; choose one of {sorted(DENSITY_SETS)}.")
        if spiral_truth_cov not in ("sampling", "unit"):
            raise ConfigError("data.spiral_truth_cov must be 'sampling' or 'unit'.")
        self.save_hyperparameters()

    def setup(self, stage: str | None = None) -> None:
        hp = self.hparams
        # Draw the paper's 100,000 points and keep a fixed random n_train of them: the reference code draws a
        # 4-GMM's covariances between its components' samples, so drawing fewer points changes the mixture itself.
        n = max(hp.n_train, PAPER_N)
        if hp.dataset == "two_spirals":
            x, self.truth = two_spirals(n, hp.spiral_components, truth_cov=hp.spiral_truth_cov)
        else:
            x, self.truth = DENSITY_SETS[hp.dataset](n)
        if hp.n_train < n:
            x = x[np.sort(np.random.RandomState(0).permutation(n)[:hp.n_train])]
        self.x = torch.from_numpy(x)

    def train_dataloader(self) -> DataLoader:
        # the order of epoch e depends on (data.seed, e) only and its position is checkpointed: resumes are exact
        return self.resumable_loader(TensorDataset(self.x), self.hparams.batch_size, seed=self.hparams.seed,
                                     drop_last=True, collate_fn=lambda items: {"x": torch.stack([a for (a,) in items])})

    def val_dataloader(self) -> DataLoader:
        # the grid evaluation uses the whole training set; one dummy batch triggers it
        return DataLoader(TensorDataset(self.x[:1]), batch_size=1,
                          collate_fn=lambda items: {"x": torch.stack([a for (a,) in items])})

    test_dataloader = val_dataloader
