"""Every experiment preset composes and validates; every `_mini` twin (and every `_midi`, a CPU-trainable size between
the mini and the paper preset) trains one batch offline."""

from __future__ import annotations

from pathlib import Path

import pytest

from genlab.cli.train import train
from genlab.cli.validate import validate_config

CONF = Path(__file__).resolve().parents[1] / "conf" / "experiment"
EXPERIMENTS = sorted(p.stem for p in CONF.glob("*.yaml"))
TWIN_SUFFIXES = ("_mini", "_midi")
MINIS = [name for name in EXPERIMENTS if name.endswith(TWIN_SUFFIXES)]


def test_every_paper_preset_has_a_mini_twin():
    papers = [n for n in EXPERIMENTS if not n.endswith(TWIN_SUFFIXES)]
    assert [n for n in papers if f"{n}_mini" not in EXPERIMENTS] == []


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_composes_and_validates(name, compose_cfg):
    validate_config(compose_cfg([f"experiment={name}"]))


@pytest.mark.parametrize("name", MINIS)
def test_mini_experiment_runs_one_batch(name, compose_cfg):
    cfg = compose_cfg([f"experiment={name}", "debug=fast_dev_run"])
    train(cfg)
