"""Fast in-process checks of the pieces the subprocess tests exercise end to end."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from genlab.cli import run_dir
from genlab.data.finetune.resumable import EpochShuffle
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
