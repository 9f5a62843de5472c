"""Test session setup: one torch thread per xdist worker, offline, no W&B; the `compose_cfg` fixture; a summary of
the scores that training tests record with ``record_property``."""

from __future__ import annotations

import os

import pytest
import torch
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig

from helpers import compose_config

torch.set_num_threads(1)  # pytest -n 2 runs one worker per core; more threads only oversubscribe
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("GENLAB_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _fresh_hydra_state():
    """Hydra keeps its config in process-wide singletons; a test must not see the previous test's run."""
    yield
    HydraConfig.instance().cfg = None
    GlobalHydra.instance().clear()
    torch.set_default_dtype(torch.float32)


@pytest.fixture
def compose_cfg(tmp_path):
    """The config train.py would see for some overrides, writing into this test's tmp_path."""

    def _compose(overrides: list[str], config_name: str = "train"):
        return compose_config(overrides, tmp_path, config_name)

    return _compose


def pytest_terminal_summary(terminalreporter):
    """Print what training tests measured (``record_property("test/acc", ...)``) whatever their outcome: a passing,
    failing or xfailing slow run then documents its score (reports carry the properties across xdist workers)."""
    rows = [(r.nodeid, r.user_properties) for reports in terminalreporter.stats.values() for r in reports
            if getattr(r, "when", None) == "call" and getattr(r, "user_properties", None)]
    if rows:
        terminalreporter.section("measured scores")
        for nodeid, props in sorted(rows):
            values = ", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in props)
            terminalreporter.write_line(f"{nodeid}: {values}")
