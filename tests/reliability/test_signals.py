"""Issue 27: SIGTERM / SIGINT / SIGUSR1 (SLURM pre-emption) save a checkpoint of the step in progress, record
status "interrupted" and exit 128 + the signal; the run resumes from that checkpoint."""

from __future__ import annotations

import json
import signal
import time

import pytest

from helpers import TINY_TXL
from reliability.harness import assert_equal_state, kill_at, load, losses, start, train

pytestmark = pytest.mark.reliability

RUN = [*TINY_TXL, "callbacks.checkpoint.every_n_train_steps=2",
       "trainer.val_check_interval=null", "trainer.limit_val_batches=0", "test_after_fit=false", "logger=csv",
       "trainer.enable_progress_bar=false", "trainer.log_every_n_steps=1", "trainer.max_epochs=null",
       "trainer.check_val_every_n_epoch=null"]


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT", "SIGUSR1"])
def test_signal_checkpoints_current_step_and_exits_nonzero(sig, tmp_path):
    run = tmp_path / "run"
    proc = start(run, *RUN, "trainer.max_steps=100000")
    last = run / "checkpoints" / "last.ckpt"
    deadline = time.monotonic() + 400
    while not last.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + getattr(signal, sig), err[-3000:]
    assert "Traceback" not in err
    record = json.loads((run / "metrics.json").read_text())
    assert record["status"] == "interrupted"
    step = load(last)["global_step"]
    assert f"stopped at step {step}," in record["error"]  # the checkpoint holds the step the signal interrupted
    assert not (run / ".lock").exists()

    resumed = train(run, *RUN, f"trainer.max_steps={step + 2}", "ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert load(last)["global_step"] == step + 2
    assert json.loads((run / "metrics.json").read_text())["status"] == "finished"


@pytest.mark.parametrize("sig", ["SIGINT", "SIGUSR1"])
def test_signal_checkpoint_resumes_bit_exactly(sig, tmp_path):
    """Ctrl-C and SLURM's pre-emption signal, delivered at a known step: the checkpoint written on the way out
    resumes to exactly the uninterrupted run (weights, optimiser and scheduler state, logged losses)."""
    args = [*RUN, "trainer.max_steps=6"]
    run = tmp_path / "run"
    stopped = train(run, *args, *kill_at(3, sig))  # the run signals itself as the batch of step 3 starts
    assert stopped.returncode == 128 + getattr(signal, sig), stopped.stderr[-3000:]
    assert load(run / "checkpoints" / "last.ckpt")["global_step"] == 4  # that batch finished, then saved
    resumed = train(run, *args, "ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    full = train(tmp_path / "full", *args)
    assert full.returncode == 0, full.stderr[-3000:]

    a, b = load(tmp_path / "full" / "checkpoints" / "last.ckpt"), load(run / "checkpoints" / "last.ckpt")
    assert a["global_step"] == b["global_step"] == 6
    for key in ("state_dict", "optimizer_states", "lr_schedulers"):
        assert_equal_state(a.get(key), b.get(key), key)
    assert losses(tmp_path / "full") == losses(run)  # every step logged once, before or after the signal
