"""Semi-supervised image DataModule: a labelled stream, an unlabelled stream and (MNIST) a second independent
unlabelled stream for the generator step (the label counts of Yang
thesis §3.1.6).

Each stream is infinite and reshuffles at every pass, emitting the last partial batch, as in the reference
code; training length is set by ``trainer.max_steps``. ``n_valid > 0`` holds that many training images out of
both pools as the validation split, so model selection never reads the test images; ``n_valid=0`` is the
reference code's protocol (no validation set: validation is the test split, and nothing should be selected on it). A training batch is a dict: ``x_lab`` [B_l, ...], ``y_lab`` [B_l], ``x_unl`` [B_u, ...]
and, when ``g_step_unlabeled='separate'``, ``x_unl2`` [B_u, ...]. Eval batches are ``x`` / ``y``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytorch_lightning as pl
import torch
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from genlab.data.images.minis import DIGITS, MNIST5K
from genlab.data.images.readers import (
    CIFAR10,
    MNIST,
    SVHN,
    read_cifar10,
    read_mnist,
    read_svhn,
)
from genlab.data.images.ssl_split import balanced_labeled_subset, subset_digest
from genlab.data.loading.resumable import ResumableTrainOrder
from genlab.data.sources.tiers import locate
from genlab.errors import ConfigError

# name -> (dataset spec, reader, maximum raw pixel value)
DATASETS = {
    "mnist": (MNIST, read_mnist, 255.0),
    "mnist5k": (MNIST5K, read_mnist, 255.0),
    "digits": (DIGITS, read_mnist, 16.0),
    "svhn": (SVHN, read_svhn, 255.0),
    "cifar10": (CIFAR10, read_cifar10, 255.0),
}
# name -> (training images, test images, one image's shape): as released (SVHN without "extra"), the minis as built.
# What the memory check counts before any file is read.
IMAGE_SIZES = {
    "mnist": (60_000, 10_000, (1, 28, 28)),
    "mnist5k": (4_000, 1_000, (1, 28, 28)),
    "digits": (1_438, 359, (1, 8, 8)),
    "svhn": (73_257, 26_032, (3, 32, 32)),
    "cifar10": (50_000, 10_000, (3, 32, 32)),
}
# uint8 copies of a split its reader holds at once: MNIST the decompressed file and the decoded array (then that
# array and its channel-axis copy), SVHN the .mat array, its transposed cast and their contiguous copy, CIFAR-10 the
# five batches and their concatenation.
READ_COPIES = {read_mnist: 2, read_svhn: 3, read_cifar10: 2}


def _batches(n: int, batch_size: int, seed: int, start: int = 0) -> Iterator[Tensor]:
    """Index batches forever, reshuffled at each pass; the last batch of a pass may be smaller. ``start`` skips
    that many batches by replaying one permutation per skipped pass (the same draws as an uninterrupted run)."""
    gen = torch.Generator().manual_seed(seed)
    passes, offset = divmod(start, max(1, math.ceil(n / batch_size)))
    for _ in range(passes):
        torch.randperm(n, generator=gen)
    while True:
        yield from torch.randperm(n, generator=gen).split(batch_size)[offset:]
        offset = 0


class SSLStream(IterableDataset):
    """The training batches from position ``start`` on (with ``x_fake``, a pool of points of a known fake
    distribution, each batch also carries ``x_fake`` [B_u, ...]); each carries its ``position`` so the DataModule can
    record what was really consumed (Lightning prefetches one batch ahead). With ``world_size`` processes the
    batches are drawn ``world_size`` times larger and rank r keeps every world_size-th index from r (disjoint
    shares; an iterable dataset gets no DistributedSampler from Lightning)."""

    def __init__(self, x_lab: Tensor, y_lab: Tensor, x_unl: Tensor, batch_lab: int, batch_unl: int,
                 separate_g_stream: bool, seed: int, start: int = 0, rank: int = 0, world_size: int = 1,
                 x_fake: Tensor | None = None) -> None:
        self.x_lab, self.y_lab, self.x_unl, self.x_fake = x_lab, y_lab, x_unl, x_fake
        self.batch_lab, self.batch_unl, self.separate, self.seed = batch_lab, batch_unl, separate_g_stream, seed
        self.start, self.rank, self.world = start, rank, world_size

    def _share(self, n: int, batch: int, seed: int) -> Iterator[Tensor]:
        return (i[self.rank :: self.world] for i in _batches(n, batch * self.world, seed, self.start))

    def __iter__(self) -> Iterator[dict[str, Tensor]]:
        lab = self._share(len(self.x_lab), self.batch_lab, self.seed * 3 + 1)
        unl = self._share(len(self.x_unl), self.batch_unl, self.seed * 3 + 2)
        unl2 = self._share(len(self.x_unl), self.batch_unl, self.seed * 3 + 3)
        fake = None if self.x_fake is None else self._share(len(self.x_fake), self.batch_unl, self.seed * 3 + 4)
        position = self.start
        while True:
            i = next(lab)
            batch = {"x_lab": self.x_lab[i], "y_lab": self.y_lab[i], "x_unl": self.x_unl[next(unl)],
                     "position": position}
            if self.separate:
                batch["x_unl2"] = self.x_unl[next(unl2)]
            if fake is not None:
                batch["x_fake"] = self.x_fake[next(fake)]
            yield batch
            position += 1


class SSLStreamDataModule(pl.LightningDataModule):
    """What the bad GAN's semi-supervised DataModules share: the resumable training stream over ``x_lab`` /
    ``y_lab`` / ``x_unl`` (and ``x_fake`` when set), ``x`` / ``y`` evaluation loaders, and the labelled subset and
    stream position in every checkpoint. A subclass sets those tensors and ``labeled_indices`` in ``setup`` and has
    the hparams ``batch_size``, ``labeled_batch_size`` (null = every labelled example in each batch),
    ``eval_batch_size``, ``g_step_unlabeled`` and ``seed``."""

    x_fake: Tensor | None = None  # a pool of points of a known fake distribution (2-D toys), else None
    labeled_indices: np.ndarray | None = None
    next_position = 0  # training batches consumed so far; saved in checkpoints (resume continues here)

    @property
    def iters_per_epoch(self) -> int:
        """The reference code's "epoch": one pass over the unlabelled stream."""
        return math.ceil(len(self.x_unl) / self.hparams.batch_size)

    def train_dataloader(self) -> DataLoader:
        stream = SSLStream(self.x_lab, self.y_lab, self.x_unl, self.hparams.labeled_batch_size or len(self.x_lab),
                           self.hparams.batch_size, self.hparams.g_step_unlabeled == "separate", self.hparams.seed,
                           start=self.next_position, rank=self.trainer.global_rank if self.trainer else 0,
                           world_size=self.trainer.world_size if self.trainer else 1, x_fake=self.x_fake)
        return DataLoader(stream, batch_size=None)

    def on_before_batch_transfer(self, batch, dataloader_idx: int):
        """Count a training batch when Lightning really hands it to the step (not when it is prefetched)."""
        if isinstance(batch, dict) and "position" in batch:
            batch = dict(batch)
            position = int(batch.pop("position"))
            if self.trainer is not None and self.trainer.training:
                self.next_position = position + 1
        return batch

    def _eval_loader(self, x: Tensor, y: Tensor) -> DataLoader:
        return DataLoader(TensorDataset(x, y), batch_size=self.hparams.eval_batch_size,
                          collate_fn=lambda items: {"x": torch.stack([a for a, _ in items]),
                                                    "y": torch.stack([b for _, b in items])})

    def state_dict(self) -> dict:
        """The labelled subset and the stream position are recorded in every checkpoint."""
        return {"labeled_indices": None if self.labeled_indices is None else self.labeled_indices.tolist(),
                "labeled_digest": getattr(self, "labeled_digest", None), "seed": self.hparams.seed,
                "next_position": self.next_position}

    def load_state_dict(self, state: dict) -> None:
        self.next_position = int(state.get("next_position", 0))


