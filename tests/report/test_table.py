"""Report: run directories -> ablation table (shape, seed aggregation, failures, references, renderers, CLI)."""

from __future__ import annotations

import csv
import io
import json
import statistics
from pathlib import Path

import pytest
import yaml

from genlab.report import ReportError, build_table, collect_runs, to_csv, to_latex, to_markdown
from genlab.report.__main__ import main as report_main
from genlab.report.collect import write_multirun_summary
from genlab.report.table import attach_reference


def make_run(d: Path, overrides: dict, metrics: dict | None, status="finished", experiment="exp_mini", config=None,
             job_num=None, error=None):
    """A run directory as genlab.runs writes it (run.json, config.yaml, overrides.yaml, metrics.json)."""
    d.mkdir(parents=True)
    ov = [f"{k}={v}" for k, v in overrides.items()]
    info = {"experiment": experiment, "overrides": ov, "monitor": "valid/loss", "hydra": {"job_num": job_num}}
    (d / "run.json").write_text(json.dumps(info))
    (d / "overrides.yaml").write_text(yaml.safe_dump(ov))
    (d / "config.yaml").write_text(yaml.safe_dump(config or {"seed": 0, "model": {"d": 8, "act": "relu"}}))
    if metrics is not None:
        m = {"status": status, "metrics": metrics, "monitor": "valid/loss", "error": error,
             "monitor_value": metrics.get("valid/loss")}
        (d / "metrics.json").write_text(json.dumps(m))


def value(d, layers, seed):
    """Deterministic fake score, different for every setting and seed."""
    return 100.0 / d + 3 * layers + 0.1 * seed


@pytest.fixture
def sweep(tmp_path):
    """A 2x2x2-seed sweep: model.d in {8, 16}, model.layers in {2, 4}, seed in {1, 2}."""
    root = tmp_path / "multirun"
    n = 0
    for d in (16, 8):
        for layers in (4, 2):
            for seed in (1, 2):
                ov = {"model.d": d, "model.layers": layers, "seed": seed}
                make_run(root / f"model.d={d},model.layers={layers},seed={seed}", ov,
                         {"valid/loss": value(d, layers, seed), "test/loss": value(d, layers, seed) + 1}, job_num=n)
                n += 1
    return root


def test_table_shape_and_means_of_a_2x2x2_seed_sweep(sweep):
    runs = collect_runs([sweep])
    assert len(runs) == 8
    t = build_table(runs, rows=["model.d"], cols=["model.layers"])
    assert t.metric == "valid/loss"  # the runs' monitor by default
    assert t.rows == [("8",), ("16",)] and t.cols == [("2",), ("4",)]  # numeric order
    for d in (8, 16):
        for layers in (2, 4):
            c = t.cell((str(d),), (str(layers),))
            seeds = [value(d, layers, s) for s in (1, 2)]
            assert c.n == 2 and c.mean == pytest.approx(statistics.fmean(seeds))
            assert c.std == pytest.approx(statistics.stdev(seeds))
    md = to_markdown(t)
    assert md.count("\n| ") == 3  # header + 2 rows
    assert f"{statistics.fmean([value(8, 2, 1), value(8, 2, 2)]):.2f} ± 0.07" in md


def test_median_and_explicit_metric(sweep):
    t = build_table(collect_runs([sweep]), rows=["model.layers"], metric="test/loss", aggregate="median")
    c = t.cell(("2",), ())
    assert c.n == 4 and c.median == pytest.approx(statistics.median([value(d, 2, s) + 1 for d in (8, 16) for s in (1, 2)]))
    assert "median" in to_markdown(t) and "±" not in to_markdown(t).split("\n", 2)[2]


def test_failed_trial_is_left_out_and_reported(sweep):
    make_run(sweep / "model.d=8,model.layers=2,seed=3", {"model.d": 8, "model.layers": 2, "seed": 3},
             {}, status="failed", error="NonFiniteLossError: train/loss became nan")
    make_run(sweep / "model.d=32,model.layers=2,seed=1", {"model.d": 32, "model.layers": 2, "seed": 1},
             {"valid/loss": None}, status="failed")
    t = build_table(collect_runs([sweep]), rows=["model.d"], cols=["model.layers"])
    assert t.cell(("8",), ("2",)).n == 2 and t.cell(("8",), ("2",)).failed == 1
    assert t.n_failed == 2
    md = to_markdown(t)
    assert "| 32 | failed |" in md and "2 failed or unfinished run(s)" in md


def test_key_missing_from_overrides_comes_from_config(tmp_path):
    make_run(tmp_path / "a", {"seed": 1}, {"valid/loss": 1.0}, config={"model": {"act": "relu"}})
    make_run(tmp_path / "b", {"seed": 1, "model.act": "gelu"}, {"valid/loss": 2.0}, config={"model": {"act": "gelu"}})
    t = build_table(collect_runs([tmp_path]), rows=["model.act"])
    assert t.rows == [("gelu",), ("relu",)] and t.cell(("relu",), ()).mean == 1.0


def test_mixed_experiments_are_refused_with_a_clear_message(tmp_path):
    make_run(tmp_path / "a", {"seed": 1}, {"valid/loss": 1.0}, experiment="txl_ptb_mini")
    make_run(tmp_path / "b", {"seed": 1}, {"valid/loss": 2.0}, experiment="awd_ptb_mini")
    runs = collect_runs([tmp_path])
    with pytest.raises(ReportError, match=r"mix experiments \['awd_ptb_mini', 'txl_ptb_mini'\].*--experiment"):
        build_table(runs, rows=["model.d"])
    t = build_table(runs, rows=["experiment"])  # or compare them on purpose
    assert t.rows == [("awd_ptb_mini",), ("txl_ptb_mini",)]
    t = build_table(runs, rows=["model.d"], experiment="awd_ptb_mini")
    assert t.n_runs == 1 and t.cell(("8",), ()).mean == 2.0


