"""Multi-process launch as on a cluster: ``torchrun --nproc-per-node 2 train.py ... strategy=ddp`` on CPU (gloo).

Lightning must pick up torchrun's environment (2 ranks, no re-launch of its own), and rank 0 alone must write the
run records into the one run directory every rank shares (``hydra.run.dir`` fixed on the command line, as the
README recipe says: each rank composes its own config, so a timestamped directory could differ between ranks).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT, TINY_TXL

TORCHRUN = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")


@pytest.mark.distributed
@pytest.mark.skipif(TORCHRUN is None, reason="torchrun is not installed next to this Python")
def test_torchrun_two_ranks_train_and_rank_zero_alone_writes_the_run_records(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [TORCHRUN, "--standalone", "--nproc-per-node", "2", str(ROOT / "train.py"), *TINY_TXL,
           "strategy=ddp", "trainer.accelerator=cpu", "trainer.devices=2", "trainer.max_steps=4",
           "trainer.val_check_interval=2", "trainer.limit_val_batches=2", "trainer.limit_test_batches=2",
           "trainer.enable_progress_bar=false", "logger=csv", f"hydra.run.dir={run_dir}"]
    # GENLAB_VERBOSE keeps Lightning's info lines: its DDP member line is the proof asserted below
    env = {**os.environ, "GENLAB_OFFLINE": "1", "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1",
           "GENLAB_LOGS": str(tmp_path / "outputs"), "GENLAB_VERBOSE": "1"}
    result = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    # Lightning used torchrun's two processes (its own launcher would have started new ones).
    assert "GLOBAL_RANK: 0, MEMBER: 1/2" in log and "GLOBAL_RANK: 1, MEMBER: 2/2" in log, log[-4000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["status"] == "finished" and "test/ppl" in metrics["metrics"], metrics
    # run.json is written once: a second writer would have recorded itself as a resume.
    run = json.loads((run_dir / "run.json").read_text())
    assert run["resumed_at"] == [], run
    assert (run_dir / "csv" / "metrics.csv").is_file()
    assert not (tmp_path / "outputs").exists(), "a rank wrote outside the shared run directory"
