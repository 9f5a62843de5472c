import numpy as np
import pytest

from genlab.data.lm.streams import (
    ResumableSequentialSampler,
    StreamSegments,
    split_streams,
)
from genlab.errors import DataError


def test_ranks_own_disjoint_contiguous_streams_of_the_global_batch():
    tokens = np.arange(103)
    single = split_streams(tokens, n_streams=4)
    ranks = [split_streams(tokens, n_streams=2, rank=r, world_size=2) for r in range(2)]
    np.testing.assert_array_equal(np.concatenate(ranks), single)
    for row in single:  # each row is a contiguous piece of the corpus
        assert (np.diff(row) == 1).all()


def test_every_token_after_the_first_is_predicted_exactly_once():
    rows = split_streams(np.arange(1000), n_streams=3)
    segments = StreamSegments(rows, tgt_len=7)
    targets = np.concatenate([segments[k]["target"].numpy() for k in range(len(segments))], axis=1)
    np.testing.assert_array_equal(targets, rows[:, 1:])
    for k in range(len(segments)):
        item = segments[k]
        np.testing.assert_array_equal(item["target"][:, :-1], item["input_ids"][:, 1:])  # y[t] = x[t+1]
    assert segments.tokens_per_pass == rows[:, 1:].size


def test_extended_context_is_fed_but_not_predicted():
    rows = split_streams(np.arange(200), n_streams=2)
    segments = StreamSegments(rows, tgt_len=5, ext_len=3)
    item = segments[2]
    assert item["input_ids"].shape == (2, 8) and item["target"].shape == (2, 5)
    np.testing.assert_array_equal(item["target"], item["input_ids"][:, 3:] + 1)
    targets = np.concatenate([segments[k]["target"].numpy() for k in range(len(segments))], axis=1)
    np.testing.assert_array_equal(targets, rows[:, 4:])  # the first ext_len tokens are context only


def test_resumable_sampler_starts_once_where_it_stopped():
    sampler = ResumableSequentialSampler(5)
    sampler.start = 3
    assert list(sampler) == [3, 4] and list(sampler) == [0, 1, 2, 3, 4] and len(sampler) == 5


def test_too_few_tokens_for_the_streams_is_a_clear_error():
    with pytest.raises(DataError, match="batch_size"):
        split_streams(np.arange(5), n_streams=4)
