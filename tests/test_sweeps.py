"""Sweeps end to end, as a user runs them (subprocesses): Hydra multirun, failed trials, summary, Optuna resume,
and the report over the sweep.

Two layers: a toy Hydra app (a quadratic objective, seconds per sweep) exercising the sweep machinery with the
real conf/hparams_search preset and callback, and ``train.py -m`` on a real ``_mini`` experiment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CALLBACK = "+hydra.callbacks.sweep_summary._target_=genlab.sweep_callback.SweepSummary"

TOY_APP = textwrap.dedent(
    """
    import math, os, sys
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from genlab.runs import write_final_metrics, write_run_metadata

    @hydra.main(version_base="1.3", config_path="conf", config_name="toy")
    def main(cfg):
        out = HydraConfig.get().runtime.output_dir
        write_run_metadata(cfg, out)
        if HydraConfig.get().job.num == int(os.environ.get("TOY_DIE_AT_JOB", -1)):
            os._exit(137)  # killed mid-trial, like the OOM killer or a pre-empted node
        if cfg.fail == "raise":
            raise RuntimeError("boom in trial")
        if cfg.fail == "nanloss":  # what train.py does with a caught error: record it, return NaN to the sweeper
            write_final_metrics(out, {}, "failed", error="NonFiniteLossError: train/loss became nan")
            return math.nan
        value = (cfg.task.optimizer.lr - 0.003) ** 2 * 1e4 + cfg.model.width * 0.01 + cfg.seed * 0.001
        write_final_metrics(out, {"valid/loss": value, "test/loss": value + 1}, "finished")
        return value

    if __name__ == "__main__":
        main()
    """
)

TOY_CONF = textwrap.dedent(
    f"""
    defaults:
      - _self_
      - experiment: toy_mini
      - hparams_search: null
      - launcher: null
    hydra:
      searchpath: [file://{ROOT / "conf"}]
      run: {{dir: "${{paths.log_dir}}/${{name}}/run"}}
      sweep: {{dir: "${{paths.log_dir}}/${{name}}/multirun", subdir: "${{hydra.job.override_dirname}}"}}
      job: {{chdir: false, config: {{override_dirname: {{exclude_keys: [experiment, hparams_search]}}}}}}
    name: toy_mini
    paths: {{log_dir: "${{oc.env:GENLAB_LOGS}}"}}
    seed: 1
    fail: "no"
    model: {{width: 8}}
    task: {{optimizer: {{lr: 0.001}}, monitor: valid/loss, monitor_mode: min}}
    """
)


def _has_submitit() -> bool:
    try:
        import hydra_plugins.hydra_submitit_launcher  # noqa: F401
    except ImportError:
        return False
    return True


needs_submitit = pytest.mark.skipif(not _has_submitit(), reason="hydra-submitit-launcher not installed (genlab[slurm])")


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOY_", "WANDB_"))}
    return {**env, "GENLAB_LOGS": str(tmp_path / "outputs"), "WANDB_MODE": "disabled", "HYDRA_FULL_ERROR": "1"}


@pytest.fixture
def toy(tmp_path):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "toy.yaml").write_text(TOY_CONF)
    (tmp_path / "conf" / "experiment").mkdir()
    (tmp_path / "conf" / "experiment" / "toy_mini.yaml").write_text("# @package _global_\nmodel: {width: 8}\n")
    (tmp_path / "toy_app.py").write_text(TOY_APP)

    def run(*args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "toy_app.py", *args], cwd=tmp_path, env={**_env(tmp_path), **(extra_env or {})},
                              capture_output=True, text=True, timeout=300)

    return run


def _report(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "genlab.report", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_multirun_failed_trial_is_recorded_and_summary_written(toy, tmp_path):
    result = toy("-m", CALLBACK, "model.width=8,16", "fail=no,nanloss,raise", "seed=1")
    # Hydra stops a multirun whose job *raised* (train.py never lets that happen); the NaN trial did not stop it.
    assert result.returncode != 0 and "boom in trial" in result.stderr
    sweep = tmp_path / "outputs" / "toy_mini" / "multirun"
    s = json.loads((sweep / "multirun_summary.json").read_text())
    by = {(t["overrides"]["model.width"], t["overrides"]["fail"]): t for t in s["trials"]}
    assert by[("8", "no")]["status"] == "finished" and by[("8", "no")]["monitor_value"] == pytest.approx(0.121)
    assert by[("8", "nanloss")]["status"] == "failed" and "nan" in by[("8", "nanloss")]["error"]
    assert by[("8", "raise")]["status"] == "failed" and "RuntimeError: boom in trial" in by[("8", "raise")]["error"]
    assert "failed" in (sweep / "multirun_summary.md").read_text()


def test_multirun_2x2x2_seeds_and_report_table(toy, tmp_path):
    result = toy("-m", CALLBACK, "model.width=8,16", "task.optimizer.lr=0.001,0.003", "seed=1,2")
    assert result.returncode == 0, result.stderr[-3000:]
    sweep = tmp_path / "outputs" / "toy_mini" / "multirun"
    s = json.loads((sweep / "multirun_summary.json").read_text())
    assert (s["n_trials"], s["n_finished"], s["n_failed"]) == (8, 8, 0)
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir())[0] == "model.width=16,seed=1,task.optimizer.lr=0.001"

    rep = _report(str(sweep), "--rows", "task.optimizer.lr", "--cols", "model.width", "--no-plot", cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    md = (sweep / "table.md").read_text()
    mean = (0.002**2 * 1e4 + 0.08 + 0.0015)  # lr=0.001, width=8, seeds 1 and 2
    assert f"| 0.001 | {mean:.2f} ± 0.00 |" in md and md.count("\n| 0.00") == 2


def test_sweep_override_naming_an_unknown_key_fails_before_any_trial(toy, tmp_path):
    result = toy("-m", "model.widht=8,16")
    assert result.returncode != 0 and "model.widht" in result.stderr
    assert not list(tmp_path.rglob("run.json"))  # Hydra made the sweep dir, but no trial ran


def test_optuna_study_resumes_after_interruption(toy, tmp_path):
    import optuna

    from hydra_plugins.genlab_sweeper._sqlite_store import SQLiteTrialStore

    def load():  # the study as stored on disk, read fresh each time
        return optuna.load_study(study_name="toy_mini", storage=SQLiteTrialStore(sweep / "optuna.db", "toy_mini"))

    args = ("hparams_search=optuna", CALLBACK, "hydra.sweeper.n_trials=4", "seed=3")
    killed = toy(*args, extra_env={"TOY_DIE_AT_JOB": "2"})
    assert killed.returncode == 137
    sweep = tmp_path / "outputs" / "toy_mini" / "optuna"
    before = load().get_trials()
    assert [t.state.name for t in before] == ["COMPLETE", "COMPLETE", "RUNNING"]

    resumed = toy(*args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming study 'toy_mini': 2 of 4 trials done" in resumed.stderr + resumed.stdout
    study = load()
    states = [t.state.name for t in study.get_trials()]
    assert states.count("COMPLETE") == 4 and states == ["COMPLETE", "COMPLETE", "FAIL", "COMPLETE", "COMPLETE"]
    assert study.direction.name == "MINIMIZE"  # from task.monitor_mode
    complete = [t for t in study.get_trials() if t.state.name == "COMPLETE"]
    assert len({t.params["task.optimizer.lr"] for t in complete}) == 4  # the resumed sampler did not repeat itself
    assert study.best_value == min(t.value for t in study.get_trials() if t.value is not None)
    assert (sweep / "optimization_results.yaml").exists()
    s = json.loads((sweep / "multirun_summary.json").read_text())
    assert s["n_finished"] == 4 and s["n_incomplete"] == 1  # the killed trial's directory

    again = toy(*args)  # budget spent: nothing more runs
    assert again.returncode == 0 and len(load().trials) == 5


# Fields of hydra-submitit-launcher 1.2's SlurmQueueConf / LocalQueueConf (the plugin is optional: genlab[slurm]).
SUBMITIT_SLURM = {"submitit_folder", "timeout_min", "cpus_per_task", "gpus_per_node", "tasks_per_node", "mem_gb",
                  "nodes", "name", "stderr_to_stdout", "partition", "qos", "comment", "constraint", "exclude", "gres",
                  "cpus_per_gpu", "gpus_per_task", "mem_per_gpu", "mem_per_cpu", "account", "signal_delay_s",
                  "max_num_timeout", "additional_parameters", "array_parallelism", "setup", "srun_args"}
SUBMITIT_LOCAL = {"submitit_folder", "timeout_min", "cpus_per_task", "gpus_per_node", "tasks_per_node", "mem_gb",
                  "nodes", "name"}


@pytest.mark.parametrize("preset,fields", [("slurm", SUBMITIT_SLURM), ("local", SUBMITIT_LOCAL)])
def test_launcher_presets_use_submitit_fields_and_real_trainer_keys(preset, fields):
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(ROOT / "conf" / "launcher" / f"{preset}.yaml")
    assert {"override /hydra/launcher": f"submitit_{preset}"} in list(cfg.defaults)
    unknown = set(cfg.hydra.launcher) - fields
    assert not unknown, f"conf/launcher/{preset}.yaml sets keys submitit does not have: {unknown}"
    trainer = OmegaConf.load(ROOT / "conf" / "trainer" / "default.yaml")
    assert set(cfg.get("trainer", {})) <= set(trainer)


@needs_submitit
def test_local_submitit_launcher_runs_trials_as_processes_and_records_a_failure(toy, tmp_path):
    """launcher=local: each trial is a separate process started by submitit's local executor (the SLURM code path)."""
    result = toy("-m", CALLBACK, "launcher=local", "hydra.launcher.cpus_per_task=1", "fail=no,nanloss", "seed=1")
    assert result.returncode == 0, result.stderr[-3000:]
    sweep = tmp_path / "outputs" / "toy_mini" / "multirun"
    logs = sorted((sweep / ".submitit").rglob("*_log.out"))
    assert len(logs) == 2  # one submitit job per trial, each its own process with its own log
    s = json.loads((sweep / "multirun_summary.json").read_text())
    assert (s["n_trials"], s["n_finished"], s["n_failed"], s["n_incomplete"]) == (2, 1, 1, 0)
    by = {t["overrides"]["fail"]: t for t in s["trials"]}
    assert by["no"]["status"] == "finished"
    assert by["no"]["monitor_value"] == pytest.approx((0.001 - 0.003) ** 2 * 1e4 + 0.08 + 0.001)
    assert by["nanloss"]["status"] == "failed" and "NonFiniteLossError" in by["nanloss"]["error"]


def _slurm_sbatch(tmp_path, monkeypatch, *overrides: str) -> tuple[str, object, object]:
    """Compose train.py's config with launcher=slurm and let the submitit launcher write its sbatch script for a
    2-trial sweep; sbatch itself is replaced, so nothing is submitted. Returns (script, config, executor params)."""
    import submitit
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    submitted = []

    def fake_sbatch(self):  # submitit.core.utils.CommandFunction.__call__, here always ["sbatch", <file>]
        assert self.command[0] == "sbatch"
        submitted.append(Path(self.command[1]).read_text())
        raise RuntimeError("stop after sbatch")

    monkeypatch.setattr(submitit.core.utils.CommandFunction, "__call__", fake_sbatch)
    monkeypatch.setattr(submitit.SlurmExecutor, "affinity", classmethod(lambda cls: 2))  # as if srun were installed
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=["launcher=slurm", f"hydra.sweep.dir={tmp_path / 'sweep'}", *overrides],
                      return_hydra_config=True)
    launcher = instantiate(cfg.hydra.launcher)
    launcher.setup(hydra_context=None, task_function=lambda c: 0.0, config=cfg)
    with pytest.raises(RuntimeError, match="stop after sbatch"):
        launcher.launch([["seed=1"], ["seed=2"]], initial_job_idx=0)
    (script,) = submitted
    return script, cfg, launcher.params


