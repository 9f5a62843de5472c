"""The optimiser and learning-rate schedules of the OpenAI GPT release (``opt.py``; GPT-1 paper §4.1).

* :class:`OpenAIAdam`: Adam whose bias correction is folded into the step size (1-based step) and whose decoupled
  weight decay is scaled by that same step size.
* :func:`ndim_decay_groups`: the release's (and the paper's "non bias or gain weights") decay rule: every tensor
  with at least 2 dimensions (weight matrices *and* embeddings) is decayed, nothing else. (``optim.param_groups``
  exempts embeddings, so it is not this rule.)
* :func:`oai_warmup_linear` (finetuning: warm-up over 0.2 % of training, then linear to 0) and
  :func:`oai_warmup_cosine` (pretraining, ``schedule_variant: oai``: the release's cosine over the whole progress,
  with its small jump at the end of warm-up). The paper's smooth form is ``genlab.tasks.optim.warmup_cosine``.

Schedules are evaluated at ``x = (step + step_base) / max_steps``. ``step_base=0`` reproduces the release, whose
first update reads ``schedule(0) = 0`` (it moves no parameter, while Adam's moments are updated).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from genlab.errors import ConfigError


def ndim_decay_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """``[{decayed: tensors with ndim >= 2}, {not decayed: biases, LayerNorm gains/biases}]`` (tied tensors once)."""
    params = [p for p in dict.fromkeys(model.parameters()) if p.requires_grad]
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


class OpenAIAdam(torch.optim.Optimizer):
    """The release's Adam (``opt.py adam``), per tensor, with ``t`` counted from 1 and ``lr`` the group's
    (scheduled) learning rate::

        m ← β1 m + (1−β1) g;   v ← β2 v + (1−β2) g²
        lr_t = lr · sqrt(1 − β2^t) / (1 − β1^t)
        θ ← θ − lr_t · (m / (sqrt(v) + ε) + wd · θ)

    ``wd`` is the group's ``weight_decay`` (use :func:`ndim_decay_groups`). Gradient clipping happens before the
    step (Lightning's ``gradient_clip_val``, global norm 1 in the release)."""

    def __init__(self, params, lr: float = 6.25e-5, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0):
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise ConfigError(f"OpenAIAdam: invalid lr={lr}, betas={betas}, eps={eps} or weight_decay={weight_decay}.")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["m"], state["v"] = torch.zeros_like(p), torch.zeros_like(p)
                state["step"] += 1
                t, m, v = state["step"], state["m"], state["v"]
                m.lerp_(p.grad, 1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                lr_t = group["lr"] * math.sqrt(1 - b2**t) / (1 - b1**t)
                update = m / (v.sqrt() + group["eps"])
                if group["weight_decay"]:
                    update.add_(p, alpha=group["weight_decay"])
                p.add_(update, alpha=-lr_t)
        return loss


def oai_linear(x: float, warmup: float = 0.002) -> float:
    """Release ``warmup_linear``: ``(x / warmup if x <= warmup else 1) · (1 − x)``, clamped at 0 after the end."""
    return max(0.0, (x / warmup if 0 < warmup and x <= warmup else 1.0) * (1.0 - x))


def oai_cosine(x: float, warmup: float) -> float:
    """Release ``warmup_cosine``: ``x / warmup`` during warm-up, then ``0.5 · (1 + cos(π x))`` (x, not the progress
    after warm-up), 0 after the end."""
    if 0 < warmup and x <= warmup:
        return x / warmup
    return 0.5 * (1.0 + math.cos(math.pi * min(x, 1.0)))


def _progress_schedule(optimizer: torch.optim.Optimizer, fn: Callable[[float], float], max_steps: int,
                       step_base: int) -> dict[str, Any]:
    if max_steps < 1 or step_base not in (0, 1):
        raise ConfigError(f"schedule: max_steps={max_steps} must be >= 1 and step_base={step_base} 0 or 1.")
    scheduler = LambdaLR(optimizer, lambda step: fn((step + step_base) / max_steps))
    return {"scheduler": scheduler, "interval": "step", "frequency": 1}


def oai_warmup_linear(optimizer: torch.optim.Optimizer, max_steps: int, warmup_frac: float = 0.002,
                      step_base: int = 0) -> dict[str, Any]:
    """Finetuning schedule of the release (GPT-1 paper §4.1, fine-tuning details)."""
    return _progress_schedule(optimizer, lambda x: oai_linear(x, warmup_frac), max_steps, step_base)


def oai_warmup_cosine(optimizer: torch.optim.Optimizer, max_steps: int, warmup_steps: int = 2000,
                      step_base: int = 0) -> dict[str, Any]:
    """Pretraining schedule of the release (GPT-1 paper §4.1, ``schedule_variant: oai``); warm-up in updates."""
    return _progress_schedule(optimizer, lambda x: oai_cosine(x, warmup_steps / max_steps), max_steps, step_base)
