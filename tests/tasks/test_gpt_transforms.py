"""GPT-1 input transformations (Radford et al., 2018, §3.3, Figure 1). The module lives in the data layer
(genlab.data.finetune.gpt_transforms); its tests sit beside the GPT objective that consumes its output."""

from __future__ import annotations

import random

import pytest
import torch

from genlab.data.finetune.gpt_transforms import (
    SpecialTokens,
    classification,
    entailment,
    extract_index,
    multiple_choice,
    right_pad,
    similarity,
    story_cloze,
    truncate_pair,
)

V = 40478
SP = SpecialTokens.after_vocab(V)
S, D, E = SP.start, SP.delimiter, SP.extract


def test_builders_produce_exactly_the_papers_layouts():
    """Check 10."""
    assert classification([1, 2, 3], SP) == [S, 1, 2, 3, E]
    assert entailment([1, 2], [3, 4, 5], SP) == [S, 1, 2, D, 3, 4, 5, E]
    assert similarity([1, 2], [3], SP) == ([S, 1, 2, D, 3, E], [S, 3, D, 1, 2, E])
    assert multiple_choice([1, 2], [3], [[4], [5, 6]], SP) == [[S, 1, 2, 3, D, 4, E], [S, 1, 2, 3, D, 5, 6, E]]


def test_story_cloze_truncates_each_part_at_254_tokens():
    """Check 10: the release's transform_roc, max_len = n_ctx // 2 − 2 = 254 per part."""
    story, ending = list(range(300)), list(range(1000, 1300))
    seq = story_cloze(story, [ending, [7]], SP)
    assert seq[0] == [S, *story[:254], D, *ending[:254], E] and len(seq[0]) == 511
    assert seq[1] == [S, *story[:254], D, 7, E]


def test_specials_are_new_ids_and_entailment_is_exact():
    """Check 23: <s> $ <e> = 40478, 40479, 40480 (never an existing BPE id such as '$</w>'); a hand-made
    entailment example is exactly [40478] + enc(p) + [40479] + enc(h) + [40480]."""
    assert (S, D, E) == (40478, 40479, 40480)
    assert min(S, D, E) >= V  # no ordinary token ('$</w>' included, whatever its id < V) doubles as a special
    p, h = [12, 1012, 99], [7, 8]
    assert entailment(p, h, SP) == [40478] + p + [40479] + h + [40480]


def test_extract_index_is_the_last_real_position_of_every_right_padded_row():
    """Check 23: first occurrence of <e> = len − 1 for every row."""
    rows = [entailment([1] * n, [2] * m, SP) for n, m in ((3, 4), (1, 1), (6, 2))]
    ids, mask = right_pad(rows, pad_id=0)
    assert ids.shape == (3, 11) and torch.equal(mask.sum(-1), torch.tensor([len(r) for r in rows]))
    assert torch.equal(extract_index(ids, E), mask.sum(-1) - 1)
    with pytest.raises(ValueError, match="no extract"):
        extract_index(torch.zeros(1, 3, dtype=torch.long), E)


def test_right_pad_groups_choices():
    groups = [multiple_choice([1, 2, 3], [4], [[5], [6, 7]], SP), multiple_choice([1], [4], [[5], [6]], SP)]
    ids, mask = right_pad(groups, pad_id=0, length=10)
    assert ids.shape == mask.shape == (2, 2, 10)
    assert ids[0, 1, :9].tolist() == groups[0][1] and mask[0, 1].tolist() == [1] * 9 + [0]
    with pytest.raises(ValueError, match="fit"):
        right_pad(groups, length=5)


def reference_truncate(a, b, budget):
    """The rule as stated: drop the last token of the longer part (a on ties) one at a time."""
    a, b = list(a), list(b)
    while len(a) + len(b) > budget:
        if len(a) >= len(b):
            a.pop()
        else:
            b.pop()
    return a, b


def test_pair_truncation_closed_form_equals_the_one_at_a_time_rule():
    rng = random.Random(0)
    for _ in range(500):
        a, b = list(range(rng.randint(0, 30))), list(range(100, 100 + rng.randint(0, 30)))
        budget = rng.randint(0, 50)
        assert truncate_pair(a, b, budget) == reference_truncate(a, b, budget)


def test_max_len_is_respected_and_multiple_choice_cuts_the_document_end():
    assert classification(list(range(20)), SP, max_len=8) == [S, *range(6), E]
    assert len(entailment(list(range(20)), list(range(5)), SP, max_len=12)) == 12
    a, b = similarity(list(range(9)), [50, 51], SP, max_len=9)
    assert a == [S, 0, 1, 2, 3, D, 50, 51, E] and b == [S, 50, 51, D, 0, 1, 2, 3, E]
    doc, q = list(range(100)), [500, 501]
    seqs = multiple_choice(doc, q, [[600], [700, 701, 702]], SP, max_len=16)
    # every choice keeps the same document prefix; question and answers whole
    assert seqs[0] == [S, *range(8), 500, 501, D, 600, E]
    assert seqs[1] == [S, *range(8), 500, 501, D, 700, 701, 702, E] and len(seqs[1]) == 16
    long_answer = multiple_choice(doc, q, [list(range(900, 930))], SP, max_len=16)[0]
    assert len(long_answer) == 16 and long_answer[1:3] == [500, 501]  # no document left, the pair is truncated
