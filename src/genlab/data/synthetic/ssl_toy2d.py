"""The 2-D semi-supervised toys of the bad-GAN case study (Yang thesis §3.1.4) as a bad-GAN
DataModule.

All N points of ``four_spins`` / ``two_circles`` (``genlab.data.synthetic.toy2d``) are the unlabelled stream and the
(transductive) evaluation set; ``labels_per_class`` of them, drawn from the seed, are labelled. ``fake=complement``
adds the case study's complement generator, a known fake distribution, to every training batch as ``x_fake``: uniform in
the data's bounding box ± ``box_margin`` with every point closer than ``delta`` to a data point rejected, drawn once
as a pool of ``fake_pool`` points (batches from it follow the same distribution without a distance computation per
step). The bad-GAN task reads it with ``task.fake_source=data``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader

from genlab.data.images.datamodule import SSLStreamDataModule
from genlab.data.images.ssl_split import balanced_labeled_subset, subset_digest
from genlab.data.synthetic.toy2d import four_spins, two_circles
from genlab.errors import ConfigError

SSL_SETS = {"four_spins": four_spins, "two_circles": two_circles}
FAKES = ("none", "complement")


def complement_sample(x_unl: Tensor, n: int, gen: torch.Generator, box_margin: float = 0.2, delta: float = 0.3
                      ) -> Tensor:
    """n points uniform in the bounding box of ``x_unl`` (± box_margin), every point closer than ``delta`` to an
    unlabelled point rejected: the complement generator of Yang thesis §3.1.4."""
    lo, hi = x_unl.min(0).values - box_margin, x_unl.max(0).values + box_margin
    kept: list[Tensor] = []
    have = 0
    while have < n:
        cand = lo + (hi - lo) * torch.rand(min(4 * n, 20_000), 2, generator=gen)
        ok = torch.cdist(cand, x_unl).min(1).values >= delta
        kept.append(cand[ok])
        have += int(ok.sum())
    return torch.cat(kept)[:n]


class Toy2DSSLDataModule(SSLStreamDataModule):
    """Batches ``x_lab`` / ``y_lab`` (every labelled point unless ``labeled_batch_size``), ``x_unl``, ``x_unl2``
    (``g_step_unlabeled=separate``) and, with ``fake=complement``, ``x_fake``; evaluation batches ``x`` / ``y`` over
    all N points. The points and the labelled subset are drawn from ``seed``."""

    def __init__(self, dataset: str = "four_spins", n: int = 2000, labels_per_class: int = 1, seed: int = 0,
                 batch_size: int = 128, labeled_batch_size: int | None = None, eval_batch_size: int = 2000,
                 g_step_unlabeled: str = "separate", fake: str = "none", fake_pool: int = 50_000,
                 box_margin: float = 0.2, delta: float = 0.3) -> None:
        super().__init__()
        if dataset not in SSL_SETS:
            raise ConfigError(f"data.dataset={dataset!r} is unknown; choose one of {sorted(SSL_SETS)}.")
        if fake not in FAKES:
            raise ConfigError(f"data.fake={fake!r}: use 'complement' (the case study's complement generator) "
                              "or 'none'.")
        if g_step_unlabeled not in ("separate", "same"):
            raise ConfigError(f"data.g_step_unlabeled={g_step_unlabeled!r}: use 'separate' or 'same'.")
        if labels_per_class < 1:
            raise ConfigError(f"data.labels_per_class={labels_per_class} must be at least 1.")
        self.save_hyperparameters()

    def setup(self, stage: str | None = None) -> None:
        if self.labeled_indices is not None:
            return
        hp = self.hparams
        x, y = SSL_SETS[hp.dataset](hp.n, seed=hp.seed)
        n_classes = len(np.unique(y))
        idx = balanced_labeled_subset(y, hp.labels_per_class * n_classes, hp.seed, key="data.labels_per_class")
        self.x, self.y = torch.from_numpy(x), torch.from_numpy(y).long()
        self.labeled_indices, self.labeled_digest = idx, subset_digest(idx)
        self.x_lab, self.y_lab = self.x[idx], self.y[idx]
        self.x_unl = self.x
        if hp.fake == "complement":
            gen = torch.Generator().manual_seed(hp.seed)
            self.x_fake = complement_sample(self.x, hp.fake_pool, gen, hp.box_margin, hp.delta)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader(self.x, self.y)

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader(self.x, self.y)

    def identity(self) -> dict:
        """Recorded in checkpoints; resuming with other points or another labelled subset is refused."""
        hp = self.hparams
        return {"dataset": hp.dataset, "n": hp.n, "seed": hp.seed, "fake": hp.fake,
                "labeled_digest": getattr(self, "labeled_digest", None)}
