"""Planetoid objective (Yang thesis §3.3.3, Eq. (3.12)-(3.14), Algorithm 3): alternating SGD steps on the supervised
loss and on the context loss.

Each training batch is one step of the schedule built by :class:`genlab.data.graphs.planetoid.PlanetoidDataModule`
(the first batch is the whole unsupervised warm-up); every sub-batch gets its own optimiser step, with its own
optimiser: ``optimizer`` for the supervised loss, ``context_optimizer`` for the context loss (the reference code
uses 0.1 and 0.01/0.001). Model selection is on validation accuracy only; the best weights are restored at the
end of fit and the run stops after ``patience`` evaluations without improvement.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn

from genlab.errors import ConfigError, UserError


def negative_sampling_loss(score: torch.Tensor, gamma: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
    """Eq. 3.12: ``-log sigmoid(gamma * w_c^T e_i)`` per triple."""
    loss = -F.logsigmoid(gamma * score)
    return loss.sum() if reduction == "sum" else loss.mean()


def full_softmax_loss(logits: torch.Tensor, c: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
    """Eq. 3.11: ``-log p(c | i)`` with the softmax over every node (log-softmax, so no overflow)."""
    return F.cross_entropy(logits, c, reduction=reduction)


class PlanetoidTask(pl.LightningModule):
    def __init__(
        self,
        model: nn.Module,
        optimizer: Callable,
        context_optimizer: Callable,
        scheduler: Callable | None = None,
        monitor: str = "valid/acc",
        monitor_mode: str = "max",
        layer_loss: bool = True,
        context_reduction: str = "sum",
        patience: int = 200,
    ):
        super().__init__()
        if scheduler is not None:
            raise ConfigError("task.scheduler: Planetoid uses constant learning rates (plain SGD); set it to null.")
        if context_reduction not in ("sum", "mean"):
            raise ConfigError(f"task.context_reduction={context_reduction!r} must be 'sum' or 'mean'.")
        self.model = model
        self.optimizer_factory, self.context_optimizer_factory = optimizer, context_optimizer
        self.monitor, self.monitor_mode = monitor, monitor_mode
        self.layer_loss, self.context_reduction, self.patience = layer_loss, context_reduction, patience
        self.automatic_optimization = False
        self.best_acc, self.best_state, self.bad_evals = -1.0, None, 0

    def configure_optimizers(self):
        return [
            self.optimizer_factory(self.model.supervised_parameters()),
            self.context_optimizer_factory(self.model.context_parameters()),
        ]

    # ---- losses
    def supervised_loss(self, x: torch.Tensor, y: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
        out = self.model(nodes, x[nodes])
        target = y[nodes]
        loss = F.cross_entropy(out.logits, target)
        if self.layer_loss:  # reference code: auxiliary CE on each C-wide branch
            for z in out.branch_logits:
                loss = loss + F.cross_entropy(z, target)
        return loss

    def context_loss(self, x: torch.Tensor, i: torch.Tensor, c: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
        e = self.model.context_embed(i, x[i])
        if self.model.context_mode == "softmax":
            if bool((gamma < 0).any()):
                raise ConfigError("model.context_mode=softmax takes positive pairs only; set data.neg_mode="
                                  "full_softmax, or model.context_mode=sigmoid for negative sampling.")
            return full_softmax_loss(self.model.context_logits(e), c, self.context_reduction)
        return negative_sampling_loss(self.model.context_score(e, c), gamma, self.context_reduction)

    # ---- training
    def training_step(self, batch: dict, batch_idx: int) -> None:
        sup_opt, ctx_opt = self.optimizers()
        x, y = batch["x"], batch["y"]
        sums = {"sup": [], "ctx": []}
        for sub in batch["subs"]:
            if sub["kind"] == "sup":
                opt, loss = sup_opt, self.supervised_loss(x, y, sub["nodes"])
            else:
                opt, loss = ctx_opt, self.context_loss(x, sub["i"], sub["c"], sub["gamma"])
            if not torch.isfinite(loss):
                raise UserError(
                    f"Planetoid {sub['kind']} loss is {loss.item()} at batch {batch_idx}; lower "
                    f"{'task.optimizer.lr' if sub['kind'] == 'sup' else 'task.context_optimizer.lr'} "
                    "(the context loss is summed over all pairs of a batch, see task.context_reduction)."
                )
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()
            sums[sub["kind"]].append(loss.detach())
        prefix = "warmup" if batch["warmup"] else "train"
        for kind, losses in sums.items():
            if losses:
                self.log(f"{prefix}/{kind}_loss", torch.stack(losses).mean(), batch_size=1)
        if batch["warmup"] and sums["ctx"]:
            self.warmup_losses = torch.stack(sums["ctx"])  # kept for inspection (a unit test reads them)

    # ---- evaluation
    def _accuracy(self, batch: dict) -> torch.Tensor:
        nodes = batch["nodes"]
        pred = self.model(nodes, batch["x"][nodes]).logits.argmax(-1)
        return (pred == batch["y"][nodes]).float().mean()

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        acc = self._accuracy(batch)
        self.log("valid/acc", acc, prog_bar=True, batch_size=len(batch["nodes"]), sync_dist=True)
        self._last_val = float(acc)

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking or not hasattr(self, "_last_val"):
            return
        if self._last_val > self.best_acc:
            self.best_acc, self.bad_evals = self._last_val, 0
            self.best_state = copy.deepcopy({k: v.detach().cpu() for k, v in self.model.state_dict().items()})
        else:
            self.bad_evals += 1
            if self.bad_evals >= self.patience:
                self.trainer.should_stop = True
        self.log("valid/best_acc", self.best_acc, batch_size=1)

    def on_fit_end(self) -> None:
        if self.best_state is not None:  # selection on validation only
            self.model.load_state_dict(self.best_state)

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self.log("test/acc", self._accuracy(batch), batch_size=len(batch["nodes"]), sync_dist=True)

    # best-so-far survives checkpoint/resume
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["planetoid_selection"] = {"best_acc": self.best_acc, "bad_evals": self.bad_evals,
                                             "best_state": self.best_state}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        sel = checkpoint.get("planetoid_selection")
        if sel:
            self.best_acc, self.bad_evals, self.best_state = sel["best_acc"], sel["bad_evals"], sel["best_state"]