@needs_submitit
def test_slurm_launcher_writes_the_expected_sbatch_script(tmp_path, monkeypatch):
    script, cfg, params = _slurm_sbatch(
        tmp_path, monkeypatch, "experiment=txl_mini", "hydra.launcher.nodes=2", "hydra.launcher.gpus_per_node=4",
        "hydra.launcher.partition=gpu", "hydra.launcher.account=lab",
        "hydra.launcher.setup=['module load cuda/12.4','export NCCL_DEBUG=WARN']",
    )
    flags = {ln.split("=", 1)[0][len("#SBATCH "):]: ln.split("=", 1)[1] for ln in script.splitlines()
             if ln.startswith("#SBATCH ")}
    assert flags["--nodes"] == "2" and flags["--ntasks-per-node"] == "4" and flags["--gpus-per-node"] == "4"
    assert flags["--partition"] == "gpu" and flags["--account"] == "lab"
    assert flags["--cpus-per-task"] == "8" and flags["--mem"] == "64GB" and flags["--time"] == "1440"
    assert flags["--array"] == "0-1%2"  # both trials in one job array
    # requeue on pre-emption/timeout: submitit's signal before the time limit, then up to max_num_timeout requeues
    assert flags["--signal"] == "USR2@120" and flags["--open-mode"] == "append" and params["max_num_timeout"] == 3
    body = script.split("# setup\n", 1)[1]
    assert body.index("module load cuda/12.4") < body.index("export NCCL_DEBUG=WARN") < body.index("srun ")
    assert "-m submitit.core._submit" in body and str(tmp_path / "sweep" / ".submitit") in body
    # every srun task is one Lightning process: trainer sizes follow the launcher, DDP over the nodes
    assert (cfg.trainer.num_nodes, cfg.trainer.devices, cfg.trainer.accelerator) == (2, 4, "gpu")
    assert cfg.trainer.strategy._target_.endswith("DDPStrategy")


