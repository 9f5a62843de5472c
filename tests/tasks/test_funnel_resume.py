"""Funnel-Transformer pretraining resumes exactly: a real ``train.py`` is killed with SIGKILL after a checkpoint,
resumed from that checkpoint, and its final weights and optimiser state equal an uninterrupted run's (MLM with the
Funnel example pipeline, and ELECTRA, whose Gumbel sampling draws from the global RNG)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
STEPS = 9
SMALL = ["data.batch_size=4", "data.eval_batch_size=4", "data.seq_len=32", "data.masking.num_targets=5",
         "model.block_sizes=[1,1,1]", "model.block_repeats=[1,1,1]", f"trainer.max_steps={STEPS}",
         "trainer.limit_val_batches=0", "test_after_fit=false", "logger=none", "callbacks.checkpoint.monitor=null",
         "callbacks.checkpoint.every_n_train_steps=3", "trainer.enable_progress_bar=false", "task.scheduler.warmup_steps=3"]
PRESETS = {"mlm": "funnel_wiki_b1_1_1_mlm_mini", "electra": "funnel_b6_6_6_electra_mini"}


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", WANDB_MODE="disabled", GENLAB_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return env


def _train(run_dir: Path, preset: str, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "train.py", f"experiment={preset}", "seed=3", f"hydra.run.dir={run_dir}", *SMALL, *extra]
    return subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _finish(proc: subprocess.Popen) -> None:
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out.decode()[-3000:]


def _kill_after_first_checkpoint(proc: subprocess.Popen, ckpt_dir: Path) -> None:
    """SIGKILL as soon as a mid-run checkpoint exists (checkpoints are written atomically, so it is whole)."""
    deadline = time.monotonic() + 600
    while not any(ckpt_dir.glob("step*.ckpt")):
        if proc.poll() is not None or time.monotonic() > deadline:
            out = proc.stdout.read().decode() if proc.stdout else ""
            pytest.fail(f"train.py ended (rc={proc.returncode}) before its first checkpoint:\n{out[-3000:]}")
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL


def _state(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)


@pytest.mark.parametrize("objective", sorted(PRESETS))
def test_sigkilled_pretraining_resumes_to_the_uninterrupted_result(tmp_path, objective):
    preset = PRESETS[objective]
    full = tmp_path / "full"
    _finish(_train(full, preset))
    killed = tmp_path / "killed"
    _kill_after_first_checkpoint(_train(killed, preset), killed / "checkpoints")
    resume_from = max((killed / "checkpoints").glob("step*.ckpt"))  # killed maybe before last.ckpt was written
    assert 0 < _state(resume_from)["global_step"] < STEPS, "the kill came after the run had finished"
    _finish(_train(killed, preset, f"ckpt_path={resume_from}"))
    a, b = _state(full / "checkpoints" / "last.ckpt"), _state(killed / "checkpoints" / "last.ckpt")
    assert a["global_step"] == b["global_step"] == STEPS
    assert a["state_dict"].keys() == b["state_dict"].keys()
    for name, tensor in a["state_dict"].items():
        torch.testing.assert_close(b["state_dict"][name], tensor, rtol=0, atol=0, msg=name)
    for sa, sb in zip(a["optimizer_states"][0]["state"].values(), b["optimizer_states"][0]["state"].values(),
                      strict=True):
        for key in sa:
            torch.testing.assert_close(sb[key], sa[key], rtol=0, atol=0, msg=key)
