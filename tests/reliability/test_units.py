"""Fast in-process checks of the pieces the subprocess tests exercise end to end."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from genlab.cli import run_dir
from genlab.data.loading.resumable import EpochShuffle
from genlab.errors import ConfigError

pytestmark = pytest.mark.reliability


def test_lock_refuses_a_live_owner_and_takes_over_a_killed_one(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / run_dir.LOCK_FILE).write_text(dead.stdout.strip())  # its process has exited: a stale lock
    run_dir.acquire_lock(tmp_path)
    assert (tmp_path / run_dir.LOCK_FILE).read_text() == str(os.getpid())
    run_dir.release_lock(tmp_path)
    assert not (tmp_path / run_dir.LOCK_FILE).exists()
    (tmp_path / run_dir.LOCK_FILE).write_text(str(os.getppid()))
    with pytest.raises(ConfigError, match=f"pid {os.getppid()}"):
        run_dir.acquire_lock(tmp_path)


def test_partial_checkpoint_writes_are_removed(tmp_path):
    ckpts = tmp_path / "checkpoints"
    ckpts.mkdir()
    (ckpts / ".last.ckpt.abc123.tmp").write_bytes(b"half")
    (ckpts / "last.ckpt").write_bytes(b"whole")
    assert [p.name for p in run_dir.remove_partial_writes(tmp_path)] == [".last.ckpt.abc123.tmp"]
    assert [p.name for p in ckpts.iterdir()] == ["last.ckpt"]


def test_unwritable_run_dir(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(run_dir.RunDirError, match="not writable"):
        run_dir.check_writable(tmp_path / "file" / "run")


def test_epoch_shuffle_resumes_mid_epoch():
    full = EpochShuffle(10, seed=3)
    orders = []
    for epoch in range(2):
        full.set_epoch(epoch)
        orders.append(list(full))
    assert orders[0] != orders[1] and sorted(orders[0]) == list(range(10))
    resumed = EpochShuffle(10, seed=3)
    resumed.set_epoch(1)
    resumed.resume(1, 4)
    assert list(resumed) == orders[1][4:]
    assert list(resumed) == orders[1]  # the skip applies once


def test_disk_error_is_found_behind_wrappers():
    import errno

    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as inner:
            raise RuntimeError("checkpoint failed") from inner
    except RuntimeError as outer:
        assert run_dir.disk_error(outer).errno == errno.ENOSPC
    assert run_dir.disk_error(RuntimeError("other")) is None
    assert torch.tensor(1.0).isfinite()


class _EpochRecorder(torch.utils.data.Sampler):
    """Sampler whose order depends on the epoch Lightning sets, recording which epoch each pass used."""

    def __init__(self, seen):
        self.epoch, self.seen = 0, seen

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        self.seen.append(self.epoch)
        return iter(torch.randperm(8, generator=torch.Generator().manual_seed(self.epoch)).tolist())

    def __len__(self):
        return 8


def _fit_epochs(tmp_path, ckpt_path=None):
    import pytorch_lightning as pl
    from pytorch_lightning.demos.boring_classes import BoringModel, RandomDataset

    from genlab.callbacks.epoch_resume import ResumeAtEpochBoundary

    seen, steps = [], []

    class Model(BoringModel):
        def train_dataloader(self):
            return torch.utils.data.DataLoader(RandomDataset(32, 8), batch_size=2, sampler=_EpochRecorder(seen))

        def on_train_batch_start(self, batch, batch_idx):
            steps.append((self.current_epoch, self.global_step, self.trainer.fit_loop.epoch_loop._batches_that_stepped))

    torch.manual_seed(0)
    model = Model()
    save = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, save_on_train_epoch_end=True, save_top_k=-1,
                                        filename="{epoch}")
    trainer = pl.Trainer(max_steps=8, max_epochs=None, limit_val_batches=0, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[save, ResumeAtEpochBoundary()])
    trainer.fit(model, ckpt_path=ckpt_path)
    return seen, steps, model


def test_resume_from_an_epoch_end_checkpoint_starts_the_next_epoch_as_the_uninterrupted_run(tmp_path):
    """With max_steps, Lightning alone re-entered the saved epoch: the next one got epoch number 2, not 1."""
    seen, steps, model = _fit_epochs(tmp_path / "full")
    assert seen == [0, 1] and [s[0] for s in steps] == [0] * 4 + [1] * 4
    seen_r, steps_r, model_r = _fit_epochs(tmp_path / "resumed", ckpt_path=tmp_path / "full" / "epoch=0.ckpt")
    assert steps_r == steps[4:] and seen_r[-1] == 1
    for a, b in zip(model.parameters(), model_r.parameters()):
        assert torch.equal(a, b)


def test_resume_comparison_is_bit_exact_and_lets_a_nan_buffer_equal_its_copy():
    from reliability.harness import assert_equal_state

    nan_buffer = torch.tensor([float("nan"), 1.0])
    assert_equal_state({"b": nan_buffer}, {"b": nan_buffer.clone()})
    assert_equal_state([torch.tensor([1, 2])], [torch.tensor([1, 2])])
    for other in (torch.tensor([float("nan"), 1.5]), torch.tensor([-0.0, 1.0]), nan_buffer.double()):
        with pytest.raises(AssertionError):
            assert_equal_state({"b": nan_buffer}, {"b": other})
    with pytest.raises(AssertionError):
        assert_equal_state(torch.tensor([0.0]), torch.tensor([-0.0]))
