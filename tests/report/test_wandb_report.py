"""Report from a W&B group (the online path of genlab-report) against a fake ``wandb.Api``: the runs carry what
genlab's W&B logger stores (flat config, override tags, summary metrics, group, state), and the table must be the
one the same runs make from their directories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from genlab.report import ReportError, build_table, collect_runs
from genlab.report.__main__ import collect_wandb
from genlab.report.__main__ import main as report_main
from genlab.runs import flatten_dict

GROUP = "exp_mini-multirun_2026-01-01_00-00-00"
PROJECT = "me/genlab"


class FakeRun:
    """The attributes of wandb.apis.public.Run that the report reads."""

    def __init__(self, rid, group, tags, config, summary, state):
        self.id, self.group, self.tags, self.config, self.summary, self.state = rid, group, tags, config, summary, state
        self.path = ["me", "genlab", rid]


class FakeApi:
    runs_by_project: dict[str, list[FakeRun]] = {}
    calls: list[tuple[str, dict]] = []

    def __init__(self, timeout=None, **kwargs):
        pass

    def runs(self, path, filters=None, **kwargs):
        FakeApi.calls.append((path, filters))
        group = (filters or {}).get("group")
        return [r for r in self.runs_by_project.get(path, []) if group is None or r.group == group]


@pytest.fixture
def fake_wandb(monkeypatch):
    import wandb

    from genlab.callbacks import wandb as wandb_cb

    monkeypatch.setattr(wandb_cb, "is_logged_in", lambda: True)
    monkeypatch.setattr(wandb, "Api", FakeApi)
    FakeApi.runs_by_project, FakeApi.calls = {PROJECT: []}, []
    return FakeApi.runs_by_project[PROJECT]


def add_run(root: Path, runs: list, n: int, overrides: dict, metrics: dict | None, status="finished",
            experiment="exp_mini", group=GROUP, config=None):
    """One trial, twice: as its run directory and as the W&B run genlab's logger makes of it."""
    config = config or {"seed": overrides.get("seed", 0), "task": {"monitor": "valid/loss"},
                        "model": {"d": overrides.get("model.d", 8), "act": "relu"}}
    ov = [f"{k}={v}" for k, v in overrides.items()]
    d = root / f"trial_{n}"
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"experiment": experiment, "overrides": ov, "monitor": "valid/loss"}))
    (d / "config.yaml").write_text(yaml.safe_dump(config))
    if metrics is not None:
        (d / "metrics.json").write_text(json.dumps({"status": status, "metrics": metrics, "monitor": "valid/loss"}))
    state = {None: "running", "finished": "finished", "failed": "failed"}[None if metrics is None else status]
    summary = {**(metrics or {}), "_step": 10, "_runtime": 3.5, "trainer/global_step": 10, "samples": {"_type": "table"}}
    tags = [f"experiment={experiment}", "multirun", *ov]
    runs.append(FakeRun(f"id{n:05d}", group, tags, flatten_dict(config), summary, state))


def score(d, layers, seed):
    return 100.0 / d + 3 * layers + 0.1 * seed


@pytest.fixture
def twin_sweep(tmp_path, fake_wandb):
    """A 2x2x2-seed sweep plus one failed and one still-running trial, on disk and in the fake W&B project."""
    root, n = tmp_path / "sweep", 0
    for d in (8, 16):
        for layers in (2, 4):
            for seed in (1, 2):
                ov = {"model.d": d, "model.layers": layers, "seed": seed}
                add_run(root, fake_wandb, n, ov, {"valid/loss": score(d, layers, seed), "test/loss": 1.0 + seed})
                n += 1
    add_run(root, fake_wandb, n, {"model.d": 8, "model.layers": 2, "seed": 3}, {}, status="failed")
    add_run(root, fake_wandb, n + 1, {"model.d": 16, "model.layers": 4, "seed": 3}, None)
    # another sweep's run in the same project must not leak into this group's table
    add_run(tmp_path / "other", fake_wandb, 99, {"model.d": 8, "model.layers": 2, "seed": 1}, {"valid/loss": 1e6},
            group="exp_mini-multirun_other")
    return root


