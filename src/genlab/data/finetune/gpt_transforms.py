"""GPT-1's task-specific input transformations (GPT-1 paper §3.3, Fig. 1): structured inputs serialised
into token sequences with new start / delimiter / extract tokens, as pure functions over token-id lists.

| task             | sequence(s)                                         |
|------------------|-----------------------------------------------------|
| classification   | ``<s> text <e>``                                    |
| entailment       | ``<s> premise $ hypothesis <e>``                    |
| similarity       | ``<s> a $ b <e>`` and ``<s> b $ a <e>``             |
| multiple choice  | one ``<s> document question $ answer_k <e>`` per k  |

The specials are NEW ids after the ordinary vocabulary (``SpecialTokens.after_vocab(V)`` = V, V+1, V+2), never
existing tokens such as ``$``. Sequences are right-padded (:func:`right_pad`), so ``<e>`` is the last real token of
every row and causal attention keeps it blind to padding.

Truncation (``max_len`` = the model's context, counting the specials; the paper gives none except Story Cloze):
* classification: the text keeps its first ``max_len − 2`` tokens;
* pairs (entailment, similarity): longest-first from the end of the longer part (our choice);
* multiple choice: question and answers stay whole, the document loses its end (our choice; document and question
  are concatenated without a delimiter, as the paper's ``[z; q; $; a_k]``); if question + answer alone do not
  fit, the pair is truncated longest-first;
* Story Cloze as released (``transform_roc``): story and ending each cut to ``max_part = n_ctx // 2 − 2 = 254``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

Ids = Sequence[int]


@dataclass(frozen=True)
class SpecialTokens:
    start: int      # <s>   (release: _start_)
    delimiter: int  # $     (release: _delimiter_)
    extract: int    # <e>   (release: _classify_)

    @classmethod
    def after_vocab(cls, vocab_size: int) -> SpecialTokens:
        """The model's special rows: ids ``vocab_size, vocab_size + 1, vocab_size + 2`` (GPTLMHeadModel.special_ids)."""
        return cls(vocab_size, vocab_size + 1, vocab_size + 2)


def _check(max_len: int | None, n_special: int) -> None:
    if max_len is not None and max_len <= n_special:
        raise ValueError(f"max_len={max_len} leaves no room for tokens next to {n_special} special tokens")


def truncate_pair(a: Ids, b: Ids, budget: int) -> tuple[list[int], list[int]]:
    """Drop tokens from the end of the longer of ``a`` and ``b`` (``a`` on ties) until both fit ``budget``."""
    la, lb = len(a), len(b)
    excess = la + lb - budget
    if excess > 0:  # closed form of "remove one token from the longer part, repeatedly"
        even = min(excess, abs(la - lb))  # first the longer part down to the shorter one's length
        la, lb = (la - even, lb) if la >= lb else (la, lb - even)
        rest = excess - even  # then alternately, a first
        la, lb = la - (rest + 1) // 2, lb - rest // 2
    return list(a)[:la], list(b)[:lb]


def classification(text: Ids, special: SpecialTokens, max_len: int | None = None) -> list[int]:
    """``<s> text <e>``."""
    _check(max_len, 2)
    body = list(text) if max_len is None else list(text)[: max_len - 2]
    return [special.start, *body, special.extract]


def entailment(premise: Ids, hypothesis: Ids, special: SpecialTokens, max_len: int | None = None) -> list[int]:
    """``<s> premise $ hypothesis <e>``."""
    _check(max_len, 3)
    p, h = (list(premise), list(hypothesis)) if max_len is None else truncate_pair(premise, hypothesis, max_len - 3)
    return [special.start, *p, special.delimiter, *h, special.extract]


def similarity(a: Ids, b: Ids, special: SpecialTokens, max_len: int | None = None) -> tuple[list[int], list[int]]:
    """Both orders, ``<s> a $ b <e>`` and ``<s> b $ a <e>`` (same truncation in both)."""
    _check(max_len, 3)
    a, b = (list(a), list(b)) if max_len is None else truncate_pair(a, b, max_len - 3)
    return entailment(a, b, special), entailment(b, a, special)


def multiple_choice(document: Ids, question: Ids, answers: Sequence[Ids], special: SpecialTokens,
                    max_len: int | None = None) -> list[list[int]]:
    """One ``<s> document question $ answer_k <e>`` per answer; every choice keeps the same document prefix."""
    _check(max_len, 3)
    z = list(document)
    if max_len is not None:
        longest = max((len(a) for a in answers), default=0)
        z = z[: max(0, max_len - 3 - len(question) - longest)]
    out = []
    for answer in answers:
        q, a = list(question), list(answer)
        if max_len is not None:
            q, a = truncate_pair(q, a, max_len - 3 - len(z))
        out.append(entailment([*z, *q], a, special))
    return out


def story_cloze(story: Ids, endings: Sequence[Ids], special: SpecialTokens, max_part: int = 254) -> list[list[int]]:
    """The release's ``transform_roc``: ``<s> story[:max_part] $ ending_k[:max_part] <e>`` per ending."""
    return [[special.start, *list(story)[:max_part], special.delimiter, *list(e)[:max_part], special.extract]
            for e in endings]


def right_pad(sequences: Sequence[Ids] | Sequence[Sequence[Ids]], pad_id: int = 0,
              length: int | None = None) -> tuple[Tensor, Tensor]:
    """Right-pad to ``length`` (default: the longest sequence): ``(input_ids, lm_mask)`` long tensors of shape
    ``[N, T]`` for a list of sequences or ``[N, K, T]`` for a list of K-sequence groups (choices, the two
    similarity orders); ``lm_mask`` is 1 on real tokens (specials included), 0 on padding. The pad id is never
    seen by a real position (causal attention), any valid id works."""
    grouped = bool(sequences) and not isinstance(sequences[0][0], int)
    flat = [s for group in sequences for s in group] if grouped else list(sequences)
    longest = max((len(s) for s in flat), default=0)
    t = longest if length is None else length
    if longest > t:
        raise ValueError(f"a sequence of {longest} tokens does not fit length={t}")
    ids = torch.full((len(flat), t), pad_id, dtype=torch.long)
    mask = torch.zeros((len(flat), t), dtype=torch.long)
    for i, s in enumerate(flat):
        ids[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
        mask[i, : len(s)] = 1
    if grouped:
        k = len(sequences[0])
        if any(len(group) != k for group in sequences):
            raise ValueError("every group needs the same number of sequences")
        ids, mask = ids.view(len(sequences), k, t), mask.view(len(sequences), k, t)
    return ids, mask


def extract_index(input_ids: Tensor, extract_id: int) -> Tensor:
    """Position of the first ``<e>`` in each row (``[...]`` for ``input_ids [..., T]``); every row must have one."""
    hit = input_ids == extract_id
    if not bool(hit.any(-1).all()):
        raise ValueError(f"a row has no extract token (id {extract_id})")
    return hit.int().argmax(-1)
