"""Pretraining of the PixelCNN++ density model used by the bad GAN's low-density term (Yang thesis
§3.1.5, Eq. (3.4); PixelCNN++ of Salimans et al. 2017).

Minimises bits per dimension on the training images ([-1, 1], discretised to the dataset's levels); logs
``train/bpd``, ``valid/bpd``, ``test/bpd`` and the 10 % quantile of per-image log p on the evaluation split
(the LD threshold ε). Checkpoints carry a ``density_model`` entry (config, image shape, weights) that
``genlab.tasks.bad_gan.load_density_model`` reads.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor

from genlab.errors import ConfigError
from genlab.models.pixelcnn_pp import PixelCNNPP
from genlab.tasks.gan_losses import density_threshold
from genlab.tasks.optim import TaskOptimization


class PixelCNNTask(TaskOptimization, pl.LightningModule):
    def __init__(self, model: PixelCNNPP, optimizer: Callable, scheduler: Callable | None = None,
                 monitor: str = "valid/bpd", monitor_mode: str = "min", image_shape: list[int] | None = None,
                 lr_decay: float = 1.0, ld_quantile: float = 10.0) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["model", "optimizer", "scheduler"])  # factories: not weights_only-loadable
        self.monitor = monitor
        self.model = model
        self.optimizer_factory, self.scheduler_factory = optimizer, scheduler
        self._eval_logp: list[Tensor] = []

    def optimizer_groups(self) -> Any:  # configure_optimizers: genlab.tasks.optim.TaskOptimization
        return self.model.parameters()

    def _check_shape(self, x: Tensor) -> None:
        want = self.hparams.image_shape
        if want is not None and list(x.shape[1:]) != list(want):
            raise ConfigError(f"task.image_shape={list(want)} but the data gives images of shape "
                              f"{list(x.shape[1:])}; set task.image_shape to match data.dataset.")
        if self.model.n_levels - 1 < 1:
            raise ConfigError("model.n_levels must be at least 2")

    def _bpd(self, logp: Tensor, x: Tensor) -> Tensor:
        return -logp.mean() / (x[0].numel() * math.log(2.0))

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        x = batch["x"]
        self._check_shape(x)
        loss = self._bpd(self.model.log_prob(x), x)
        self.log_dict({"train/bpd": loss, "train/loss": loss}, prog_bar=True)
        return loss

    def _eval_step(self, batch: dict[str, Tensor]) -> None:
        self._eval_logp.append(self.model.log_prob(batch["x"]).detach())
        self._dims = batch["x"][0].numel()

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._eval_step(batch)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._eval_step(batch)

    def _eval_end(self, stage: str) -> None:
        if not self._eval_logp:
            return
        logp = torch.cat(self._eval_logp)
        self._eval_logp = []
        self.log_dict({f"{stage}/bpd": float(-logp.mean() / (self._dims * math.log(2.0))),
                       f"{stage}/nll_nats": float(-logp.mean()),
                       f"{stage}/logp_q{self.hparams.ld_quantile:g}": float(
                           density_threshold(logp, self.hparams.ld_quantile))}, sync_dist=True)

    def on_validation_epoch_end(self) -> None:
        self._eval_end("valid")

    def on_test_epoch_end(self) -> None:
        self._eval_end("test")

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["density_model"] = {"config": dict(self.model.config), "image_shape": self.hparams.image_shape,
                                       "state_dict": {k: v.detach().cpu() for k, v in self.model.state_dict().items()}}