def _summary(table):
    return {k: (c.n, c.failed, round(c.mean, 9), round(c.std, 9)) for k, c in table.cells.items()}


def test_wandb_group_gives_the_same_table_as_the_run_directories(twin_sweep):
    from_dirs = build_table(collect_runs([twin_sweep]), rows=["model.d"], cols=["model.layers"])
    online = collect_wandb(PROJECT, GROUP)
    assert FakeApi.calls == [(PROJECT, {"group": GROUP})]
    assert len(online) == 10 and sorted(r.status for r in online).count("incomplete") == 1
    from_wandb = build_table(online, rows=["model.d"], cols=["model.layers"])
    assert (from_wandb.rows, from_wandb.cols) == (from_dirs.rows, from_dirs.cols) == ([("8",), ("16",)], [("2",), ("4",)])
    assert from_wandb.metric == from_dirs.metric == "valid/loss"
    assert _summary(from_wandb) == _summary(from_dirs)
    assert from_wandb.cell(("8",), ("2",)).failed == 1 and from_wandb.n_failed == from_dirs.n_failed == 2
    assert from_wandb.experiment == "exp_mini"
    # a key only the flat config has (no override) is read from the W&B config, as from config.yaml
    by_act = build_table(online, rows=["model.act"], metric="test/loss")
    assert by_act.cell(("relu",), ()).n == 8


def test_wandb_report_cli_writes_the_table(twin_sweep, tmp_path, capsys):
    out = tmp_path / "report"
    argv = ["--wandb-group", GROUP, "--wandb-project", PROJECT, "--rows", "model.d", "--cols", "model.layers",
            "--out", str(out), "--no-plot"]
    assert report_main(argv) == 0
    md = (out / "table.md").read_text()
    mean = (score(8, 2, 1) + score(8, 2, 2)) / 2
    assert f"| 8 | {mean:.2f} ± 0.07 |" in md and "2 failed or unfinished run(s)" in md
    assert report_main([str(twin_sweep), "--rows", "model.d", "--cols", "model.layers", "--out", str(tmp_path),
                        "--no-plot"]) == 0
    assert (tmp_path / "table.md").read_text() == md


def test_empty_wandb_group_is_named_in_the_error(fake_wandb, capsys):
    with pytest.raises(ReportError, match=r"W&B group 'nope' in project 'me/genlab' has no runs"):
        collect_wandb(PROJECT, "nope")
    assert report_main(["--wandb-group", "nope", "--wandb-project", PROJECT, "--rows", "model.d"]) == 2
    err = capsys.readouterr().err
    assert "has no runs" in err and "--wandb-project" in err


def test_wandb_group_mixing_experiments_is_refused(tmp_path, fake_wandb):
    add_run(tmp_path, fake_wandb, 0, {"seed": 1}, {"valid/loss": 1.0}, experiment="txl_ptb_mini")
    add_run(tmp_path, fake_wandb, 1, {"seed": 1}, {"valid/loss": 2.0}, experiment="awd_ptb_mini")
    runs = collect_wandb(PROJECT, GROUP)
    with pytest.raises(ReportError, match=r"mix experiments \['awd_ptb_mini', 'txl_ptb_mini'\].*--experiment"):
        build_table(runs, rows=["model.d"])
    assert build_table(runs, rows=["model.d"], experiment="awd_ptb_mini").cell(("8",), ()).mean == 2.0


def test_truncated_override_tags_do_not_hide_the_config_value(tmp_path, fake_wandb):
    from genlab.callbacks.wandb import MAX_TAG_LEN

    long_path = "/data/" + "x" * 80
    add_run(tmp_path, fake_wandb, 0, {"seed": 1}, {"valid/loss": 1.0},
            config={"seed": 1, "data": {"path": long_path}, "model": {"d": 8}})
    fake_wandb[-1].tags.append(f"data.path={long_path}"[:MAX_TAG_LEN])  # W&B's limit cut the tag
    (r,) = collect_wandb(PROJECT, GROUP)
    assert r.value_of("data.path") == long_path
