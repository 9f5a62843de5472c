"""Factorization-order masks and partial-prediction slots for XLNet (XLNet paper §2.3; masks as the
authors' ``_local_perm``).

``local_perm`` is the official ``_local_perm`` rule, vectorised over leading batch dims ([..., T]):

* ranks: T/perm_size chunks ordered left to right, all sharing one within-chunk shuffle
  (``rank(r·ps + p) = r·ps + π(p)``);
* context = not masked and not SEP/CLS; target = masked and not SEP/CLS; permuted = not context;
* ``rev = -1`` for context else rank; ``self_rev = rev`` for targets else ``rev + 1``;
* query mask ``Q_ij = permuted_j and self_rev_i <= rev_j`` (1 = i may NOT attend j);
  content mask = Q with the diagonal freed.

The span sampler that produces ``is_masked`` lives with the pretraining data pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from genlab.errors import ConfigError

SEP_ID = 4
CLS_ID = 3


@dataclass
class PermMasks:
    perm_mask: Tensor  # [..., T, T] float, query-stream mask (the model's ``perm_mask`` input)
    is_target: Tensor  # [..., T] bool, masked and not SEP/CLS
    ranks: Tensor  # [..., T] long, position in the factorization order


def sample_ranks(seq_len: int, perm_size: int, batch_shape: tuple[int, ...] = (),
                 generator: torch.Generator | None = None, device: torch.device | None = None) -> Tensor:
    """Official factorization order: one uniform shuffle π of [0, perm_size) shared by every chunk."""
    if perm_size <= 0 or seq_len % perm_size:
        raise ConfigError(f"perm_size={perm_size} must divide the sequence length {seq_len}")
    pi = torch.rand(*batch_shape, perm_size, generator=generator, device=device).argsort(-1)
    chunk_start = torch.arange(0, seq_len, perm_size, device=device)[:, None]  # [T/ps, 1]
    return (chunk_start + pi[..., None, :]).flatten(-2)


def _query_blocked(input_ids: Tensor, is_masked: Tensor, ranks: Tensor, sep_id: int, cls_id: int
                   ) -> tuple[Tensor, Tensor]:
    """(blocked [..., T, T] bool, is_target [..., T]) by the rule in the module docstring."""
    functional = (input_ids == sep_id) | (input_ids == cls_id)
    is_target, context = is_masked.bool() & ~functional, ~is_masked.bool() & ~functional
    rev = torch.where(context, torch.full_like(ranks, -1), ranks)
    self_rev = torch.where(is_target, rev, rev + 1)
    return ~context[..., None, :] & (self_rev[..., :, None] <= rev[..., None, :]), is_target


def targets(input_ids: Tensor, is_masked: Tensor, sep_id: int = SEP_ID, cls_id: int = CLS_ID) -> Tensor:
    """is_target [..., T] bool: masked and not SEP/CLS (what :func:`local_perm` returns, without the mask)."""
    return is_masked.bool() & (input_ids != sep_id) & (input_ids != cls_id)


def local_perm(input_ids: Tensor, is_masked: Tensor, ranks: Tensor, sep_id: int = SEP_ID,
               cls_id: int = CLS_ID) -> PermMasks:
    """Query-stream permutation mask from the sampled targets and ranks (all [..., T])."""
    blocked, is_target = _query_blocked(input_ids, is_masked, ranks, sep_id, cls_id)
    return PermMasks(blocked.float(), is_target, ranks)


def content_mask(perm_mask: Tensor) -> Tensor:
    """Content-stream mask: the query mask with the diagonal freed (each position sees itself)."""
    eye = torch.eye(perm_mask.shape[-1], dtype=torch.bool, device=perm_mask.device)
    return perm_mask.masked_fill(eye, 0.0)


def two_half_perm_mask(reuse: Tensor, rest: Tensor) -> Tensor:
    """Join per-half masks [..., R, R] and [..., N, N] into [..., R+N, R+N]: the reuse half may not see the
    non-reuse half (its states become the next segment's memory), the non-reuse half sees all of the reuse half."""
    r, n = reuse.shape[-1], rest.shape[-1]
    top = torch.cat([reuse, reuse.new_ones(*reuse.shape[:-1], n)], dim=-1)
    bottom = torch.cat([rest.new_zeros(*rest.shape[:-1], r), rest], dim=-1)
    return torch.cat([top, bottom], dim=-2)


@dataclass
class PredictionSlots:
    target_mapping: Tensor  # [..., P, T] float one-hot rows, zero rows for padding slots
    target: Tensor  # [..., P] long token ids (0 on padding slots)
    target_mask: Tensor  # [..., P] float, 1 = real slot
    positions: Tensor  # [..., P] long position of each slot (0 on padding slots)


def slot_targets(input_ids: Tensor, is_target: Tensor, num_predict: int) -> tuple[Tensor, Tensor, Tensor]:
    """(positions [..., P] long, target ids [..., P] long, target_mask [..., P] float): real slots first in ascending
    position order, then zero padding up to num_predict (partial prediction, XLNet paper Sec. 2.3)."""
    t = is_target.shape[-1]
    count = int(is_target.sum(-1).max()) if is_target.numel() else 0
    if count > num_predict:
        raise ConfigError(f"num_predict={num_predict} is smaller than the {count} targets of an example; "
                          "raise num_predict or sample fewer targets")
    order = torch.arange(t, device=is_target.device)
    key = torch.where(is_target.bool(), order, order + t)  # targets first, each group ascending
    idx = key.argsort(-1)[..., :num_predict]
    if num_predict > t:
        idx = torch.cat([idx, idx.new_zeros(*idx.shape[:-1], num_predict - t)], dim=-1)
    valid = is_target.bool().gather(-1, idx.clamp_max(t - 1)) & (torch.arange(num_predict, device=idx.device) < t)
    positions = torch.where(valid, idx, torch.zeros_like(idx))
    target = torch.where(valid, input_ids.gather(-1, positions), torch.zeros_like(positions))
    return positions, target, valid.float()


def slot_mapping(positions: Tensor, target_mask: Tensor, seq_len: int) -> Tensor:
    """target_mapping [..., P, T] float: the one-hot row of each slot's position, a zero row on padding slots."""
    return torch.nn.functional.one_hot(positions, seq_len).to(target_mask.dtype) * target_mask[..., None]


def prediction_slots(input_ids: Tensor, is_target: Tensor, num_predict: int) -> PredictionSlots:
    """The slots of :func:`slot_targets` with their one-hot mapping."""
    positions, target, target_mask = slot_targets(input_ids, is_target, num_predict)
    return PredictionSlots(slot_mapping(positions, target_mask, is_target.shape[-1]), target, target_mask, positions)


# -- dense inputs built where the model runs -------------------------------------------------------------------------
# A loader ships the integers of a batch (ranks, is_target, slot positions: a few hundred KB); the [B, T, T] masks
# (1 MB per 512-token row in float32) are built from them by the task, on the accelerator, after the transfer.

def reuse_half_mask(seq_len: int, reuse_len: int, device: torch.device | None = None) -> Tensor:
    """[T, T] float: the reuse half may not see the non-reuse half, everything else visible (the DAE mask, and
    :func:`two_half_perm_mask` of two all-visible halves)."""
    first = torch.arange(seq_len, device=device) < reuse_len
    return (first[:, None] & ~first[None, :]).float()


def plm_perm_mask(input_ids: Tensor, is_target: Tensor, ranks: Tensor, reuse_len: int, sep_id: int = SEP_ID,
                  cls_id: int = CLS_ID) -> Tensor:
    """[B, T, T] float ``perm_mask`` of a two-half example: per half :func:`local_perm` (``ranks`` per half), joined
    by :func:`two_half_perm_mask`. ``is_target`` stands for ``is_masked`` (they differ only on SEP/CLS, which the
    rule treats alike either way)."""
    blocked, _ = _query_blocked(input_ids, is_target, ranks, sep_id, cls_id)
    first = torch.arange(input_ids.shape[-1], device=input_ids.device) < reuse_len
    same_half = first[:, None] == first[None, :]
    return torch.where(same_half, blocked, first[:, None]).float()


def plm_dense_inputs(batch: dict[str, Any]) -> dict[str, Tensor]:
    """``perm_mask`` and ``target_mapping`` of a PLM batch from its integer keys (input_ids, is_target, ranks,
    target_positions, target_mask, reuse_len); device-agnostic, equal to the host construction."""
    ids = batch["input_ids"]
    return {"perm_mask": plm_perm_mask(ids, batch["is_target"], batch["ranks"], int(batch["reuse_len"])),
            "target_mapping": slot_mapping(batch["target_positions"], batch["target_mask"], ids.shape[-1])}
