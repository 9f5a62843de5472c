"""GDAN's objectives as plain tensor functions (Yang thesis §3.2.4-§3.2.5): the Table 3.4 method table, D's
balanced loss (Eq. 3.8), the REINFORCE surrogate with its baseline (Eq. 3.9), Ganin's weight ramp, the Context
baseline's pseudo-questions, and span decoding."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

Method = Literal["sl", "context", "context_domain", "gen", "gen_gan", "gen_dual", "gen_domain", "gen_domain_adv"]
Baseline = Literal["batch_mean", "moving_average", "none"]
WeightSchedule = Literal["constant", "ganin"]


@dataclass(frozen=True)
class MethodSpec:
    """What one row of Yang thesis Table 3.4 switches on."""
    unlabeled_source: Literal["none", "context", "generator"]
    domain_tags: bool
    g_update: Literal["none", "adv", "dual", "gan"]  # REINFORCE reward: D under d_true / D untagged / classifier
    weight_schedule: WeightSchedule = "constant"     # default multiplier of G's policy-gradient loss


METHODS: dict[str, MethodSpec] = {
    "sl": MethodSpec("none", False, "none"),
    "context": MethodSpec("context", False, "none"),
    "context_domain": MethodSpec("context", True, "none"),
    "gen": MethodSpec("generator", False, "none"),
    "gen_gan": MethodSpec("generator", False, "gan", "ganin"),
    "gen_dual": MethodSpec("generator", False, "dual", "ganin"),
    "gen_domain": MethodSpec("generator", True, "none"),
    "gen_domain_adv": MethodSpec("generator", True, "adv"),
}


def balanced_d_loss(nll_lab: Tensor, nll_unl: Tensor | None) -> Tensor:
    """``−J(L, ·, D) − J(U_G, ·, D)``: one mean per dataset, so batch sizes do not re-weight L against U_G (Eq. 3.8)."""
    loss = nll_lab.mean()
    return loss if nll_unl is None or nll_unl.numel() == 0 else loss + nll_unl.mean()


def domain_bce(logit_lab: Tensor, logit_unl: Tensor) -> Tensor:
    """The GAN baseline's classifier loss: L rows are "human" (1), U_G rows "generated" (0); a mean per dataset."""
    return (F.binary_cross_entropy_with_logits(logit_lab, torch.ones_like(logit_lab))
            + F.binary_cross_entropy_with_logits(logit_unl, torch.zeros_like(logit_unl)))


def rl_baseline(reward: Tensor, kind: Baseline, running: float | None, momentum: float) -> tuple[Tensor, float | None]:
    """(baseline b for this batch, running value to keep). ``batch_mean`` = the average reward of the samples
    (seed: "an average reward from samples"); ``moving_average`` = an exponential average of past batch means, used
    before it absorbs this batch; ``none`` = 0. b is a constant of G's update."""
    reward = reward.detach()
    if kind == "none":
        return reward.new_zeros(()), running
    mean = float(reward.mean())
    if kind == "batch_mean":
        return reward.mean(), running
    b = mean if running is None else running
    return reward.new_tensor(b), mean if running is None else momentum * running + (1.0 - momentum) * mean


def reinforce_loss(reward: Tensor, baseline: Tensor, seq_log_prob: Tensor, weight: float = 1.0) -> Tensor:
    """``−weight · mean_i (R_i − b) · log P_G(q_i | p_i, a_i)``: the gradient reaches G only through its log-probs."""
    advantage = (reward - baseline).detach()
    return -weight * (advantage * seq_log_prob).mean()


def ganin_lambda(progress: float) -> float:
    """Ganin & Lempitsky's ramp ``λ(p) = 2 / (1 + exp(−10 p)) − 1`` for p ∈ [0, 1] (the "Gen + GAN" baseline)."""
    p = min(max(progress, 0.0), 1.0)
    return 2.0 / (1.0 + math.exp(-10.0 * p)) - 1.0


def context_question(p_ids: Tensor, p_mask: Tensor, start: Tensor, end: Tensor, window: int = 5,
                     unk_id: int = 1, pad_id: int = 0) -> tuple[Tensor, Tensor]:
    """The Context baseline's pseudo-question (Yang thesis §3.2.3): the ``window`` tokens before the answer and the
    ``window`` after it, truncated at the paragraph's ends, never the answer itself; -> (ids, mask) [B, 2·window],
    kept tokens moved to the front. A paragraph that is all answer gives a single <unk>."""
    offs = torch.arange(window, device=p_ids.device)
    left = start[:, None] - window + offs                   # j−W .. j−1
    right = end[:, None] + 1 + offs                         # k+1 .. k+W
    pos = torch.cat([left, right], dim=1)
    valid = (pos >= 0) & (pos < p_mask.sum(1, keepdim=True))
    order = torch.sort((~valid).to(torch.int8), dim=1, stable=True).indices  # valid first, order kept
    pos, valid = pos.gather(1, order), valid.gather(1, order)
    ids = p_ids.gather(1, pos.clamp(0, p_ids.shape[1] - 1)).masked_fill(~valid, pad_id)
    empty = ~valid.any(1)
    ids[:, 0] = torch.where(empty, torch.full_like(ids[:, 0], unk_id), ids[:, 0])
    valid[:, 0] |= empty
    return ids, valid


def best_span(start_log_probs: Tensor, end_log_probs: Tensor, max_len: int = 15) -> tuple[Tensor, Tensor]:
    """``argmax_{j <= k <= j + max_len − 1} log p_start[j] + log p_end[k]`` per row (a platform default; the thesis does
    not say how spans are decoded) -> (j, k) [B]."""
    t = start_log_probs.shape[1]
    scores = start_log_probs[:, :, None] + end_log_probs[:, None, :]  # [B, T(j), T(k)]
    offset = torch.arange(t, device=scores.device)[None, :] - torch.arange(t, device=scores.device)[:, None]
    legal = (offset >= 0) & (offset < max_len)
    flat = scores.masked_fill(~legal, float("-inf")).flatten(1).argmax(1)
    return flat // t, flat % t


def cat_padded(parts: list[Tensor], pad: int | bool = 0) -> Tensor:
    """Concatenate along the batch axis, right-padding dim 1 to the widest part (1-d parts are concatenated)."""
    if parts[0].dim() == 1:
        return torch.cat(parts)
    width = max(x.shape[1] for x in parts)
    return torch.cat([F.pad(x, (0, width - x.shape[1]), value=pad) for x in parts])
