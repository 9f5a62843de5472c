"""Autoregressive language modelling over ordered streams, with memory carried across segments.

Works with any model following the recurrent-LM protocol (CONTRIBUTING.md): Transformer-XL, the vanilla
Transformer baseline, AWD-LSTM. Perplexity / bits per character are computed over the whole stream as
``exp(sum nll / n tokens)``, weighting every batch by its number of predicted tokens, so the final short batch
counts for what it holds.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils._pytree import tree_map
from torchmetrics import MeanMetric

from genlab.parallel import ParallelizeMixin
from genlab.tasks.optim import TaskOptimization, weight_decay_groups

log = logging.getLogger("genlab")


def detach(memory: Any) -> Any:
    return tree_map(lambda t: t.detach() if isinstance(t, torch.Tensor) else t, memory)


class LanguageModelTask(TaskOptimization, ParallelizeMixin, pl.LightningModule):
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
        self._train_memory: list[Any] = []  # one memory per accumulated chunk of streams (batch["chunk"])
        self._eval_memory: Any = None
        self.valid_nll, self.test_nll = MeanMetric(), MeanMetric()

    # -- one segment -------------------------------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, target: torch.Tensor | None = None, memory: Any = None):
        if target is not None and hasattr(self.model, "ext_len"):
            # The data decides which leading tokens are context only (TXL "half loss" ablations, Yang thesis Table 2.6).
            self.model.ext_len = input_ids.size(1) - target.size(1)
        return self.model(input_ids, target=target, memory=memory)

    def _chunk_slot(self, batch: dict) -> int:
        """The batch's accumulated chunk of streams (``batch["chunk"]``), with a memory slot (None at first)."""
        chunk = int(batch.get("chunk", 0))
        if len(self._train_memory) <= chunk:
            self._train_memory += [None] * (chunk + 1 - len(self._train_memory))
        return chunk

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        chunk = self._chunk_slot(batch)
        if batch["segment"] == 0:  # a new pass over the data: the streams restart, so does the memory
            self._train_memory[chunk] = None
        out = self(batch["input_ids"], batch["target"], self._train_memory[chunk])
        self._train_memory[chunk] = detach(out.memory)
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

    # -- optimisation (configure_optimizers: genlab.tasks.optim.TaskOptimization) ----------------------------
    def optimizer_groups(self) -> list[dict[str, Any]]:
        return weight_decay_groups(self.model, self.weight_decay)

    # -- checkpoints: the training memory of every chunk on every rank ---------------------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # Nested lists/tuples of tensors only, so the checkpoint loads with torch.load(weights_only=True). Every
        # rank holds the same number of chunks with memories of the same shapes (same segment, same schedule).
        memory = self._train_memory
        if self._world() > 1:  # leading [world] axis: every rank's own streams
            memory = tree_map(lambda t: self.all_gather(t) if isinstance(t, torch.Tensor) else t, memory)
        to_cpu = lambda t: t.cpu() if isinstance(t, torch.Tensor) else t  # noqa: E731
        checkpoint["lm_memory"] = {"chunks": tree_map(to_cpu, memory), "ranks": self._world(),
                                   "accumulate": self._accumulate()}
        pending = self._pending_gradients()
        if pending is not None:
            checkpoint["lm_pending_grads"] = tree_map(to_cpu, pending)

    def _pending_gradients(self) -> list | None:
        """Gradients summed so far in an unfinished accumulation cycle (a checkpoint taken mid-cycle, e.g. when
        the run is stopped between micro-batches), so a resume continues the same optimiser step bit-exactly."""
        trainer = self.trainer
        if trainer is None or self._accumulate() == 1 or not trainer.training:
            return None
        if trainer.fit_loop.epoch_loop.batch_progress.current.ready % self._accumulate() == 0:
            return None  # at a step boundary: the next micro-batch zeroes the gradients anyway
        grads = [p.grad for p in self.parameters()]
        if any(type(g) is not torch.Tensor for g in grads if g is not None):  # e.g. FSDP2's sharded DTensor
            log.warning("checkpoint taken mid accumulation cycle with sharded gradients: not saved, the resumed "
                        "step will miss this cycle's earlier micro-batches.")
            return None
        if self._world() > 1:
            grads = [None if g is None else self.all_gather(g) for g in grads]
        return grads

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        saved = checkpoint.get("lm_memory") or {}
        # Checkpoints from before accumulation chunks hold one memory under "memory".
        chunks, ranks = saved.get("chunks", [saved.get("memory")]), saved.get("ranks", 1)
        if saved.get("accumulate", 1) != self._accumulate():
            chunks = []  # another accumulation splits the streams differently: they start afresh
        if ranks > 1:
            # Each rank takes its own streams back; another world size starts its streams afresh.
            rank = self.trainer.global_rank if self._world() == ranks else None
            chunks = [] if rank is None else tree_map(lambda t: t[rank] if isinstance(t, torch.Tensor) else t, chunks)
        self._train_memory = list(chunks)
        grads = checkpoint.get("lm_pending_grads")
        if grads is not None and saved.get("ranks", 1) > 1:
            rank = self.trainer.global_rank if self._world() == saved["ranks"] else None
            grads = None if rank is None else [None if g is None else g[rank] for g in grads]
        self._restored_grads = grads

    def on_train_start(self) -> None:
        self._train_memory = tree_map(
            lambda t: t.to(self.device) if isinstance(t, torch.Tensor) else t, self._train_memory
        )
        grads, self._restored_grads = getattr(self, "_restored_grads", None), None
        if grads is not None:  # Lightning does not zero them mid-cycle: the next backward adds to them
            for p, g in zip(self.parameters(), grads, strict=True):
                p.grad = None if g is None else g.to(device=p.device, dtype=p.dtype)

    def _accumulate(self) -> int:
        # _trainer: a task loaded outside a Trainer (genlab.runs.Run.load_task) has none, and .trainer raises then
        return int(self._trainer.accumulate_grad_batches) if self._trainer is not None else 1

    def _world(self) -> int:
        return self._trainer.world_size if self._trainer is not None else 1
