"""Issue 27, NaN guard: checked after every step, a non-finite checkpoint is never written, the message says
whether a good checkpoint exists, and the run (GANs included) ends with exit 2 and status "failed"."""

from __future__ import annotations

import json

import pytest
import torch

from helpers import TINY_TXL
from reliability.harness import COMMON, load, train

pytestmark = pytest.mark.reliability


@pytest.mark.parametrize("args", [
    pytest.param([*TINY_TXL, "task.optimizer.lr=inf"], id="lm"),
    pytest.param(["experiment=bad_gan_mnist_mini", "task.optimizer.lr=inf", "task.g_optimizer.lr=inf"], id="bad_gan"),
])
def test_non_finite_training_stops_with_exit_2_and_no_bad_checkpoint(args, tmp_path):
    run = tmp_path / "run"
    result = train(run, *args, *COMMON)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert "became non-finite" in result.stderr or "=nan" in result.stderr or "=inf" in result.stderr
    assert ("the last good checkpoint is" in result.stderr) or ("no checkpoint was written" in result.stderr)
    assert json.loads((run / "metrics.json").read_text())["status"] == "failed"
    for ckpt in (run / "checkpoints").glob("*.ckpt"):
        assert all(torch.isfinite(v).all() for v in load(ckpt)["state_dict"].values() if v.is_floating_point())
