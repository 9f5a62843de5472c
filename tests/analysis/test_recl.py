"""RECL (relative effective context length, Yang's thesis §2.1.4, Table 2.9) on synthetic loss arrays whose RECLs are
computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from genlab.analysis.recl import hard_positions, memory_losses, recl, recl_table, relative_gain, window_losses
from genlab.errors import UserError


def const(value: float, n: int = 10) -> np.ndarray:
    return np.full(n, value)


def hand_example():
    """A hand example: A's loss drops 5% (in perplexity) from c to c+delta and 0.5% from c+delta to c+2*delta;
    B is worse than A everywhere, so the baseline is A's and B never gains."""
    a = {100: const(2.0), 200: const(2.0 + math.log(0.95)), 300: const(2.0 + math.log(0.95) + math.log(0.995))}
    b = {c: const(3.0) for c in (100, 200, 300)}
    return {"A": a, "B": b}


def test_hand_example_recl_is_c_plus_delta():
    group = hand_example()
    assert relative_gain(group, "A", 100, 200, r=1.0) == pytest.approx(0.05)
    assert relative_gain(group, "A", 200, 300, r=1.0) == pytest.approx(0.005)
    assert recl(group, r=1.0) == {"A": 200, "B": 100}
    assert recl(group, r=1.0, threshold=0.001) == {"A": 300, "B": 100}  # search stops at the longest context


def test_losses_above_the_baseline_are_truncated_to_it():
    """min(b, l): B's long context helps on position 0 (0.5 < 1) and hurts on position 1 (3.0); only the gain
    counts, f_B = (0.5 + 1) / 2, g = 1 - exp(0.75 - 1). Without the truncation the mean (1.75) would be a loss."""
    group = {"A": {100: np.array([1.0, 1.0]), 200: np.array([1.0, 1.0])},
             "B": {100: np.array([1.5, 1.5]), 200: np.array([0.5, 3.0])}}
    assert relative_gain(group, "B", 100, 200, r=1.0) == pytest.approx(1 - math.exp(-0.25))
    assert relative_gain(group, "A", 100, 200, r=1.0) == 0.0
    assert recl(group, r=1.0) == {"A": 100, "B": 200}


def test_hard_positions_come_from_the_baseline_at_the_short_context():
    """b(100) = [4, 2, 1, 1] (A's first two, then ties): r = 0.25 keeps position 0 only. B's own worst short-context
    position is 3, where its long context improves; that must not count. A improves position 0 by one nat."""
    group = {"A": {100: np.array([4.0, 2.0, 1.0, 1.0]), 200: np.array([3.0, 2.0, 1.0, 1.0])},
             "B": {100: np.array([5.0, 2.0, 1.0, 6.0]), 200: np.array([5.0, 2.0, 1.0, 0.1])}}
    assert list(hard_positions(np.array([4.0, 2.0, 1.0, 1.0]), 0.25)) == [0]
    assert list(hard_positions(np.array([4.0, 2.0, 1.0, 1.0]), 0.5)) == [0, 1]
    assert relative_gain(group, "A", 100, 200, r=0.25) == pytest.approx(1 - math.exp(-1))
    assert relative_gain(group, "B", 100, 200, r=0.25) == 0.0
    # over all positions B's gain at position 3 counts: f = (4 + 2 + 1 + 0.1) / 4 against mean(b) = 2
    assert relative_gain(group, "B", 100, 200, r=1.0) == pytest.approx(1 - math.exp(7.1 / 4 - 2))
    assert recl_table(group, rs=(0.25, 1.0)) == {"A": {0.25: 200, 1.0: 200}, "B": {0.25: 100, 1.0: 200}}


def test_capped_model_and_bad_groups():
    group = hand_example()
    assert recl(group, r=1.0, max_context={"A": 128}) == {"A": 128, "B": 100}
    with pytest.raises(UserError, match="same context lengths"):
        recl({"A": {100: const(1.0), 200: const(1.0)}, "B": {100: const(1.0)}}, r=1.0)
    with pytest.raises(UserError, match="needs losses at"):
        recl({"A": {100: const(1.0), 300: const(1.0)}}, r=1.0)
    with pytest.raises(UserError, match="same positions"):
        recl({"A": {100: const(1.0, 3), 200: const(1.0, 4)}}, r=1.0)
    with pytest.raises(UserError, match="r=0"):
        recl(group, r=0.0)


class CountingLM(torch.nn.Module):
    """A fake LM whose loss on a token is 1 / (number of tokens it sees, memory included): strict windows and
    memory give known losses."""

    def __init__(self):
        super().__init__()
        self.mem_len, self.ext_len, self.same_length = 0, 0, False

    def forward(self, input_ids, target=None, memory=None):
        from genlab.models.lm_output import LMOutput

        seen_before = 0 if memory is None else memory.size(1)
        seen = seen_before + torch.arange(1, input_ids.size(1) + 1, dtype=torch.float64)
        nll = (1.0 / seen).expand(input_ids.size(0), -1)
        seq = input_ids if memory is None else torch.cat([memory, input_ids], 1)
        keep = seq[:, -self.mem_len:] if self.mem_len else None
        return LMOutput(nll=nll, memory=keep, logits=None)


def test_window_and_memory_losses_see_the_asked_context():
    model, tokens = CountingLM(), torch.arange(40)
    positions = torch.arange(20, 40)
    np.testing.assert_allclose(window_losses(model, tokens, 8, positions, batch_size=7), np.full(20, 1 / 8))
    assert model.mem_len == 0  # restored
    # segments of 5 with memory 8: from the third segment on, token j of a segment sees 8 + j + 1 tokens
    got = memory_losses(model, tokens, 8, positions, tgt_len=5)
    expected = [1.0 / (8 + (t - 1) % 5 + 1) for t in range(20, 40)]
    np.testing.assert_allclose(got, expected)
    with pytest.raises(UserError, match="before a full context"):
        window_losses(model, tokens, 30, positions)
