"""Issue 27: SIGTERM / SIGINT / SIGUSR1 (SLURM pre-emption) save a checkpoint of the step in progress, record
status "interrupted" and exit 128 + the signal; the run resumes from that checkpoint."""

from __future__ import annotations

import json
import signal
import time

import pytest

from helpers import TINY_TXL
from reliability.harness import load, start, train

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