@needs_submitit
def test_slurm_launcher_single_gpu_default(tmp_path, monkeypatch):
    script, cfg, _ = _slurm_sbatch(tmp_path, monkeypatch, "experiment=txl_mini")
    assert "#SBATCH --nodes=1" in script and "#SBATCH --ntasks-per-node=1" in script
    assert "--partition" not in script and "# setup" not in script  # null partition and empty setup are left out
    assert (cfg.trainer.num_nodes, cfg.trainer.devices) == (1, 1)


# ---- train.py itself (minutes on a shared 2-core machine: slow) ------------------------------------------------

TINY = ["model.n_layer=1", "model.d_model=32", "model.n_head=2", "model.d_head=16", "model.d_inner=64",
        "data.eval_batch_size=4", "logger=csv", "trainer.enable_progress_bar=false", "trainer.max_steps=2",
        "trainer.val_check_interval=2", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1",
        # the fixed overrides above would make override-named trial dirs longer than a file name may be
        "hydra.sweep.subdir=trial_${hydra.job.num}"]


def _train(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *args], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=3600)


@pytest.mark.slow
def test_train_py_multirun_2x2x2_seeds_with_a_failed_trial_and_report(tmp_path):
    sweep = tmp_path / "sweep"
    result = _train(
        tmp_path, "-m", "experiment=txl_mini", *TINY, f"hydra.sweep.dir={sweep}",
        "model.dropout=0.0,0.1", "data.batch_size=4,8", "seed=1,2",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    s = json.loads((sweep / "multirun_summary.json").read_text())
    assert (s["n_trials"], s["n_finished"]) == (8, 8)
    rep = _report(str(sweep), "--rows", "model.dropout", "--cols", "data.batch_size", "--metric", "test/ppl",
                  cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    md = (sweep / "table.md").read_text()
    assert md.count("\n| 0.") == 2 and "data.batch_size=4" in md and (sweep / "table.png").exists()

    failing = _train(tmp_path, "-m", "experiment=txl_mini", *TINY, f"hydra.sweep.dir={tmp_path / 'bad'}",
                     "data.batch_size=4,0")
    assert failing.returncode == 0, failing.stderr[-3000:]  # the failed trial did not stop the sweep
    s = json.loads((tmp_path / "bad" / "multirun_summary.json").read_text())
    assert (s["n_finished"], s["n_failed"]) == (1, 1)



def test_trial_dirs_are_unique_when_only_the_experiment_differs():
    from genlab.cli.resolvers import trial_dirname

    # `experiment` is excluded from override_dirname, so `-m experiment=a,b seed=1` gives both trials "seed=1".
    assert trial_dirname("seed=1", 0) != trial_dirname("seed=1", 1)
    assert trial_dirname("", 3) == "trial3"
    assert "/" not in trial_dirname("data.path=/data/planetoid,seed=1", 0)  # one directory, not four levels
    long = trial_dirname("x" * 400, 12)
    assert len(long.encode()) <= 180 and long.startswith("12_") and long != trial_dirname("x" * 399 + "y", 12)
