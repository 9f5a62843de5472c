"""Pictures of a GAN's evaluation: a grid of generated samples and, with a density model, the histogram of log p of
generated vs real images with the low-density threshold (the max log p column of Yang thesis
Table 3.2).

The task evaluates and keeps what it drew in ``pl_module.eval_samples`` (``samples``: generated images; ``logp``:
their log density, when it has a density model); :class:`GANSampleImages` turns that into images after each
validation, sends them to the loggers that take images (W&B, TensorBoard) and, so CSV-only runs show them too,
saves PNGs under ``<run dir>/images/`` when the Trainer has a ``default_root_dir`` (not the working directory).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from torch import Tensor

from genlab.tasks.data_interface import SSLImageData, datamodule_of

REAL_FOR_HISTOGRAM = 400  # real reference images scored for the histogram (as many as generated ones scored)


def image_grid(images: Tensor, image_shape: list[int] | None = None, nrow: int = 10) -> Tensor:
    """[N, ...] images in [0,1] or [-1,1] -> one [C, H', W'] grid in [0,1] (no torchvision needed)."""
    x = images.detach().float().cpu()
    if image_shape:
        x = x.reshape(len(x), *image_shape)
    elif x.ndim == 2:
        side = int(round(math.sqrt(x.shape[1])))
        x = x.reshape(len(x), 1, side, side)
    if x.min() < 0:
        x = (x + 1.0) / 2.0
    n, c, h, w = x.shape
    rows = math.ceil(n / nrow)
    grid = torch.ones(c, rows * (h + 1) + 1, nrow * (w + 1) + 1)
    for i in range(n):
        r, col = divmod(i, nrow)
        grid[:, 1 + r * (h + 1): 1 + r * (h + 1) + h, 1 + col * (w + 1): 1 + col * (w + 1) + w] = x[i]
    return grid.clamp(0, 1)


def save_png(img: Tensor, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    arr = img.permute(1, 2, 0).numpy()
    plt.imsave(path, arr[..., 0] if arr.shape[-1] == 1 else arr, cmap="gray", vmin=0.0, vmax=1.0)


def logp_histogram(gen: Tensor, real: Tensor | None, threshold: float, step: int) -> Tensor:
    """Low-density statistics as a picture (the max log p of Yang thesis Table 3.2): density-model log p of generated
    samples vs real reference images, with the LD threshold ε; returned as a [3, H, W] image in [0, 1]."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2), dpi=80)
    ax.hist(gen.cpu().numpy(), bins=40, alpha=0.6, label=f"generated (max {float(gen.max()):.0f})")
    if real is not None:
        ax.hist(real.cpu().numpy(), bins=40, alpha=0.6, label="real reference")
    ax.axvline(threshold, color="k", linestyle="--", label=f"threshold ε = {threshold:.0f}")
    ax.set_xlabel("log p(x) under the density model (nats / image)")
    ax.set_title(f"iteration {step}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.canvas.draw()
    rgba = torch.from_numpy(np.asarray(fig.canvas.buffer_rgba()).copy())
    plt.close(fig)
    return rgba[..., :3].permute(2, 0, 1).float() / 255.0


def log_images(trainer: pl.Trainer, images: dict[str, Tensor], step: int) -> None:
    """[C, H, W] images in [0, 1] to every logger that takes images, and as PNGs under ``<run dir>/images/``."""
    if not trainer.is_global_zero:
        return
    for name, img in images.items():
        if img.numel() == 0:
            continue
        for logger in trainer.loggers:
            exp = getattr(logger, "experiment", None)
            if hasattr(logger, "log_image"):
                logger.log_image(key=name, images=[img], step=step)
            elif hasattr(exp, "add_image"):
                exp.add_image(name, img, step)
        if _run_dir_given(trainer):
            save_png(img, Path(trainer.default_root_dir) / "images" / f"{name}_step{step:07d}.png")


def _run_dir_given(trainer: pl.Trainer) -> bool:
    """Lightning falls back to the working directory when no ``default_root_dir`` is given; never write there."""
    return Path(trainer.default_root_dir).resolve() != Path.cwd().resolve()


class GANSampleImages(pl.Callback):
    """After each validation: the sample grid (``samples``) and, with a density model, the log p histogram
    (``ld_logp_hist``) of the task's ``eval_samples``. The real reference images come from the DataModule's
    ``reference_images(ld_threshold_set)`` (see ``genlab.tasks.data_interface``)."""

    def __init__(self, image_shape: list[int] | None = None) -> None:
        self.image_shape = image_shape

    @torch.no_grad()
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        drawn: dict[str, Any] = getattr(pl_module, "eval_samples", None) or {}
        if drawn.get("samples") is None or not len(drawn["samples"]):  # no generator, or task.sample_grid=0
            return
        images = {}
        if drawn.get("logp") is not None:
            dm: SSLImageData | None = datamodule_of(pl_module)
            real = None
            if dm is not None:  # scored with the task's own density model, as the threshold was
                reference = dm.reference_images(pl_module.hparams.ld_threshold_set)[:REAL_FOR_HISTOGRAM]
                real = pl_module.log_density_batched(reference)
            images["ld_logp_hist"] = logp_histogram(drawn["logp"], real, float(pl_module.ld_threshold),
                                                    pl_module.global_step)
        images["samples"] = image_grid(drawn["samples"], self.image_shape)
        log_images(trainer, images, pl_module.global_step)
