"""Step-based runs show optimiser steps of max_steps, also after a resume; epoch-based runs keep epochs."""

from __future__ import annotations

import io
from types import SimpleNamespace

from tqdm import tqdm

from genlab.callbacks.progress import StepProgressBar


def _bar(trainer):
    pb = StepProgressBar(refresh_rate=1)
    pb.train_progress_bar = tqdm(total=None, file=io.StringIO())
    pb._should_update = lambda current, total: True  # the trainer that would enable it is a stand-in here
    pb.get_metrics = lambda trainer, module: {}
    return pb


def test_resumed_step_run_shows_global_step_of_max_steps():
    trainer = SimpleNamespace(max_steps=99, global_step=74, current_epoch=3)
    pb = _bar(trainer)
    pb.on_train_epoch_start(trainer)
    assert (pb.train_progress_bar.n, pb.train_progress_bar.total) == (74, 99)
    assert pb.train_progress_bar.desc.startswith("Steps")
    trainer.global_step = 75
    pb.on_train_batch_end(trainer, None, None, None, batch_idx=274)  # batch index within the epoch is ignored
    assert pb.train_progress_bar.n == 75
    trainer.current_epoch, trainer.global_step = 4, 80  # a new epoch does not reset the bar
    pb.on_train_epoch_start(trainer)
    assert (pb.train_progress_bar.n, pb.train_progress_bar.total) == (80, 99)
