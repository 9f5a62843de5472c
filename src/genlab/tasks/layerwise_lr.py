"""XLNet/BERT weight-decay masks and layer-wise learning-rate decay (the authors' ``model_utils.py``).

Weight decay (official AdamWeightDecay rule): names containing ``LayerNorm``, ``layer_norm`` or ``bias`` are not
decayed, except ``r_w_bias``, ``r_r_bias``, ``r_s_bias`` (checked first, so they ARE decayed).

Layer-wise decay, two modes:

* ``lr_groups`` (paper definition): layer l of L gets ``lr·rate^(L-1-l)``, including its per-layer ``r_*`` biases and
  ``seg_embed`` (our choice); embeddings get ``lr·rate^L`` when ``include_embeddings`` else ``lr``; heads get ``lr``.
* ``grad_scale`` (bit-faithful to the official code): after clipping, multiply the gradients of the
  ``layer_<l>`` scope by ``rate^(L-1-l)``; the ``r_*`` biases, ``seg_embed``, embeddings, mask_emb, lm_loss bias
  and heads stay unscaled, because in TF they live outside those scopes.

A backbone may instead give every parameter its depth itself (``depth(name) -> id | None`` over ``n_ids`` ids, the
Funnel-Transformer rule of the authors' code: embedding 0, encoder layer k -> k + 1, decoder layer i
-> n_encoder + 1 + i; scale ``rate^(n_ids-1-id)``, in both modes, for every parameter with an id, the per-layer
``r_*`` biases and ``seg_embed`` included since they live inside the TF layer scopes there).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from genlab.errors import ConfigError

DECAY_ANYWAY = ("r_w_bias", "r_r_bias", "r_s_bias")
NO_DECAY = ("LayerNorm", "layer_norm", "bias")
OUTSIDE_LAYER_SCOPE = ("r_w_bias", "r_r_bias", "r_s_bias", "seg_embed")
EMBEDDING_NAMES = ("word_embedding", "mask_emb", "embeddings.")
_LAYER = re.compile(r"(?:^|\.)layer\.(\d+)\.")


def decays(name: str) -> bool:
    """Whether parameter ``name`` gets weight decay under the official AdamWeightDecay rule."""
    if any(k in name for k in DECAY_ANYWAY):
        return True
    return not any(k in name for k in NO_DECAY)


def layer_of(name: str) -> int | None:
    m = _LAYER.search(name)
    return int(m.group(1)) if m else None


def _unique_named(model: nn.Module):
    seen: set[int] = set()
    for name, p in model.named_parameters():
        if p.requires_grad and id(p) not in seen:
            seen.add(id(p))
            yield name, p


Depth = Callable[[str], "int | None"]


def layer_decay_groups(
    model: nn.Module, lr: float, weight_decay: float, layer_decay: float = 1.0, n_layer: int | None = None,
    include_embeddings: bool = False, depth: Depth | None = None, n_ids: int | None = None,
) -> list[dict[str, Any]]:
    """Optimiser groups ``{params, lr, weight_decay}`` by (decayed under the official name rule?, layer-wise learning
    rate ``lr_groups`` mode); ``layer_decay=1`` gives the decay split alone. With ``depth``/``n_ids`` (see the module
    docstring) the backbone's own depths replace the ``layer.<l>`` rule."""
    names = [n for n, _ in _unique_named(model)]
    if n_layer is None:
        layers = [layer_of(n) for n in names]
        n_layer = 1 + max((i for i in layers if i is not None), default=-1)
    groups: dict[tuple[bool, float], list[nn.Parameter]] = {}
    for name, p in _unique_named(model):
        layer = layer_of(name)
        if depth is not None:
            d = depth(name)
            scale = 1.0 if d is None else layer_decay ** (n_ids - 1 - d)
        elif layer is not None:
            scale = layer_decay ** (n_layer - 1 - layer)
        elif include_embeddings and any(k in name for k in EMBEDDING_NAMES):
            scale = layer_decay**n_layer
        else:
            scale = 1.0
        groups.setdefault((decays(name), lr * scale), []).append(p)
    return [{"params": ps, "lr": g_lr, "weight_decay": weight_decay if dec else 0.0}
            for (dec, g_lr), ps in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0]))]


def scale_layer_gradients(model: nn.Module, layer_decay: float, n_layer: int | None = None,
                          depth: Depth | None = None, n_ids: int | None = None) -> None:
    """``grad_scale`` mode: call after gradient clipping, before the optimiser step."""
    if layer_decay == 1.0:
        return
    named = list(_unique_named(model))
    if depth is not None:
        for name, p in named:
            d = depth(name)
            if d is not None and p.grad is not None:
                p.grad.mul_(layer_decay ** (n_ids - 1 - d))
        return
    if n_layer is None:
        n_layer = 1 + max((layer_of(n) for n, _ in named if layer_of(n) is not None), default=-1)
    for name, p in named:
        layer = layer_of(name)
        if layer is None or p.grad is None or any(k in name for k in OUTSIDE_LAYER_SCOPE):
            continue
        p.grad.mul_(layer_decay ** (n_layer - 1 - layer))


def check_mode(mode: str) -> str:
    if mode not in ("lr_groups", "grad_scale"):
        raise ConfigError(f"layer_decay_mode={mode!r} must be 'lr_groups' or 'grad_scale'.")
    return mode


class AdamWeightDecay(torch.optim.AdamW):
    """BERT/XLNet AdamWeightDecay: no bias correction, decoupled decay multiplied by lr (official code):
    ``m ← β1 m + (1−β1) g; v ← β2 v + (1−β2) g²; θ ← θ − lr·(m/(√v + eps) + wd·θ)``.

    That is AdamW with both bias corrections held at 1: every parameter's step count is +inf (1 − β^∞ = 1, and
    ∞ + 1 stays ∞), so torch's AdamW kernels run it — by default the fused one (one kernel per step, several
    times faster than per-tensor updates on CPU). ``θ(1 − lr·wd) − lr·m/(√v + eps)`` is the same update.
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0, fused: bool = True):
        if lr < 0 or eps < 0 or not all(0 <= b < 1 for b in betas):
            raise ConfigError(f"AdamWeightDecay: invalid lr={lr}, betas={betas} or eps={eps}.")
        super().__init__(params, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, fused=fused)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:  # first: Lightning's closure computes the gradients the states are made for
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None and not self.state[p]:  # before AdamW would start its count at 0
                    self.state[p] = {"step": torch.full((), math.inf, dtype=torch.float32, device=p.device),
                                     "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                                     "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}
        super().step()
        return loss

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Also reads checkpoints of the earlier per-tensor implementation (moments ``m`` / ``v``, plain groups)."""
        state = {}
        for key, s in state_dict["state"].items():
            s = dict(s)
            if "m" in s:
                s = {"step": torch.tensor(math.inf), "exp_avg": s.pop("m"), "exp_avg_sq": s.pop("v"), **s}
            state[key] = s
        groups = [{**self.defaults, **g} for g in state_dict["param_groups"]]
        super().load_state_dict({**state_dict, "state": state, "param_groups": groups})
