"""Optimiser parameter groups and learning-rate schedules shared by the tasks.

Schedules are plain functions ``(optimizer, **options) -> Lightning lr-scheduler dict`` so configs can name them
as ``_partial_`` targets. Every schedule is a LambdaLR stepped once per optimiser step, so its state (the step)
is part of the checkpoint and resumes exactly.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

NO_DECAY_TYPES = (nn.LayerNorm, nn.Embedding, nn.GroupNorm, nn.BatchNorm1d, nn.BatchNorm2d)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Two groups: decayed matrices, and biases / norms / embeddings / 1-d parameters without decay."""
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

