"""Run real ``train.py`` processes and compare their checkpoints and logged losses tensor by tensor."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

# Tiny run shared by every family: a few optimiser steps, a checkpoint every 2, one CSV row per step.
COMMON = [
    "trainer.max_steps=6",
    "trainer.max_epochs=null",
    "callbacks.checkpoint.every_n_train_steps=2",
    "trainer.limit_val_batches=2",
    "trainer.log_every_n_steps=1",
    "trainer.enable_progress_bar=false",
    "trainer.num_sanity_val_steps=0",
    "test_after_fit=false",
    "logger=csv",
]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(HERE), e.get("PYTHONPATH", "")])
    e.setdefault("OMP_NUM_THREADS", "1")
    e["HYDRA_FULL_ERROR"] = "0"
    return e


def train(run_dir: Path, *overrides: str, timeout: float = 600) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run_dir}", *overrides]
    return subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=timeout)


def start(run_dir: Path, *overrides: str) -> subprocess.Popen:
    cmd = [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run_dir}", *overrides]
    return subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def kill_at(step: int, sig: str = "SIGKILL") -> list[str]:
    return ["+callbacks.kill._target_=kill_at_step.KillAtStep", f"+callbacks.kill.step={step}",
            f"+callbacks.kill.sig={sig}"]


def load(path: Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=True)  # as genlab reads them: no code


_INT_OF_WIDTH = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: torch.Tensor) -> torch.Tensor:
    """A float tensor's bit patterns (torch.equal calls NaN unequal to itself); other dtypes as they are."""
    if t.is_floating_point() and t.element_size() in _INT_OF_WIDTH:
        return t.detach().contiguous().view(_INT_OF_WIDTH[t.element_size()])
    return t


def assert_equal_state(a: Any, b: Any, where: str = "") -> None:
    """Nested dicts/lists of tensors and numbers equal exactly: tensors bit for bit (a NaN buffer equals its copy)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype, f"{where} differs"
        assert torch.equal(_bits(a), _bits(b)), f"{where} differs"
    elif isinstance(a, dict):
        assert set(a) == set(b), f"{where}: keys {set(a) ^ set(b)}"
        for k in a:
            assert_equal_state(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{where}: lengths"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_equal_state(x, y, f"{where}[{i}]")
    else:
        assert a == b or (a != a and b != b), f"{where}: {a!r} != {b!r}"


def losses(run_dir: Path) -> dict[tuple[int, str], str]:
    """Every logged training value by (step, column), from the CSV logger's metrics.csv files of ``run_dir``."""
    out: dict[tuple[int, str], str] = {}
    for path in sorted(run_dir.rglob("metrics.csv")):
        with open(path) as f:
            for row in csv.DictReader(f):
                for key, value in row.items():
                    if key and key.startswith("train/") and "time" not in key and "per_sec" not in key and value:
                        out[(int(row["step"]), key)] = value
    return out
