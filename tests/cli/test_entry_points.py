"""The entry points as a user runs them: exit codes and messages for bad input, train -> eval round trip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TINY = ["model.n_layer=1", "model.d_model=32", "model.n_head=2", "model.d_head=16", "model.d_inner=64",
        "data.batch_size=4", "data.eval_batch_size=4", "logger=csv", "trainer.enable_progress_bar=false"]


def run(script: str, *args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "GENLAB_OFFLINE": "1", "WANDB_MODE": "disabled", "GENLAB_LOGS": str(tmp_path / "outputs")}
    return subprocess.run([sys.executable, str(ROOT / script), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)


def test_misspelt_key_exits_2_naming_it(tmp_path):
    result = run("train.py", "model.n_layers=2", tmp_path=tmp_path)
    assert result.returncode == 2
    assert "n_layers" in result.stderr + result.stdout


def test_misspelt_key_inside_a_preset_exits_2_naming_it(tmp_path):
    result = run("train.py", "+model.dropatt_rate=0.1", tmp_path=tmp_path)
    assert result.returncode == 2
    assert "model.dropatt_rate" in result.stderr and "did you mean 'dropatt'" in result.stderr


def test_missing_data_path_exits_2_naming_files_and_fix(tmp_path):
    result = run("train.py", "data=wikitext103", "data.source=path", f"data.path={tmp_path}/nowhere",
                 tmp_path=tmp_path)
    assert result.returncode == 2
    assert "wiki.train.tokens" in result.stderr and "data.path=" in result.stderr


def test_train_then_eval_with_longer_memory_and_vocab_mismatch(tmp_path):
    result = run("train.py", *TINY, "trainer.max_steps=4", "trainer.val_check_interval=2", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "test/ppl" in result.stdout and "checkpoint" in result.stdout
    ckpt = next((tmp_path / "outputs").rglob("last.ckpt"))

    evaluated = run("eval.py", f"ckpt_path={ckpt}", "eval.mem_len=128", "eval.same_length=true",
                    "eval.clamp_len=100", "eval.tgt_len=16", "logger=csv", tmp_path=tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert "valid/ppl" in evaluated.stdout and "test/ppl" in evaluated.stdout

    mismatch = run("eval.py", f"ckpt_path={ckpt}", "data=ptb_mini", tmp_path=tmp_path)
    assert mismatch.returncode == 2
    assert "was trained with" in mismatch.stderr

    missing = run("eval.py", f"ckpt_path={tmp_path}/none.ckpt", tmp_path=tmp_path)
    assert missing.returncode == 2 and "no such file" in missing.stderr


def test_validation_interval_longer_than_an_epoch_exits_2_naming_the_fix(tmp_path):
    result = run("train.py", "experiment=xlnet_sst2_mini", *TINY, "trainer.max_steps=4",
                 "trainer.val_check_interval=1000", "trainer.check_val_every_n_epoch=1", tmp_path=tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "trainer.val_check_interval=1000" in result.stderr
    assert "trainer.check_val_every_n_epoch=null" in result.stderr


def test_logger_null_means_no_logger(tmp_path):
    """``logger=null`` (Hydra 1.3 alone refuses a null group choice with a traceback) trains with no logger."""
    run_dir = tmp_path / "run"
    result = run("train.py", *TINY, "logger=null", "trainer.max_steps=2", "trainer.limit_val_batches=1",
                 "test_after_fit=false", f"hydra.run.dir={run_dir}", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert not (run_dir / "csv").exists() and not (run_dir / "wandb").exists()
    assert "logger: none" in (run_dir / ".hydra" / "hydra.yaml").read_text()


def test_null_group_choice_becomes_none_where_the_group_has_one():
    from genlab.cli.choices import null_choices_to_none

    argv = ["logger=null", "logger=csv,null", "model=null", "+logger.x=null", "trainer.logger=null"]
    assert null_choices_to_none(argv, ROOT / "conf") == [
        "logger=none", "logger=csv,none", "model=null", "+logger.x=null", "trainer.logger=null"]
