"""Loader workers change nothing in what a resumable sampler yields: the multi-process DataLoader iterator calls
``iter(sampler)`` twice when it is created and drops the first, which used to spend a resume offset and a pass."""

from __future__ import annotations

import pytest
from torch.utils.data import DataLoader, Dataset

from genlab.data.lm.bptt import VariableBPTTSampler
from genlab.data.lm.streams import ResumableSequentialSampler
from genlab.data.loading.resumable import EpochShuffle
from genlab.data.pretrain.datamodule import PassSampler


class _Echo(Dataset):
    def __getitem__(self, item):
        return item


def _pass_sampler(resume: bool) -> PassSampler:
    s = PassSampler(6)
    if resume:
        s.pass_idx, s.start = 1, 4
    return s


def _epoch_shuffle(resume: bool) -> EpochShuffle:
    s = EpochShuffle(6, seed=3)
    if resume:
        s.resume(0, 4)
    return s


def _sequential(resume: bool) -> ResumableSequentialSampler:
    s = ResumableSequentialSampler(6)
    if resume:
        s.start = 4
    return s


def _bptt(resume: bool) -> VariableBPTTSampler:
    s = VariableBPTTSampler(200, 20, 5, seed=3)
    if resume:
        s.resume = (0, 3)
    return s


def _passes(make, resume: bool, **loader) -> list[list]:
    data = DataLoader(_Echo(), batch_size=None, sampler=make(resume), **loader)
    return [[tuple(x) if isinstance(x, list | tuple) else int(x) for x in data] for _ in range(2)]


@pytest.mark.parametrize("make", [_pass_sampler, _epoch_shuffle, _sequential, _bptt],
                         ids=["pass", "epoch_shuffle", "sequential", "bptt"])
@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "respawned"])
def test_workers_yield_what_the_main_process_yields(make, persistent):
    for resume in (False, True):
        alone = _passes(make, resume)
        assert _passes(make, resume, num_workers=2, persistent_workers=persistent) == alone
    fresh, resumed = _passes(make, False), _passes(make, True)
    assert resumed[0] != fresh[0] and len(resumed[1]) == len(fresh[1])  # the resume skipped, once
