"""GPT pretraining on a plain-text corpus (``data.path=``, the path tier) survives a SIGKILL of a real ``train.py``:
the run restarted with ``ckpt_path=last`` ends with exactly the weights of an uninterrupted run (same batches,
dropout masks, optimiser and schedule state), so the data position (random windows by (pass, step)) and every RNG
are in the checkpoint. Both runs load with 2 persistent DataLoader workers, as the paper presets do on a GPU: the
multi-process iterator must leave the resume position to the iteration that really runs
(``genlab.data.loading.samplers``). The mini presets of GPT pretraining and finetuning are rows of
tests/reliability/test_resume.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
TINY_GPT = ["model.n_layer=1", "model.n_embd=32", "model.n_head=2", "model.n_inner=64"]
EVERY = 5


def train_cmd(run: Path, *args: str) -> list[str]:
    return [sys.executable, str(ROOT / "train.py"), *args, *TINY_GPT, f"hydra.run.dir={run}", "seed=3",
            "logger=none", "trainer.enable_progress_bar=false", "test_after_fit=false",
            f"callbacks.checkpoint.every_n_train_steps={EVERY}", "callbacks.checkpoint.monitor=null",
            "trainer.val_check_interval=null", "trainer.check_val_every_n_epoch=1000"]


def env_for(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "GENLAB_OFFLINE": "1", "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1",
            "GENLAB_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT / "src")}


def step_of(ckpt: Path) -> int:
    return int(torch.load(ckpt, map_location="cpu", weights_only=False)["global_step"])


def kill_after_first_checkpoint(cmd: list[str], run: Path, env: dict[str, str], timeout: float = 300) -> int:
    """Start ``cmd``, SIGKILL it as soon as ``last.ckpt`` exists; returns the step that checkpoint holds."""
    last = run / "checkpoints" / "last.ckpt"
    proc = subprocess.Popen(cmd, cwd=run.parent, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    start = time.monotonic()
    try:
        while not last.exists():
            if proc.poll() is not None:
                raise AssertionError(f"train.py ended (rc {proc.returncode}) before its first checkpoint: "
                                     f"{proc.stderr.read().decode()[-2000:]}")
            if time.monotonic() - start > timeout:
                raise AssertionError("no checkpoint within the timeout")
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL, "train.py finished before it could be killed; raise max_steps"
    return step_of(last)


def final_state(run: Path) -> dict[str, torch.Tensor]:
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    return ckpt["global_step"], ckpt["state_dict"]


def check_killed_run_resumes_exactly(tmp_path: Path, args: list[str], max_steps: int) -> int:
    env = env_for(tmp_path)
    args = [*args, f"trainer.max_steps={max_steps}"]
    full = tmp_path / "full"
    done = subprocess.run(train_cmd(full, *args), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]

    part = tmp_path / "part"
    killed_at = kill_after_first_checkpoint(train_cmd(part, *args), part, env)
    assert 0 < killed_at < max_steps
    resumed = subprocess.run(train_cmd(part, *args, "ckpt_path=last"), cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=600, check=False)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    (step_a, a), (step_b, b) = final_state(full), final_state(part)
    assert step_a == step_b == max_steps
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)
    return killed_at


def write_corpus(root: Path) -> None:
    rng = np.random.default_rng(0)
    words = ["the", "a", "river", "town", "old", "new", "road", "bank", "boat", "house", "green", "red", "walks", "sees", "finds", "keeps"]
    for split, n in (("train", 400), ("valid", 40)):
        (root / split).mkdir(parents=True)
        docs = ["\n".join(" ".join(rng.choice(words, 8)) + "." for _ in range(5)) for _ in range(n)]
        (root / split / "a.txt").write_text("\n\n".join(docs), encoding="utf-8")


def test_killed_gpt_pretraining_resumes_to_the_uninterrupted_weights(tmp_path):
    write_corpus(tmp_path / "corpus")
    args = ["experiment=gpt_books_mini", "data=gpt_pretrain_text", f"data.path={tmp_path / 'corpus'}",
            "data.vocab_size=60", "data.seq_len=16", "data.batch_size=4", "model.n_positions=16",
            "task.scheduler.warmup_steps=5", "data.num_workers=2", "data.persistent_workers=true"]
    check_killed_run_resumes_exactly(tmp_path, args, max_steps=60)
