"""eval.py keeps what it computed: progress lines, metrics.json and summary.txt in its own run dir, whose path it
prints; its console holds only genlab's lines, the bar and the summary."""

from __future__ import annotations

import json

from cli.test_quiet_start import TINY, _run, foreign_lines


def test_eval_writes_metrics_and_summary_into_its_run_dir(tmp_path):
    trained = _run(tmp_path, "trainer.max_steps=2", *TINY, "logger=csv", f"hydra.run.dir={tmp_path / 'run'}")
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert (tmp_path / "run" / "summary.txt").exists() and "curves.png" in trained.stdout
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"

    eval_dir = tmp_path / "eval_run"
    result = _run(tmp_path, f"ckpt_path={ckpt}", "trainer.limit_val_batches=2", "trainer.limit_test_batches=2",
                  f"hydra.run.dir={eval_dir}", script="eval.py")
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert foreign_lines(output) == []
    assert "[genlab][INFO] evaluating" in output  # progress, also kept in eval.log
    assert "evaluating" in (eval_dir / "eval.log").read_text()
    record = json.loads((eval_dir / "metrics.json").read_text())
    assert record["status"] == "finished" and record["mode"] == "standard"
    assert {"valid/ppl", "test/ppl"} <= set(record["metrics"])
    assert f"run dir = {eval_dir}" in result.stdout and "metrics.json" in result.stdout
    assert "test/ppl" in (eval_dir / "summary.txt").read_text()


def test_dynamic_evaluation_logs_progress_and_keeps_records(tmp_path):
    trained = _run(tmp_path, "experiment=mos_ptb_awd_mini", "model.emsize=16", "model.nhid=32", "model.nhidlast=16",
                   "model.nlayers=1", "trainer.max_steps=2", "trainer.limit_val_batches=2",
                   "trainer.limit_test_batches=2", f"hydra.run.dir={tmp_path / 'run'}")
    assert trained.returncode == 0, trained.stderr[-3000:]

    eval_dir = tmp_path / "dynamic"
    result = _run(tmp_path, f"ckpt_path={tmp_path / 'run' / 'checkpoints' / 'last.ckpt'}", "mode=dynamic",
                  "dynamic.max_tokens=1000", f"hydra.run.dir={eval_dir}", script="eval.py")
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert foreign_lines(output) == []
    # a tenth of each split at a time: 2 chunks of the statistics (1000 tokens in 100 rows, 5 per chunk) and 200
    # chunks of each scored split (batch 1)
    assert "gradient statistics on train, chunk 2/2 (100%)" in output
    for split in ("valid", "test"):
        assert all(f"scoring {split}, chunk {n}/200" in output for n in range(20, 201, 20)), output[-3000:]
    assert "ppl so far" in (eval_dir / "eval.log").read_text()
    record = json.loads((eval_dir / "metrics.json").read_text())
    assert record["status"] == "finished" and record["mode"] == "dynamic"
    assert record["dynamic"]["max_tokens"] == 1000 and {"valid/ppl", "test/ppl"} <= set(record["metrics"])
    assert f"run dir = {eval_dir}" in result.stdout and "first 1000 tokens of each split" in result.stdout
    assert "test/ppl" in (eval_dir / "summary.txt").read_text()
