"""Where train.py writes: extending a finished run continues it in its own run dir (trained, validated, tested,
reported there, the best checkpoint ranked over all its steps); a run (train.py or eval.py) stopped by a config
error or a refused checkpoint leaves no run dir behind, and leaves an existing run's records as they were."""

from __future__ import annotations

import csv
import json

import torch
from cli.test_quiet_start import TINY, _run, foreign_lines

from helpers import TouchPayload

RUN = [*TINY, "logger=csv", "trainer.enable_progress_bar=false"]


def _monitor_history(run_dir) -> dict[int, float]:
    with open(run_dir / "csv" / "metrics.csv") as f:
        return {int(r["step"]): float(r["valid/loss"]) for r in csv.DictReader(f) if r.get("valid/loss")}


def test_extending_a_finished_run_trains_tests_and_reports_in_its_run_dir(tmp_path):
    run_dir = tmp_path / "run"
    first = _run(tmp_path, *RUN, "trainer.max_steps=4", f"hydra.run.dir={run_dir}")
    assert first.returncode == 0, first.stderr[-3000:]
    before = json.loads((run_dir / "metrics.json").read_text())

    more = _run(tmp_path, *TINY, "logger=csv", "trainer.max_steps=8",
                f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}")
    assert more.returncode == 0, more.stderr[-3000:]
    output = more.stdout + more.stderr
    assert foreign_lines(output) == []  # no Lightning warnings about the dir or the data loader
    assert "Steps: 100%" in output and "8/8" in output  # the bar counts the run's steps, not the epoch's batches
    assert f"continuing the run in {run_dir}" in output
    assert not (tmp_path / "outputs").exists()  # no second run dir
    assert f"run dir = {run_dir}" in more.stdout and f"run dir = {run_dir}" in (run_dir / "summary.txt").read_text()

    history = _monitor_history(run_dir)  # the first phase's validations and the new ones (logging steps from 0)
    assert sorted(history) == [1, 3, 5, 7]
    after = json.loads((run_dir / "metrics.json").read_text())
    assert after["status"] == "finished" and after["metrics"]["test/ppl"] != before["metrics"]["test/ppl"]
    assert after["monitor_value"] == history[7]
    best = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    state = next(v for k, v in best["callbacks"].items() if "ModelCheckpoint" in k)
    assert float(state["best_model_score"]) == min(history.values())  # ranked over both phases
    assert after["best_checkpoint"] == state["best_model_path"]
    assert state["best_model_path"].startswith(str(run_dir / "checkpoints"))
    info = json.loads((run_dir / "run.json").read_text())
    assert len(info["resumed_at"]) == 1

    # a config error while extending: exit 2, and the finished run's records are untouched
    bad = _run(tmp_path, *RUN, "seed=abc", f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}")
    assert bad.returncode == 2 and "seed" in bad.stderr
    assert json.loads((run_dir / "metrics.json").read_text()) == after


def test_a_config_error_or_a_refused_checkpoint_leaves_no_run_dir(tmp_path):
    early = _run(tmp_path, "seed=abc")  # refused by genlab's config check
    assert early.returncode == 2 and "config key 'seed' must be int" in early.stderr
    late = _run(tmp_path, *RUN, "trainer.max_steps=-3")  # refused by Lightning's Trainer, after the data is built
    assert late.returncode == 2 and "trainer: `max_steps` must be" in late.stderr
    assert "Traceback" not in late.stderr
    # a checkpoint whose pickle would create a file (issue 42): refused unread by both entry points
    evil, marker = tmp_path / "evil.ckpt", tmp_path / "pwned"
    torch.save({"state_dict": {}, "optimizer_states": [], "hyper_parameters": TouchPayload(marker)}, evil)
    for script, args in (("train.py", RUN), ("eval.py", [])):
        refused = _run(tmp_path, *args, f"ckpt_path={evil}", script=script)
        assert refused.returncode == 2, refused.stderr[-3000:]
        assert f"ckpt_path={evil} holds" in refused.stderr and "it was not loaded, since unpickling it could run code" \
            in refused.stderr and "Traceback" not in refused.stderr
        assert not marker.exists()
    assert list((tmp_path / "outputs").rglob("*")) == []  # the log root may stay, empty


def test_only_a_checkpoint_inside_a_run_dir_continues_that_dir(tmp_path):
    from genlab.cli.run_dir import continue_in_run_dir

    run_dir = tmp_path / "a run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"x")
    ckpt = f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}"
    assert continue_in_run_dir([ckpt]) == [ckpt]  # no run.json: not a genlab run dir
    (run_dir / "run.json").write_text("{}")
    assert continue_in_run_dir([ckpt, "trainer.max_steps=8"]) == [ckpt, "trainer.max_steps=8",
                                                                   f"hydra.run.dir='{run_dir}'"]  # quoted: a space
    for unchanged in ([ckpt, f"hydra.run.dir={tmp_path / 'new'}"], [ckpt, "paths.output_dir=/x"], ["-m", ckpt],
                      ["ckpt_path=last"], [f"ckpt_path={tmp_path / 'elsewhere.ckpt'}"]):
        assert continue_in_run_dir(unchanged) == unchanged


def test_a_run_dir_with_a_checkpoint_is_never_removed(tmp_path):
    from genlab.cli.run_dir import is_fresh, remove_unused

    run_dir = tmp_path / "logs" / "exp" / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / "train.log").write_text("")
    assert is_fresh(run_dir)
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"x")
    assert not is_fresh(run_dir) and not remove_unused(run_dir, tmp_path / "logs") and run_dir.is_dir()
    (run_dir / "checkpoints" / "last.ckpt").unlink()
    assert remove_unused(run_dir, tmp_path / "logs")
    assert not (tmp_path / "logs" / "exp").exists() and (tmp_path / "logs").is_dir()  # the log root stays