def test_no_finished_runs(tmp_path):
    with pytest.raises(ReportError, match="no run directories found"):
        build_table(collect_runs([tmp_path]), rows=["model.d"])
    make_run(tmp_path / "a", {"seed": 1}, {}, status="failed")
    make_run(tmp_path / "b", {"seed": 2}, None)  # still running or killed
    with pytest.raises(ReportError, match=r"no finished runs among 2 \(\{'failed': 1, 'incomplete': 1\}\)"):
        build_table(collect_runs([tmp_path]), rows=["model.d"])


def test_unknown_key_and_metric_are_named(sweep):
    runs = collect_runs([sweep])
    with pytest.raises(ReportError, match="key 'model.dd' is in no run"):
        build_table(runs, rows=["model.dd"])
    with pytest.raises(ReportError, match="metric 'test/ppl' is in no finished run.*test/loss"):
        build_table(runs, rows=["model.d"], metric="test/ppl")
    with pytest.raises(ReportError, match="aggregated over"):
        build_table(runs, rows=["seed"])


def test_reference_numbers_sit_beside_ours(sweep, tmp_path):
    t = build_table(collect_runs([sweep]), rows=["model.d"], cols=["model.layers"])
    ref = {"values": [{"model.d": 8, "model.layers": 2, "value": 18.5}, {"model.d": 99, "model.layers": 2, "value": 1}]}
    assert attach_reference(t, ref) == 1
    assert "(18.50)" in to_markdown(t, with_reference=True) and "(18.50)" not in to_markdown(t)
    rows = list(csv.DictReader(io.StringIO(to_csv(t))))
    assert len(rows) == 4 and rows[0]["reference"] == "18.5" and rows[0]["n"] == "2"


def test_latex_is_escaped_and_has_pm(sweep):
    t = build_table(collect_runs([sweep]), rows=["model.d"], cols=["model.layers"])
    tex = to_latex(t)
    assert r"\begin{tabular}{lcc}" in tex and r"$\pm$" in tex and r"valid/loss" in tex and "model.d" in tex
    assert "_" not in tex.replace(r"\_", "")


def test_cli_writes_md_csv_tex_png_and_uses_reference_defaults(sweep, tmp_path, capsys):
    exp = tmp_path / "experiments" / "toy_table"
    exp.mkdir(parents=True)
    (exp / "reference.yaml").write_text(yaml.safe_dump({
        "title": "Toy table", "metric": "test/loss", "rows": ["model.d"], "cols": ["model.layers"],
        "aggregate": "mean_std", "precision": 1, "values": [{"model.d": 16, "model.layers": 4, "value": 20.0}],
    }))
    assert report_main([str(sweep), "--reference", str(exp / "reference.yaml")]) == 0
    for ext in ("md", "csv", "tex", "png"):
        assert (exp / f"table.{ext}").stat().st_size > 0
    md = (exp / "table.md").read_text()
    assert md.startswith("# Toy table") and "(20.0)" in md and "test/loss" in md
    assert report_main([str(sweep), "--rows", "nope"]) == 2
    assert "key 'nope'" in capsys.readouterr().err


def test_summary_lists_each_trial_with_status(sweep):
    make_run(sweep / "bad", {"model.d": 8, "model.layers": 2, "seed": 9}, {}, status="failed",
             error="RuntimeError: CUDA out of memory", job_num=8)
    hydra_only = sweep / "crashed" / ".hydra"  # a trial killed before it wrote run.json
    hydra_only.mkdir(parents=True)
    (hydra_only / "overrides.yaml").write_text(yaml.safe_dump(["model.d=16", "seed=3"]))
    s = write_multirun_summary(sweep)
    assert (s["n_trials"], s["n_finished"], s["n_failed"], s["n_incomplete"]) == (10, 8, 1, 1)
    assert [t["job_num"] for t in s["trials"][:9]] == list(range(9))
    assert json.loads((sweep / "multirun_summary.json").read_text())["n_failed"] == 1
    md = (sweep / "multirun_summary.md").read_text()
    assert "| 8 | `model.d=8 model.layers=2 seed=9` | failed |" in md and "out of memory" in md
    assert "`model.d=16 seed=3` | incomplete" in md


def test_wandb_group_needs_a_login_and_says_so(tmp_path, monkeypatch, capsys):
    for k in ("WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no_netrc"))
    assert report_main(["--wandb-group", "txl_mini-multirun_x", "--rows", "model.d"]) == 2
    assert "wandb login" in capsys.readouterr().err


def test_run_curves_png_from_the_csv_log(tmp_path):
    from genlab.report.plot import plot_run_curves

    log = tmp_path / "csv" / "metrics.csv"
    log.parent.mkdir()
    rows = ["epoch,step,train/loss,lr-Adam,train/tokens_per_sec,valid/loss"]
    rows += [f"0,{s},{5 - s * 0.1},{1e-3 * s / 10},{1000 + s},{'' if s % 5 else 4.0}" for s in range(1, 11)]
    log.write_text("\n".join(rows) + "\n")
    out = plot_run_curves(tmp_path)
    assert out == tmp_path / "curves.png" and out.stat().st_size > 1000
    assert plot_run_curves(tmp_path / "nothing") is None