class SSLImageDataModule(SSLStreamDataModule):
    def __init__(self, dataset: str = "mnist5k", source: str = "mini", path: str | None = None,
                 cache_dir: str | None = None, n_labeled: int = 100, seed: int = 0, batch_size: int = 100,
                 labeled_batch_size: int = 100, eval_batch_size: int = 200, unlabeled_pool: str = "exclude_labeled",
                 g_step_unlabeled: str = "separate", scale: str = "unit", flatten: bool = True,
                 n_valid: int = 0) -> None:
        super().__init__()
        if dataset not in DATASETS:
            raise ConfigError(f"data.dataset={dataset!r} is unknown; choose one of {sorted(DATASETS)}.")
        if unlabeled_pool not in ("exclude_labeled", "all"):
            raise ConfigError(f"data.unlabeled_pool={unlabeled_pool!r}: use 'exclude_labeled' (MNIST) or 'all'.")
        if g_step_unlabeled not in ("separate", "same"):
            raise ConfigError(f"data.g_step_unlabeled={g_step_unlabeled!r}: use 'separate' (MNIST) or 'same'.")
        if scale not in ("unit", "symmetric"):
            raise ConfigError(f"data.scale={scale!r}: use 'unit' ([0,1]) or 'symmetric' ([-1,1]).")
        if n_valid < 0:
            raise ConfigError(f"data.n_valid={n_valid} must be >= 0 (0 = validate on the test split, as the paper).")
        self.save_hyperparameters()

    def _to_float(self, images: np.ndarray) -> Tensor:
        # In place: one float32 copy of the images at a time (SVHN's training set is 0.9 GB of it), same values
        x = torch.from_numpy(images.astype(np.float32)).div_(DATASETS[self.hparams.dataset][2])
        if self.hparams.scale == "symmetric":
            x.mul_(2.0).sub_(1.0)
        return x.flatten(1) if self.hparams.flatten else x

    def prepare_data(self) -> None:
        spec = DATASETS[self.hparams.dataset][0]
        locate(spec, self.hparams.source, self.hparams.path, self.hparams.cache_dir)

    def setup(self, stage: str | None = None) -> None:
        if self.labeled_indices is not None and hasattr(self, "x_test"):
            return
        spec, reader, _ = DATASETS[self.hparams.dataset]
        root = locate(spec, self.hparams.source, self.hparams.path, self.hparams.cache_dir)
        x_train, y_train = reader(root, "train")
        x_test, y_test = reader(root, "test")
        x_all = self._to_float(x_train)
        valid = self._valid_indices(len(y_train))
        pool = np.setdiff1d(np.arange(len(y_train)), valid)  # labelled and unlabelled images come from the rest
        idx = (pool[balanced_labeled_subset(y_train[pool], self.hparams.n_labeled, self.hparams.seed)]
               if self.hparams.n_labeled else np.zeros(0, dtype=np.int64))
        self.labeled_indices = idx
        self.labeled_digest = subset_digest(idx)
        self.x_lab, self.y_lab = x_all[idx], torch.from_numpy(y_train[idx])
        keep = np.zeros(len(y_train), dtype=bool)
        keep[pool] = True
        if self.hparams.unlabeled_pool == "exclude_labeled":
            keep[idx] = False
        self.x_unl = x_all if keep.all() else x_all[torch.from_numpy(keep)]  # the whole set: no second copy
        self.x_test, self.y_test = self._to_float(x_test), torch.from_numpy(y_test)
        self.valid_indices = valid
        self.x_valid, self.y_valid = ((x_all[valid], torch.from_numpy(y_train[valid])) if len(valid)
                                      else (self.x_test, self.y_test))

    def setup_bytes(self) -> int:
        """Host memory ``setup`` takes, from the dataset's published sizes (no file read): the training split as its
        reader holds it at its peak, then float32 copies of every training image, of the unlabelled pool when it
        leaves some out, of the labelled and validation images, and of the test split. With ``reuse_host_memory`` the
        heap keeps the reader's freed copies, and the smaller uint8 test split fits in their holes (measured against
        ``setup`` on the real-size files of ``experiments/perf/full_size_data.py``: ``real_scale.md``)."""
        hp = self.hparams
        n_train, n_test, shape = IMAGE_SIZES[hp.dataset]
        n_unl = n_train - hp.n_valid - (hp.n_labeled if hp.unlabeled_pool == "exclude_labeled" else 0)
        floats = n_train + (n_unl if n_unl < n_train else 0) + hp.n_labeled + hp.n_valid + n_test
        return math.prod(shape) * (READ_COPIES[DATASETS[hp.dataset][1]] * n_train + 4 * floats)

    def _valid_indices(self, n_train: int) -> np.ndarray:
        """``n_valid`` training images drawn once from a generator of their own (seed 0, not the run's seed), so
        every seed and labelling of a sweep validates on the same images."""
        n = self.hparams.n_valid
        if n >= n_train:
            raise ConfigError(f"data.n_valid={n} leaves no training image ({self.hparams.dataset} has {n_train}).")
        return np.sort(np.random.default_rng(0).permutation(n_train)[:n]) if n else np.zeros(0, dtype=np.int64)

    def reference_images(self, which: str) -> Tensor:
        """Images defining the low-density threshold: ``test`` (the code, transductive) or ``train_unlabeled``."""
        if which == "test":
            return self.x_test
        if which == "train_unlabeled":
            return self.x_unl
        raise ConfigError(f"task.ld_threshold_set={which!r}: use 'test' or 'train_unlabeled'.")

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader(self.x_valid, self.y_valid)

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader(self.x_test, self.y_test)

    def identity(self) -> dict:
        """Recorded in checkpoints; resuming with another dataset or labelled subset is refused."""
        identity = {"dataset": self.hparams.dataset, "n_labeled": self.hparams.n_labeled,
                    "labeled_digest": getattr(self, "labeled_digest", None)}
        return {**identity, "n_valid": self.hparams.n_valid} if self.hparams.n_valid else identity


