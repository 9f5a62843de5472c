"""Autoregressive language modelling over ordered streams, with memory carried across segments.

Works with any model following the recurrent-LM protocol (CONTRIBUTING.md): Transformer-XL, the vanilla
Transformer baseline, AWD-LSTM. Perplexity / bits per character are computed over the whole stream as
``exp(sum nll / n tokens)``, weighting every batch by its number of predicted tokens (TXL spec §3.4, P18).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Any, Callable

import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils._pytree import tree_map
from torchmetrics import MeanMetric

from genlab.parallel import ParallelizeMixin
from genlab.tasks.optim import param_groups


def detach(memory: Any) -> Any:
    return tree_map(lambda t: t.detach() if isinstance(t, torch.Tensor) else t, memory)


class LanguageModelTask(ParallelizeMixin, pl.LightningModule):
    """Next-token NLL; ``valid_overrides`` / ``test_overrides`` set evaluation-time model attributes
    (``mem_len``, ``clamp_len``, ``same_length`` ...; the papers evaluate with a longer memory than in training)."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable[..., dict] | None = None,
        monitor: str = "valid/loss",
        monitor_mode: str = "min",
        metric: str = "ppl",
        weight_decay: float = 0.0,
        valid_overrides: dict[str, Any] | None = None,
        test_overrides: dict[str, Any] | None = None,
    ):
        super().__init__()
        if metric not in ("ppl", "bpc"):
            raise ValueError(f"metric must be 'ppl' or 'bpc', got {metric!r}")
        self.model = model
        self.optimizer_factory, self.scheduler_factory = optimizer, scheduler
        self.monitor, self.monitor_mode, self.metric, self.weight_decay = monitor, monitor_mode, metric, weight_decay
        self.valid_overrides = dict(valid_overrides or {})
        self.test_overrides = dict(test_overrides or {})
        self._train_memory: Any = None
        self._eval_memory: Any = None
        self.valid_nll, self.test_nll = MeanMetric(), MeanMetric()

    # -- one segment -------------------------------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, target: torch.Tensor | None = None, memory: Any = None):
        if target is not None and hasattr(self.model, "ext_len"):
            # The data decides which leading tokens are context only (TXL "half loss" ablations, spec §2.8).
            self.model.ext_len = input_ids.size(1) - target.size(1)
        return self.model(input_ids, target=target, memory=memory)

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        if batch["segment"] == 0:  # a new pass over the data: the streams restart, so does the memory
            self._train_memory = None
        out = self(batch["input_ids"], batch["target"], self._train_memory)
        self._train_memory = detach(out.memory)
        loss = out.nll.float().mean()
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def _eval_step(self, batch: dict, metric: MeanMetric) -> None:
        out = self(batch["input_ids"], batch["target"], self._eval_memory)
        self._eval_memory = detach(out.memory)
        nll = out.nll.float()
        metric.update(nll.mean(), weight=nll.numel())

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._eval_step(batch, self.valid_nll)

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self._eval_step(batch, self.test_nll)

    # -- evaluation settings and per-split memory ----------------------------------------------------------
    @contextmanager
    def model_overrides(self, overrides: dict[str, Any]):
        saved = {}
        for key, value in overrides.items():
            if not hasattr(self.model, key):
                raise AttributeError(f"{type(self.model).__name__} has no evaluation setting {key!r}")
            saved[key] = getattr(self.model, key)
            setattr(self.model, key, value)
        try:
            yield
        finally:
            for key, value in saved.items():
                setattr(self.model, key, value)

    def _begin_eval(self, overrides: dict[str, Any]) -> None:
        self._eval_memory = None
        self._overrides_ctx = self.model_overrides(overrides)
        self._overrides_ctx.__enter__()

    def _end_eval(self, split: str, metric: MeanMetric) -> None:
        self._overrides_ctx.__exit__(None, None, None)
        self._eval_memory = None
        if metric.update_count == 0:
            return
        loss = metric.compute()
        metric.reset()
        self.log(f"{split}/loss", loss, sync_dist=False)
        value = torch.exp(loss) if self.metric == "ppl" else loss / math.log(2)
        self.log(f"{split}/{self.metric}", value, prog_bar=True, sync_dist=False)

    def on_validation_epoch_start(self) -> None:
        self._begin_eval(self.valid_overrides)

    def on_validation_epoch_end(self) -> None:
        self._end_eval("valid", self.valid_nll)

    def on_test_epoch_start(self) -> None:
        self._begin_eval(self.test_overrides)

    def on_test_epoch_end(self) -> None:
        self._end_eval("test", self.test_nll)

    # -- optimisation --------------------------------------------------------------------------------------
    def configure_optimizers(self):
        optimizer = self.optimizer_factory(param_groups(self.model, self.weight_decay))
        if self.scheduler_factory is None:
            return optimizer
        return {"optimizer": optimizer, "lr_scheduler": self.scheduler_factory(optimizer)}

    # -- checkpoints: the training memory of every rank --------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # Nested lists/tuples of tensors only, so the checkpoint loads with torch.load(weights_only=True).
        memory = self._train_memory
        if memory is not None and self._world() > 1:
            memory = tree_map(self.all_gather, memory)  # leading [world] axis: every rank's own streams
        to_cpu = lambda t: t.cpu() if isinstance(t, torch.Tensor) else t  # noqa: E731
        checkpoint["lm_memory"] = {"memory": tree_map(to_cpu, memory), "ranks": self._world()}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        saved = checkpoint.get("lm_memory") or {}
        memory, ranks = saved.get("memory"), saved.get("ranks", 1)
        if memory is not None and ranks > 1:
            # Each rank takes its own streams back; another world size starts its streams afresh.
            rank = self.trainer.global_rank if self._world() == ranks else None
            memory = None if rank is None else tree_map(lambda t: t[rank], memory)
        self._train_memory = memory

    def on_train_start(self) -> None:
        if self._train_memory is not None:
            self._train_memory = tree_map(
                lambda t: t.to(self.device) if isinstance(t, torch.Tensor) else t, self._train_memory
            )

    def _world(self) -> int:
        return self.trainer.world_size if self.trainer is not None else 1
