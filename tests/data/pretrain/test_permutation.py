"""Permutation masks (XLNet v1 §2.2-§2.3, built as the released code's `_local_perm`) and
prediction slots (partial prediction, §2.3)."""

from __future__ import annotations

import pytest
import torch

from genlab.data.pretrain.permutation import (
    CLS_ID,
    SEP_ID,
    content_mask,
    local_perm,
    prediction_slots,
    sample_ranks,
    two_half_perm_mask,
)
from genlab.errors import ConfigError

A, B_, C, D, E = 10, 11, 12, 13, 14


def test_c4_golden_example():
    ids = torch.tensor([A, B_, C, D, SEP_ID, E, SEP_ID, CLS_ID])
    masked = torch.zeros(8, dtype=torch.bool)
    masked[[1, 2, 5]] = True
    ranks = torch.tensor([6, 2, 1, 7, 3, 0, 5, 4])
    out = local_perm(ids, masked, ranks)
    expected = torch.tensor([
        [0, 1, 1, 0, 1, 1, 1, 1],
        [0, 1, 0, 0, 1, 0, 1, 1],
        [0, 1, 1, 0, 1, 0, 1, 1],
        [0, 1, 1, 0, 1, 1, 1, 1],
        [0, 0, 0, 0, 0, 0, 1, 1],
        [0, 1, 1, 0, 1, 1, 1, 1],
        [0, 0, 0, 0, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 1, 0],
    ], dtype=torch.float)
    assert torch.equal(out.perm_mask, expected)
    content = expected.clone()
    content[[1, 2, 5], [1, 2, 5]] = 0
    assert torch.equal(content_mask(out.perm_mask), content)
    assert out.is_target.nonzero().flatten().tolist() == [1, 2, 5]
    # reading the masks: target pos1 sees {0,3} ∪ {5,2}; SEP@4 sees {0,3,5,2,1,4}; context pos0 sees {0,3}
    assert set((expected[1] == 0).nonzero().flatten().tolist()) == {0, 3, 5, 2}
    assert set((expected[4] == 0).nonzero().flatten().tolist()) == {0, 3, 5, 2, 1, 4}
    assert set((expected[0] == 0).nonzero().flatten().tolist()) == {0, 3}


def test_c6_paper_figure():
    # order 3 -> 2 -> 4 -> 1 (1-based), all tokens targets; 1 = may attend
    ranks = torch.tensor([3, 1, 0, 2])
    out = local_perm(torch.tensor([A, B_, C, D]), torch.ones(4, dtype=torch.bool), ranks)
    query = 1 - out.perm_mask
    content = 1 - content_mask(out.perm_mask)
    assert content.tolist() == [[1, 1, 1, 1], [0, 1, 1, 0], [0, 0, 1, 0], [0, 1, 1, 1]]
    assert query.tolist() == [[0, 1, 1, 1], [0, 0, 1, 0], [0, 0, 0, 0], [0, 1, 1, 0]]


def random_example(t: int, perm_size: int, g: torch.Generator):
    ids = torch.randint(10, 30, (t,), generator=g)
    n_func = int(torch.randint(0, 4, (), generator=g))
    func_pos = torch.randperm(t, generator=g)[:n_func]
    ids[func_pos] = torch.tensor([SEP_ID, CLS_ID])[torch.randint(0, 2, (n_func,), generator=g)]
    masked = torch.rand(t, generator=g) < 0.4
    ranks = sample_ranks(t, perm_size, generator=g)
    return ids, masked, ranks


@pytest.mark.parametrize("t", [16, 32])
@pytest.mark.parametrize("half", [False, True])
def test_c5_properties(t, half):
    g = torch.Generator().manual_seed(t + half)
    ps = t // 2 if half else t
    for _ in range(25):
        ids, masked, ranks = random_example(t, ps, g)
        out = local_perm(ids, masked, ranks)
        q = out.perm_mask.bool()
        c = content_mask(out.perm_mask).bool()
        functional = (ids == SEP_ID) | (ids == CLS_ID)
        context = ~masked & ~functional
        permuted = ~context
        assert (c <= q).all()  # content-allowed ⊇ query-allowed
        assert not c.diagonal().any()
        assert torch.equal(q.diagonal(), out.is_target)  # query diagonal blocked exactly for targets
        assert q[context][:, permuted].all()  # context rows never see permuted columns
        assert not q[:, context].any()  # everyone sees context
        # among permuted tokens: i sees j iff rank_j < rank_i (targets) or rank_j <= rank_i (SEP/CLS)
        pi, pj = ranks[:, None], ranks[None, :]
        sees = ~q & permuted[:, None] & permuted[None, :]
        want = torch.where(out.is_target[:, None], pj < pi, pj <= pi) & permuted[:, None] & permuted[None, :]
        assert torch.equal(sees, want)
        # chunk structure: chunk r has ranks in [r*ps, (r+1)*ps) and shares the within-chunk pattern
        chunks = ranks.view(-1, ps)
        for r, chunk in enumerate(chunks):
            assert chunk.min() == r * ps and chunk.max() == (r + 1) * ps - 1
            assert torch.equal(chunk - r * ps, chunks[0])


def test_c5_two_halves_and_memory_columns():
    g = torch.Generator().manual_seed(0)
    r = 8
    a = local_perm(*random_example(r, r, g)).perm_mask
    b = local_perm(*random_example(r, r, g)).perm_mask
    full = two_half_perm_mask(a, b)
    assert full[:r, r:].eq(1).all() and full[r:, :r].eq(0).all()
    assert torch.equal(full[:r, :r], a) and torch.equal(full[r:, r:], b)


def test_ranks_uniform_within_chunk_and_invalid_perm_size():
    g = torch.Generator().manual_seed(3)
    ranks = sample_ranks(8, 4, batch_shape=(4000,), generator=g)
    first = ranks[:, 0].bincount(minlength=8).float() / 4000
    assert torch.allclose(first[:4], torch.full((4,), 0.25), atol=0.03) and first[4:].sum() == 0
    with pytest.raises(ConfigError, match="perm_size"):
        sample_ranks(10, 4)


def test_batched_local_perm_equals_per_example():
    g = torch.Generator().manual_seed(5)
    examples = [random_example(16, 16, g) for _ in range(3)]
    stacked = [torch.stack(x) for x in zip(*examples)]
    batch = local_perm(*stacked).perm_mask
    for i, ex in enumerate(examples):
        assert torch.equal(batch[i], local_perm(*ex).perm_mask)


def test_prediction_slots_order_padding_and_overflow():
    ids = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16]])
    is_target = torch.tensor([[0, 1, 0, 1, 1, 0], [1, 0, 0, 0, 0, 0]], dtype=torch.bool)
    s = prediction_slots(ids, is_target, num_predict=4)
    assert s.positions.tolist() == [[1, 3, 4, 0], [0, 0, 0, 0]]
    assert s.target_mask.tolist() == [[1, 1, 1, 0], [1, 0, 0, 0]]
    assert s.target.tolist() == [[6, 8, 9, 0], [11, 0, 0, 0]]
    assert torch.equal(s.target_mapping.argmax(-1)[s.target_mask.bool()], s.positions[s.target_mask.bool()])
    assert s.target_mapping[0, 3].sum() == 0 and s.target_mapping[1, 1:].sum() == 0
    with pytest.raises(ConfigError, match="num_predict"):
        prediction_slots(ids, is_target, num_predict=2)
