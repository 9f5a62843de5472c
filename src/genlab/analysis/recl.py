"""Relative effective context length (RECL) of Yang thesis §2.1.4, Table 2.9.

RECL is defined on a *group* of models that share one baseline. With ``l_i(c, t)`` the loss of model i on token
t seeing c previous tokens:

    b(c, t)      = min_i l_i(c, t)                                       (the group's best short-context loss)
    T            = the top-r fraction of positions with the largest b(c, t)       (the hard positions)
    f_i(c, c')   = mean_{t in T} min(b(c, t), l_i(c', t))                (only gains below the baseline count)
    g_i(c, c')   = (exp f_i(c, c) - exp f_i(c, c')) / exp f_i(c, c)       (relative perplexity gain)

and, from c = c0 with step delta, RECL_i is the first c whose gain g_i(c, c + delta) falls below the threshold
(0.01 in the seed). ``f_i(c, c)`` is the mean baseline over T for every model, since b <= l_i.

The losses come as ``{model: {context length: per-position losses}}``, every array over the same positions.
Collecting them from checkpoints (the two context modes of the spec) is in ``window_losses`` / ``memory_losses``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from genlab.errors import UserError

GroupLosses = Mapping[str, Mapping[int, np.ndarray]]


def baseline(group: GroupLosses, c: int) -> np.ndarray:
    """b(c, t): the smallest loss any model of the group has on each position with context c."""
    return np.min(np.stack([np.asarray(losses[c], dtype=np.float64) for losses in group.values()]), axis=0)


def hard_positions(base: np.ndarray, r: float) -> np.ndarray:
    """Indices of the top-r fraction of positions by baseline loss (at least one; ties broken by position)."""
    if not 0 < r <= 1:
        raise UserError(f"RECL ratio r={r} must be in (0, 1]")
    k = max(1, int(round(r * base.size)))
    order = np.argsort(-base, kind="stable")
    return np.sort(order[:k])


def relative_gain(group: GroupLosses, model: str, c: int, c_long: int, r: float) -> float:
    """g_i(c, c'): how much model ``model`` with context ``c_long`` improves on the group's baseline at ``c``."""
    base = baseline(group, c)
    hard = hard_positions(base, r)
    f_short = float(np.mean(base[hard]))  # = f_i(c, c): min(b, l_i(c)) is b
    f_long = float(np.mean(np.minimum(base, np.asarray(group[model][c_long], dtype=np.float64))[hard]))
    return (math.exp(f_short) - math.exp(f_long)) / math.exp(f_short)


def _check(group: GroupLosses, c0: int, delta: int) -> list[int]:
    if not group:
        raise UserError("RECL needs a group of at least one model")
    grids = {name: sorted(losses) for name, losses in group.items()}
    lengths = next(iter(grids.values()))
    if any(g != lengths for g in grids.values()):
        raise UserError(f"every model of a RECL group needs losses at the same context lengths; got {grids}")
    sizes = {np.asarray(a).shape for losses in group.values() for a in losses.values()}
    if len(sizes) != 1:
        raise UserError(f"per-position losses must cover the same positions; got shapes {sorted(sizes)}")
    missing = [c for c in range(c0, lengths[-1] + 1, delta) if c not in lengths]
    if c0 not in lengths or missing:
        raise UserError(f"RECL with c0={c0}, delta={delta} needs losses at {missing or [c0]}; have {lengths}")
    return lengths


def recl(group: GroupLosses, r: float, c0: int = 100, delta: int = 100, threshold: float = 0.01,
         max_context: Mapping[str, int] | None = None) -> dict[str, int]:
    """RECL of every model of the group. The search stops at the longest measured context (a lower bound then).

    ``max_context`` caps a model that cannot see further (the vanilla Transformer at its training length, 128 in
    Table 2.9; ours, inferred): its losses beyond the cap must be those at the cap, and its RECL is at most the cap.
    """
    lengths = _check(group, c0, delta)
    out = {}
    for name in group:
        c = c0
        while c + delta <= lengths[-1] and relative_gain(group, name, c, c + delta, r) >= threshold:
            c += delta
        cap = (max_context or {}).get(name)
        out[name] = min(c, cap) if cap else c
    return out


def recl_table(group: GroupLosses, rs: Sequence[float] = (0.1, 0.5, 1.0), c0: int = 100, delta: int = 100,
               threshold: float = 0.01, max_context: Mapping[str, int] | None = None) -> dict[str, dict[float, int]]:
    """Table 2.9's rows: {model: {r: RECL}}."""
    by_r = {r: recl(group, r, c0, delta, threshold, max_context) for r in rs}
    return {name: {r: by_r[r][name] for r in rs} for name in group}


# -- per-position losses from a model ------------------------------------------------------------------------------

@torch.no_grad()
def window_losses(model: torch.nn.Module, tokens: Tensor, context: int, positions: Tensor,
                  batch_size: int = 64) -> np.ndarray:
    """Strict mode: the loss on each ``tokens[t]`` for t in ``positions`` seeing exactly the
    ``context`` tokens before it, without memory, as a vanilla sliding window. ``model(input_ids, target)`` returns
    an LMOutput whose ``nll`` is [B, T]; a Transformer-XL's memory is switched off for the call."""
    if int(positions.min()) < context:
        raise UserError(f"positions start at {int(positions.min())}, before a full context of {context} tokens")
    saved = {k: getattr(model, k) for k in ("mem_len", "ext_len") if hasattr(model, k)}
    for k in saved:
        setattr(model, k, 0)
    try:
        out = []
        offsets = torch.arange(-context, 1)
        for chunk in positions.split(batch_size):
            windows = tokens[chunk[:, None] + offsets]  # [B, context + 1]
            nll = model(windows[:, :-1], target=windows[:, 1:]).nll
            out.append(nll[:, -1].double())
        return torch.cat(out).numpy()
    finally:
        for k, v in saved.items():
            setattr(model, k, v)


@torch.no_grad()
def memory_losses(model: torch.nn.Module, tokens: Tensor, context: int, positions: Tensor,
                  tgt_len: int) -> np.ndarray:
    """``attn_len`` mode: stream the tokens in segments of ``tgt_len`` with evaluation memory
    M = ``context`` and ``same_length`` (every query attends to the same number of keys, as in the ablation's "Attn
    Len" column). Cheap, but information beyond M can still reach a token through the layers' cached states."""
    saved = {k: getattr(model, k) for k in ("mem_len", "ext_len", "same_length")}
    model.mem_len, model.ext_len, model.same_length = context, 0, True
    try:
        memory, nll = None, []
        stream = tokens[None]
        for beg in range(0, stream.size(1) - 1, tgt_len):
            end = min(beg + tgt_len, stream.size(1) - 1)
            out = model(stream[:, beg:end], target=stream[:, beg + 1:end + 1], memory=memory)
            memory = out.memory
            nll.append(out.nll[0].double())
        per_token = torch.cat(nll)  # loss on tokens[1:]
        return per_token[positions - 1].numpy()
    finally:
        for k, v in saved.items():
            setattr(model, k, v)