def stack_images(items: list[tuple[Tensor]]) -> dict[str, Tensor]:
    return {"x": torch.stack([a for (a,) in items])}


# A shuffled plain stream resumes mid-epoch like the finetuning splits (its order is a function of seed and epoch,
# its position is in every checkpoint); the mixin's state replaces the SSL stream's, which these loaders do not use.
class ImageDensityDataModule(ResumableTrainOrder, SSLImageDataModule):
    """Plain image batches ``{"x": [B, C, H, W] in [-1, 1]}`` of the same datasets, for density models."""

    def __init__(self, dataset: str = "mnist5k", source: str = "mini", path: str | None = None,
                 cache_dir: str | None = None, batch_size: int = 40, eval_batch_size: int = 200,
                 seed: int = 0) -> None:
        super().__init__(dataset=dataset, source=source, path=path, cache_dir=cache_dir, n_labeled=0, seed=seed,
                         batch_size=batch_size, eval_batch_size=eval_batch_size, unlabeled_pool="all",
                         scale="symmetric", flatten=False)

    @property
    def n_levels(self) -> int:
        """Number of distinct pixel values (256, or 17 for the 8x8 digits)."""
        return int(DATASETS[self.hparams.dataset][2]) + 1

    def train_dataloader(self) -> DataLoader:
        return self.resumable_loader(TensorDataset(self.x_unl), self.hparams.batch_size, seed=self.hparams.seed,
                                     drop_last=True, collate_fn=stack_images)


