"""``genlab-report --wandb`` and ``eval.py logger=wandb`` offline: the offline run files hold the table, in the
training sweep's group; an evaluation joins its checkpoint's training group."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from genlab.callbacks.wandb import join_training_group, sweep_identity, training_group
from genlab.report.__main__ import main as report_main
from helpers import flushed_wandb_record

SWEEP = "multirun_2026-01-01_00-00-00"


def fake_trial(root: Path, n: int, mem_len: int, seed: int, loss: float) -> Path:
    """One finished multirun trial folder as train.py leaves it (run.json, config.yaml, metrics.json)."""
    d = root / str(n)
    d.mkdir(parents=True)
    ov = [f"model.mem_len={mem_len}", f"seed={seed}"]
    hydra = {"mode": "RunMode.MULTIRUN", "job_num": n, "sweep_dir": str(root)}
    (d / "run.json").write_text(json.dumps({"experiment": "txl_mini", "overrides": ov, "hydra": hydra}))
    (d / "config.yaml").write_text(yaml.safe_dump({"name": "txl_mini", "seed": seed, "model": {"mem_len": mem_len}}))
    (d / "metrics.json").write_text(json.dumps({"status": "finished", "metrics": {"test/ppl": loss},
                                                "monitor": "test/ppl"}))
    return d


@pytest.fixture
def sweep(tmp_path):
    root = tmp_path / SWEEP
    for n, (mem, seed) in enumerate([(0, 1), (0, 2), (32, 1), (32, 2)]):
        fake_trial(root, n, mem, seed, 100.0 - mem + seed)
    return root


def test_training_group_is_the_loggers_multirun_group(sweep):
    assert training_group(sweep / "0") == f"txl_mini-{SWEEP}"
    single = sweep / "single"
    single.mkdir()
    (single / "run.json").write_text(json.dumps({"experiment": "txl_mini", "hydra": {"mode": "RunMode.RUN"}}))
    assert training_group(single) == "txl_mini"
    assert training_group(sweep / "missing") is None


def test_report_logs_the_table_offline_into_the_sweep_group(sweep, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "table"
    assert report_main([str(sweep), "--rows", "model.mem_len", "--metric", "test/ppl", "--out", str(out),
                        "--wandb"]) == 0
    runs = list((sweep / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    tables = list(runs[0].rglob("*.table.json"))
    assert len(tables) == 1, list(runs[0].rglob("*"))
    logged = json.loads(tables[0].read_text())
    assert logged["columns"][:2] == ["model.mem_len", "metric"]
    by_mem = {row[0]: row[2] for row in logged["data"]}  # mean over the two seeds
    assert by_mem == {"0": pytest.approx(101.5), "32": pytest.approx(69.5)}
    assert list(runs[0].rglob("*.png")), "the table's plot is logged too"
    blob = flushed_wandb_record(lambda: list(runs[0].glob("*.wandb")), f"txl_mini-{SWEEP}".encode())
    assert f"txl_mini-{SWEEP}".encode() in blob, "the report run is in the training sweep's group"
    assert b"report" in blob


def test_eval_joins_its_checkpoints_training_group(sweep, monkeypatch):
    ckpt = sweep / "2" / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir()
    ckpt.write_bytes(b"")
    cfg = OmegaConf.create({"logger": {"wandb": {"group": "eval", "mode": "offline"}}})
    join_training_group(cfg, str(ckpt))
    assert cfg.logger.wandb.group == f"txl_mini-{SWEEP}"
    assert cfg.logger.wandb.job_type == "eval" and cfg.logger.wandb.sweep_group is False
    # an eval.py -m sweep keeps that group rather than opening its own
    group, _, _ = sweep_identity(cfg.logger.wandb.group, None, [], str(sweep), sweep_group=False)
    assert group == f"txl_mini-{SWEEP}"
    csv_only = OmegaConf.create({"logger": {"csv": {"save_dir": "x"}}})
    join_training_group(csv_only, str(ckpt))
    assert "wandb" not in csv_only.logger


def test_an_evaluation_record_reports_into_its_training_group(sweep, tmp_path):
    """eval.py's run folder (genlab.report.best_of.record_evaluation) names its training run; a report over an
    evaluation sweep logs into the training sweep's group, not the evaluation sweep's."""
    d = tmp_path / "eval_multirun" / "0"
    d.mkdir(parents=True)
    hydra = {"mode": "RunMode.MULTIRUN", "sweep_dir": str(tmp_path / "eval_multirun")}
    (d / "run.json").write_text(json.dumps({"experiment": "txl_mini", "job": "eval", "hydra": hydra,
                                            "training_dir": str(sweep / "1")}))
    assert training_group(d) == f"txl_mini-{SWEEP}"
