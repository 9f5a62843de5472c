"""Multirun with DDP inside each trial (train.py, 2 CPU processes over gloo per trial): only rank 0 writes the run
records, reports the objective to the sweeper and writes the summary. Also the guard that refuses a script-relaunching
strategy (strategy=ddp) in a local multirun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# A 1-layer d=32 txl_mini for 2 steps; trial dirs by number (the fixed overrides would make names too long).
TINY = ["model.n_layer=1", "model.d_model=32", "model.n_head=2", "model.d_head=16", "model.d_inner=64",
        "data.eval_batch_size=4", "logger=csv", "trainer.enable_progress_bar=false", "trainer.max_steps=2",
        "trainer.val_check_interval=2", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1",
        "test_after_fit=false", "hydra.sweep.subdir=trial_${hydra.job.num}"]


def _train(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(GENLAB_LOGS=str(tmp_path / "outputs"), WANDB_MODE="disabled", HYDRA_FULL_ERROR="1")
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=1800)

DDP = ["strategy=ddp_spawn", "trainer.devices=2", "trainer.accelerator=cpu"]
# Files a trial directory may hold; a second writer (a worker acting as rank 0) would add e.g. a second CSV version.
TRIAL_FILES = {".hydra", "checkpoints", "config.yaml", "csv", "curves.png", "metrics.json", "overrides.yaml",
               "run.json", "summary.txt", "train.log"}


def _check_ddp_trials(sweep: Path, n: int) -> list[dict]:
    s = json.loads((sweep / "multirun_summary.json").read_text())
    assert (s["n_trials"], s["n_finished"], s["n_failed"]) == (n, n, 0), s
    metrics = []
    for t in sorted(s["trials"], key=lambda t: t["job_num"]):
        d = sweep / t["dir"]
        assert {p.name for p in d.iterdir()} <= TRIAL_FILES, sorted(p.name for p in d.iterdir())
        assert [p.name for p in (d / "csv").iterdir()] == ["metrics.csv"]  # one logger wrote, once
        info = json.loads((d / "run.json").read_text())
        assert info["world_size"] == 2 and info["hydra"]["job_num"] == t["job_num"]
        m = json.loads((d / "metrics.json").read_text())
        assert m["status"] == "finished" and m["monitor_value"] == t["monitor_value"] and m["best_checkpoint"]
        metrics.append(m)
    return metrics


def test_train_py_multirun_with_ddp_spawn_inside_each_trial(tmp_path):
    """seed=1,2 with 2 gloo processes per trial: both finish, rank 0 alone writes the records and the summary."""
    sweep = tmp_path / "sweep"
    result = _train(tmp_path, "-m", "experiment=txl_mini", *TINY, *DDP,
                    f"hydra.sweep.dir={sweep}", "seed=1,2")
    assert result.returncode == 0, result.stderr[-3000:]
    m1, m2 = _check_ddp_trials(sweep, 2)
    assert m1["monitor_value"] != m2["monitor_value"]  # the seeds differ
    assert sorted(p.name for p in sweep.iterdir()) == ["multirun.yaml", "multirun_summary.json",
                                                       "multirun_summary.md", "trial_0", "trial_1"]


def test_optuna_with_ddp_spawn_trials_gets_each_objective_once(tmp_path):
    import optuna

    from hydra_plugins.genlab_sweeper._sqlite_store import SQLiteTrialStore

    sweep = tmp_path / "optuna"
    result = _train(tmp_path, "experiment=txl_mini", "hparams_search=optuna", "hydra.sweeper.n_trials=1", *TINY, *DDP,
                    f"hydra.sweep.dir={sweep}")
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = _check_ddp_trials(sweep, 1)
    study = optuna.load_study(study_name="txl_mini", storage=SQLiteTrialStore(sweep / "optuna.db", "txl_mini"))
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE"]  # one objective for the trial, from rank 0
    assert [t.value for t in trials] == pytest.approx([m["monitor_value"] for m in metrics])


def test_script_relaunching_ddp_in_a_multirun_is_refused_before_any_trial(tmp_path):
    """strategy=ddp would re-run the whole sweep in each extra process (Lightning re-executes the command line)."""
    sweep = tmp_path / "sweep"
    result = _train(tmp_path, "-m", "experiment=txl_mini", *TINY, "strategy=ddp", "trainer.devices=2",
                    "trainer.accelerator=cpu", f"hydra.sweep.dir={sweep}", "seed=1,2")
    assert result.returncode == 2 and "strategy=ddp_spawn" in result.stderr and "DDPStrategy" in result.stderr
    assert not list(tmp_path.rglob("run.json"))


def test_multirun_guard_reads_strategy_and_devices():
    from omegaconf import OmegaConf

    from genlab.sweep_callback import script_relaunching_strategy

    def cfg(strategy, devices, accelerator="cpu", num_nodes=1):
        return OmegaConf.create({"trainer": {"strategy": strategy, "devices": devices, "accelerator": accelerator,
                                             "num_nodes": num_nodes}})

    ddp = {"_target_": "pytorch_lightning.strategies.DDPStrategy"}
    assert script_relaunching_strategy(cfg(ddp, 2)) == "DDPStrategy"
    assert script_relaunching_strategy(cfg({**ddp, "start_method": "spawn"}, 2)) is None
    assert script_relaunching_strategy(cfg(ddp, 1)) is None and script_relaunching_strategy(cfg(ddp, "auto")) is None
    assert script_relaunching_strategy(cfg(ddp, 1, num_nodes=2)) == "DDPStrategy"
    assert script_relaunching_strategy(cfg("auto", [0, 1])) == "auto"  # Lightning picks ddp for >1 device
    assert script_relaunching_strategy(cfg("ddp_spawn", 4)) is None
    assert script_relaunching_strategy(cfg({"_target_": "genlab.parallel.FSDP2Strategy"}, "2")) == "FSDP2Strategy"