class OneClassImageDataModule(ResumableTrainOrder, SSLImageDataModule):
    """One digit class of a dataset (train and test files pooled), split 85/15 with random_state 0 as the NIST
    loader of the CEGAN ranking experiment. Batches ``{"x": [B, D]}`` in [0, 1] (``[B, C, H, W]`` for conv nets,
    ``flatten=False``); ``x_test`` holds held-out images."""

    def __init__(self, dataset: str = "digits", source: str = "mini", path: str | None = None,
                 cache_dir: str | None = None, digit: int = 1, batch_size: int = 128, seed: int = 0,
                 flatten: bool = True) -> None:
        super().__init__(dataset=dataset, source=source, path=path, cache_dir=cache_dir, n_labeled=0, seed=seed,
                         batch_size=batch_size, unlabeled_pool="all", scale="unit", flatten=flatten)
        self.digit = digit

    def setup(self, stage: str | None = None) -> None:
        from sklearn.model_selection import train_test_split

        if hasattr(self, "x_train"):
            return
        spec, reader, _ = DATASETS[self.hparams.dataset]
        root = locate(spec, self.hparams.source, self.hparams.path, self.hparams.cache_dir)
        parts = [reader(root, split) for split in ("train", "test")]
        images = np.concatenate([p[0] for p in parts])
        labels = np.concatenate([p[1] for p in parts])
        if not (labels == self.digit).any():
            raise ConfigError(f"data.digit={self.digit} does not occur in {self.hparams.dataset}.")
        x = self._to_float(images[labels == self.digit])
        train_idx, test_idx = train_test_split(np.arange(len(x)), test_size=0.15, random_state=0)
        self.x_train, self.x_test = x[train_idx], x[test_idx]

    def setup_bytes(self) -> int:
        """Host memory ``setup`` takes (see the parent's): the training split as read, both splits and their
        concatenation as uint8, then the digit's images (a tenth of them: ten classes) as uint8, as float32 and
        split into float32 training and held-out copies."""
        n_train, n_test, shape = IMAGE_SIZES[self.hparams.dataset]
        n = n_train + n_test
        return math.prod(shape) * (READ_COPIES[DATASETS[self.hparams.dataset][1]] * n_train + n + n // 10 * 9)

    def train_dataloader(self) -> DataLoader:
        return self.resumable_loader(TensorDataset(self.x_train), self.hparams.batch_size, seed=self.hparams.seed,
                                     drop_last=True, collate_fn=stack_images)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(self.x_test), batch_size=500, collate_fn=stack_images)

    test_dataloader = val_dataloader
