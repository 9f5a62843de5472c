"""Masked-LM corruption and BERT examples (BERT's recipe; the DAE baseline of XLNet paper §3.7) on the same streams and
A/B sampler as XLNet.

BERT layout: ``<cls> A <sep> B <sep>`` (CLS first), token types 0 for CLS/A/first SEP and 1 for B/second SEP,
NSP label 1 = B is the true continuation (the XLNet convention; HF BERT uses 0 for "is next").
Corruption picks 15% of the non-special positions (capped by ``max_predictions``), token by token, whole words
together, or at the positions of the XLNet span sampler (DAE ``selection=xlnet_spans``); of the picked positions
80% become ``<mask>``, 10% a random ordinary piece and 10% stay unchanged.

Funnel-Transformer's recipe (Dai thesis §5.2.1, §5.3, and the authors' code) is the same example with three changes,
all options here: the [CLS] token type is 2 (``cls_type``; it is "same segment" as every token in the relative
segment term); exactly ``num_targets`` targets (85 of 512) whatever the length; random replacements drawn from
the whole vocabulary, special ids included (``random_ids="any"``); and, with ``truncate_seq`` pooling of stride s,
the last s tokens rewritten to ``<sep> <pad>...`` (:func:`rewrite_tail`) so the tokens that pooling drops and
up-sampling zeroes are padding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from genlab.data.pretrain.xlnet_examples import (
    CLS_ID,
    MASK_ID,
    PAD_ID,
    SEP_ID,
    SPECIAL_IDS,
    split_a_and_b,
)
from genlab.errors import ConfigError

SELECTIONS = ("token", "whole_word", "xlnet_spans")
RANDOM_IDS = ("ordinary", "any")


@dataclass(frozen=True)
class MaskingConfig:
    prob: float = 0.15
    max_predictions: int = 77  # round(0.15 * 512)
    mask_frac: float = 0.8
    random_frac: float = 0.1
    selection: str = "token"  # token | whole_word | xlnet_spans (DAE only)
    num_targets: int | None = None  # exactly this many targets per example (Funnel: 85 of 512); None = prob·T
    random_ids: str = "ordinary"  # ordinary: a random non-special piece (BERT) | any: any of the vocab_size ids

    def __post_init__(self):
        if self.selection not in SELECTIONS:
            raise ConfigError(f"masking selection={self.selection!r} must be one of {SELECTIONS}.")
        if self.random_ids not in RANDOM_IDS:
            raise ConfigError(f"masking random_ids={self.random_ids!r} must be one of {RANDOM_IDS}.")
        if self.num_targets is not None and (self.num_targets < 1 or self.selection != "token"):
            raise ConfigError(f"masking num_targets={self.num_targets} needs selection=token and a count >= 1 "
                              "(or null for the prob-based budget).")
        if not 0 < self.prob <= 1 or self.mask_frac + self.random_frac > 1 or min(self.mask_frac, self.random_frac) < 0:
            raise ConfigError("masking: need 0 < prob <= 1 and mask_frac + random_frac <= 1 (both >= 0).")


def special_mask(ids: np.ndarray) -> np.ndarray:
    return np.isin(ids, SPECIAL_IDS)


def choose_positions(
    ids: np.ndarray, is_word_start: np.ndarray, cfg: MaskingConfig, rng: np.random.Generator
) -> np.ndarray:
    """Sorted positions to predict: ``min(max_predictions, max(1, round(prob·T)))`` of the non-special ones, or
    exactly ``num_targets`` of them when set (fewer only if the example has fewer non-special positions).

    ``whole_word``: a word is a word-start piece plus the pieces after it; words are added whole in random order
    while they fit the budget (BERT's whole-word masking on SentencePiece pieces).
    """
    cand = np.flatnonzero(~special_mask(ids))
    if cfg.num_targets is not None:
        budget = min(cfg.num_targets, len(cand))
    else:
        budget = min(cfg.max_predictions, max(1, int(round(len(ids) * cfg.prob))), len(cand))
    if cfg.selection != "whole_word":
        return np.sort(rng.choice(cand, budget, replace=False))
    starts = is_word_start[ids[cand]] | np.r_[True, np.diff(cand) > 1]  # a special token also ends a word
    groups = np.split(cand, np.flatnonzero(starts)[1:])
    chosen: list[np.ndarray] = []
    count = 0
    for g in rng.permutation(len(groups)):
        if count + len(groups[g]) <= budget:
            chosen.append(groups[g])
            count += len(groups[g])
        if count == budget:
            break
    return np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, dtype=np.int64)


def corrupt(
    ids: np.ndarray, positions: np.ndarray, cfg: MaskingConfig, vocab_size: int, rng: np.random.Generator
) -> np.ndarray:
    """80% ``<mask>``, ``random_frac`` a random id, the rest unchanged (independently per position). The random id is
    a non-special piece (``random_ids=ordinary``) or any id of the vocabulary (``any``: the Funnel code; it may be a
    special id or the original token)."""
    out = ids.copy()
    u = rng.random(len(positions))
    to_mask = positions[u < cfg.mask_frac]
    to_rand = positions[(u >= cfg.mask_frac) & (u < cfg.mask_frac + cfg.random_frac)]
    out[to_mask] = MASK_ID
    low = 0 if cfg.random_ids == "any" else len(SPECIAL_IDS)
    out[to_rand] = rng.integers(low, vocab_size, size=len(to_rand))
    return out


def mlm_labels(ids: np.ndarray, positions: np.ndarray, ignore_index: int = -100) -> np.ndarray:
    labels = np.full(len(ids), ignore_index, dtype=np.int64)
    labels[positions] = ids[positions]
    return labels


def bert_steps_per_pass(row_len: int, seq_len: int) -> int:
    tot = seq_len - 3
    return 0 if row_len <= tot else (row_len - tot - 1) // tot + 1  # need s·tot + tot < row_len


def build_bert_example(
    row_tok: np.ndarray, row_sid: np.ndarray, step: int, seq_len: int, random_b_prob: float, rng: np.random.Generator,
    cls_type: int = 0,
) -> tuple[np.ndarray, np.ndarray, int]:
    """``(ids [T], token_type_ids [T], nsp_label)`` from the row's tokens starting at ``step·(T−3)``; the [CLS]
    token type is ``cls_type`` (BERT 0, Funnel 2)."""
    tot = seq_len - 3
    pair = split_a_and_b(row_sid, step * tot, tot, rng, random_b_prob)
    if pair is None:
        raise ConfigError(f"BERT step {step} runs past the end of a stream of {len(row_tok)} tokens.")
    a, b = row_tok[pair.a_begin : pair.a_end], row_tok[pair.b_begin : pair.b_end]
    ids = np.concatenate([[CLS_ID], a, [SEP_ID], b, [SEP_ID]]).astype(np.int64)
    types = np.concatenate([np.zeros(len(a) + 2, np.int64), np.ones(len(b) + 1, np.int64)])
    types[0] = cls_type
    return ids, types, pair.label


def rewrite_tail(ids: np.ndarray, n: int) -> np.ndarray:
    """The last ``n`` tokens replaced by ``<sep>`` and ``n - 1`` ``<pad>`` (Funnel with ``truncate_seq`` and pooling
    stride ``n`` = 2^(blocks-1), as the authors' code: the tokens truncation drops and up-sampling zeroes become
    padding; the token types stay, the original last tokens of B are lost). ``n = 0`` returns ``ids``."""
    if n <= 0:
        return ids
    if n >= len(ids) - 1:
        raise ConfigError(f"data.tail_pad={n} leaves no room in a {len(ids)}-token example; lower it.")
    out = ids.copy()
    out[-n] = SEP_ID
    out[len(ids) - n + 1:] = PAD_ID
    return out
