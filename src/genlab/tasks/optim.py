"""Optimiser wiring, parameter groups and learning-rate schedules shared by the tasks.

:class:`TaskOptimization` is the one ``configure_optimizers`` / ``configure_gradient_clipping`` of every task with a
single optimiser (LM, pretraining, finetuning, AWD-LSTM, PixelCNN++); a task only says which parameter groups it
optimises. Tasks with several optimisers (the GANs, Planetoid) list them in their own ``configure_optimizers``.

Schedules are plain functions ``(optimizer, **options) -> Lightning lr-scheduler dict`` so configs can name them
as ``_partial_`` targets. Every schedule is a LambdaLR stepped once per optimiser step, so its state (the step)
is part of the checkpoint and resumes exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from pytorch_lightning.plugins.precision import Precision
from pytorch_lightning.utilities import GradClipAlgorithmType
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from genlab.errors import ConfigError
from genlab.tasks.layerwise_lr import scale_layer_gradients

NO_DECAY_TYPES = (nn.LayerNorm, nn.Embedding, nn.GroupNorm, nn.BatchNorm1d, nn.BatchNorm2d)


def weight_decay_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Two groups by kind of parameter: decayed matrices, and biases / norms / embeddings / 1-d parameters without
    decay (the GPT/Transformer-XL rule; XLNet/BERT's name-based rule with layer-wise rates is
    ``genlab.tasks.layerwise_lr.layer_decay_groups``)."""
    decay, no_decay, seen = [], [], set()
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if not p.requires_grad or id(p) in seen:
                continue
            seen.add(id(p))
            if p.ndim < 2 or name.endswith("bias") or isinstance(module, NO_DECAY_TYPES):
                no_decay.append(p)
            else:
                decay.append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def configured_lr(optimizer_factory: Callable[..., torch.optim.Optimizer]) -> float:
    """The learning rate a ``_partial_`` optimiser factory was configured with (its default for every group)."""
    return optimizer_factory([torch.zeros(1, requires_grad=True)]).defaults["lr"]


class TaskOptimization:
    """``configure_optimizers`` and ``configure_gradient_clipping`` for a LightningModule with one optimiser.

    The task sets ``optimizer_factory`` (a ``_partial_`` optimiser) and ``scheduler_factory`` (a schedule of this
    module, or None) and implements :meth:`optimizer_groups`. With ``layer_decay_mode = "grad_scale"`` (XLNet's
    official code) the gradients of layer ``l`` of ``layer_count()`` are scaled by ``layer_decay^(L-1-l)`` after
    clipping (see ``genlab.tasks.layerwise_lr``)."""

    optimizer_factory: Callable[..., torch.optim.Optimizer]
    scheduler_factory: Callable[..., dict] | None = None
    layer_decay: float = 1.0
    layer_decay_mode: str = "lr_groups"

    def optimizer_groups(self) -> Iterable[Any]:
        """Parameters or parameter groups handed to the optimiser factory."""
        raise NotImplementedError

    def layer_count(self) -> int | None:
        """Depth for layer-wise decay; None infers it from the ``...layer.<l>.`` parameter names."""
        return None

    def layer_depths(self) -> dict[str, Any]:
        """``depth``/``n_ids`` of a backbone that numbers its own layers (Funnel); empty for the ``layer.<l>`` rule."""
        return {}

    def configure_optimizers(self):
        optimizer = self.optimizer_factory(self.optimizer_groups())
        if self.scheduler_factory is None:
            return optimizer
        return {"optimizer": optimizer, "lr_scheduler": self.scheduler_factory(optimizer)}

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        plugin = self.trainer.precision_plugin
        fused = getattr(optimizer, "_step_supports_amp_scaling", False)
        if fused and gradient_clip_val and getattr(plugin, "scaler", None) is not None:
            raise ConfigError("trainer.gradient_clip_val with a fused optimiser under trainer.precision=16-mixed: "
                              "the fused step unscales the gradients itself, after clipping would have to run; "
                              "set task.optimizer.fused=false")
        if fused and hasattr(plugin, "scaler"):
            # A fused optimiser (task.optimizer.fused=true) unscales a grad scaler's gradients inside step(), so
            # Lightning refuses to clip for it under any mixed precision; bf16-mixed has no scaler, and clipping
            # before the step is exact there, as in 32-true.
            algorithm = GradClipAlgorithmType((gradient_clip_algorithm or "norm").lower())
            Precision.clip_gradients(plugin, optimizer, gradient_clip_val or 0.0, algorithm)
        else:
            self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
        if self.layer_decay_mode == "grad_scale":  # official: scale after clipping
            scale_layer_gradients(self, self.layer_decay, self.layer_count(), **self.layer_depths())


def _schedule(optimizer: torch.optim.Optimizer, factor, interval: str = "step") -> dict[str, Any]:
    return {"scheduler": LambdaLR(optimizer, factor), "interval": interval, "frequency": 1}


def warmup_cosine(optimizer: torch.optim.Optimizer, warmup_steps: int, max_steps: int, min_lr_ratio: float = 0.0):
    """Linear warm-up from 0, then cosine decay to ``min_lr_ratio * lr`` at ``max_steps`` (TF Transformer-XL form:
    the cosine runs over ``max_steps - warmup_steps``)."""

    def factor(step: int) -> float:
        if warmup_steps > 0 and step < warmup_steps:
            return step / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
        return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return _schedule(optimizer, factor)


def warmup_linear(optimizer: torch.optim.Optimizer, warmup_steps: int, max_steps: int, min_lr_ratio: float = 0.0):
    """Linear warm-up from 0, then linear decay to ``min_lr_ratio * lr`` at ``max_steps`` (BERT/XLNet form)."""

    def factor(step: int) -> float:
        if warmup_steps > 0 and step < warmup_steps:
            return step / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
        return 1.0 - (1.0 - min_lr_ratio) * progress

    return _schedule(optimizer, factor)


def constant(optimizer: torch.optim.Optimizer, warmup_steps: int = 0):
    """Constant learning rate after an optional linear warm-up."""
    return _schedule(optimizer, lambda step: min(1.0, step / warmup_steps) if warmup_steps > 0 else 1.0)

